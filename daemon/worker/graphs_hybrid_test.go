package worker

import (
	"errors"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// hybridGraphs drives hybrid sequences through an in-process rank with
// the fake recorder (which replays against the state and pool it
// recorded with), checking after every step that a replay ran the graph
// of the step's own state.
type hybridGraphs struct {
	t     *testing.T
	rk    *rank
	f     *fakeGrapher
	model *models.Model // the cold reference
	// replays counts launches per state object (per state id at the time).
	replays map[models.RecurrentState]int
}

// hseq is one sequence: its state id, its blocks, the tokens it absorbed
// and the greedy token it has not been fed yet.
type hseq struct {
	id    uint64
	table []int32
	hist  []int32
	next  int32
}

const hybridBS = 4

func newHybridGraphs(t *testing.T, arch string, blocks int) *hybridGraphs {
	t.Helper()
	needFixture(t, arch)
	rk, f := newGraphRankOf(t, arch, blocks, hybridBS)
	if !rk.graphs.perState {
		t.Fatal("a hybrid cache not keyed by state")
	}
	return &hybridGraphs{t: t, rk: rk, f: f, model: inProcess(t, arch), replays: map[models.RecurrentState]int{}}
}

func (h *hybridGraphs) call(typ msgType, payload []byte) (msgType, []byte) {
	h.t.Helper()
	rt, p, extra, err := h.rk.handle(frame{typ: typ, payload: payload})
	if err != nil {
		h.t.Fatalf("%s: %v", typ, err)
	}
	return rt, append(slices.Clip(p), extra...)
}

// open makes a sequence with a new state over blocks [lo, lo+n), listed
// backwards so that padding is never block 0.
func (h *hybridGraphs) open(id uint64, lo, n int) *hseq {
	h.t.Helper()
	h.call(msgNewState, encodeStateID(id))
	s := &hseq{id: id}
	for i := range n {
		s.table = append(s.table, int32(lo+n-1-i))
	}
	return s
}

// prefill feeds toks (several at once: an eager pass).
func (h *hybridGraphs) prefill(s *hseq, toks []int32) {
	h.t.Helper()
	_, l, err := stateStep(h.rk, msgForward, s.id, s.table, len(s.hist), toks, models.LastLogits)
	if err != nil {
		h.t.Fatal(err)
	}
	s.hist = append(s.hist, toks...)
	s.next = session.Argmax(l)
}

// step feeds s.next with ForwardArgmax (or Forward, asking for the
// logits) and checks that a replay, if one ran, was recorded for s's
// state.
func (h *hybridGraphs) step(s *hseq, logits bool) {
	h.t.Helper()
	before := h.f.launched
	var id int32
	var err error
	if logits {
		var l []float32
		_, l, err = stateStep(h.rk, msgForward, s.id, s.table, len(s.hist), []int32{s.next}, models.LastLogits)
		id = session.Argmax(l)
	} else {
		id, _, err = stateStep(h.rk, msgForwardArgmax, s.id, s.table, len(s.hist), []int32{s.next}, models.LastLogits)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	if h.f.launched != before {
		st := h.rk.states[s.id]
		if h.f.last.state != st {
			h.t.Fatalf("state %d's step replayed a graph recorded for another state", s.id)
		}
		h.replays[st]++
	}
	if got := h.rk.states[s.id].Pos(); got != len(s.hist)+1 {
		h.t.Fatalf("state %d at position %d after a step to %d", s.id, got, len(s.hist)+1)
	}
	s.hist = append(s.hist, s.next)
	s.next = id
}

// gen decodes n tokens of s and checks them against a cold greedy run.
func (h *hybridGraphs) gen(s *hseq, n int) {
	h.t.Helper()
	h.interleave(n, s)
}

// interleave decodes n tokens of every sequence, one step of each in
// turn, and checks each against a cold greedy run.
func (h *hybridGraphs) interleave(n int, seqs ...*hseq) {
	h.t.Helper()
	start := make([]int, len(seqs))
	for i, s := range seqs {
		start[i] = len(s.hist)
	}
	for i := range n {
		for _, s := range seqs {
			h.step(s, i%5 == 4) // now and then a step that returns logits
		}
	}
	for i, s := range seqs {
		// The first token fed may have been set by the test (a fork's).
		got := append(slices.Clone(s.hist[start[i]+1:]), s.next)
		want := greedy(h.t, h.model, s.hist[:start[i]+1], n)
		if !slices.Equal(got, want) {
			h.t.Fatalf("state %d from position %d: replayed %v, cold %v", s.id, start[i], got, want)
		}
	}
}

// fork clones src's state under id into a sequence over new blocks
// holding a copy of src's KV.
func (h *hybridGraphs) fork(src *hseq, id uint64, lo, n int) *hseq {
	h.t.Helper()
	h.call(msgCloneState, encodeClone(src.id, id))
	s := &hseq{id: id, hist: slices.Clone(src.hist), next: src.next}
	for i := range n {
		s.table = append(s.table, int32(lo+n-1-i))
	}
	for b := range (len(src.hist) + hybridBS - 1) / hybridBS {
		var e enc
		e.i32(int(s.table[b]))
		e.i32(int(src.table[b]))
		h.call(msgCopyBlock, e.b)
	}
	return s
}

func (h *hybridGraphs) snapshot(s *hseq) []float32 {
	h.t.Helper()
	typ, p := h.call(msgSnapshotState, encodeStateID(s.id))
	d := dec{b: p}
	data := d.f32s("state")
	if typ != msgBlock || d.done("snapshot") != nil {
		h.t.Fatalf("snapshot reply %s", typ)
	}
	return data
}

// truncate restores s's state to a snapshot taken at pos.
func (h *hybridGraphs) truncate(s *hseq, snap []float32, pos int) {
	h.t.Helper()
	e := restoreHeader(s.id, pos)
	e.f32sHeader(len(snap))
	h.call(msgRestoreState, append(e.b, f32Bytes(snap)...))
	s.hist = s.hist[:pos]
}

func (h *hybridGraphs) free(ids ...uint64) {
	h.t.Helper()
	h.call(msgFreeStates, encodeFreeStates(ids))
}

// cached lists the state ids of the cache's recordings.
func (h *hybridGraphs) cached() (ids []uint64) {
	for _, e := range h.rk.graphs.entries {
		ids = append(ids, e.key.state)
	}
	return ids
}

// TestHybridGraphDecodeExact: decode steps of hybrid models replay
// recordings keyed by (bucket, state), recorded by a fake that replays
// against the state it recorded with, and every sequence's greedy tokens
// equal a cold run's: decode across buckets, two sequences interleaved,
// a fork (clone) decoded alongside its source, a truncation (restore in
// place, whose recordings stay in use), a reset, and a freed state whose
// id is reused for a new state. No replay ever runs a graph recorded for
// another state.
func TestHybridGraphDecodeExact(t *testing.T) {
	for _, arch := range hybrids {
		t.Run(arch, func(t *testing.T) {
			h := newHybridGraphs(t, arch, 128)
			rk, f := h.rk, h.f
			a := h.open(1, 0, 32)
			h.prefill(a, prompt(13, 1))
			// Positions 13..44: buckets 4, 8 and 16.
			h.gen(a, 32)
			if f.captures != 3 || f.launched != 31 {
				t.Fatalf("%d recordings (want 3), %d replays (want 31: the first step is eager)", f.captures, f.launched)
			}
			// A second sequence interleaved: its own recordings.
			b := h.open(2, 32, 32)
			h.prefill(b, prompt(6, 2))
			caps := f.captures
			h.interleave(12, a, b)
			if f.captures == caps || h.replays[rk.states[2]] == 0 {
				t.Fatalf("the second state replayed nothing of its own (%d recordings)", f.captures-caps)
			}
			// A fork decoded alongside its source after a different token.
			c := h.fork(a, 3, 64, 32)
			c.next = (c.next + 1) % 500
			h.interleave(6, a, c)
			if h.replays[rk.states[3]] == 0 {
				t.Fatal("the fork replayed nothing")
			}
			// Truncation: Restore writes in place, so b's recordings
			// serve it on.
			pos := len(b.hist)
			snap := h.snapshot(b)
			h.gen(b, 5)
			h.truncate(b, snap, pos)
			b.next = (b.next + 7) % 500
			caps, before := f.captures, h.replays[rk.states[2]]
			h.gen(b, 5)
			if f.captures != caps || h.replays[rk.states[2]] != before+5 {
				t.Fatalf("after a restore in place: %d new recordings, %d replays (want 0, 5)", f.captures-caps, h.replays[rk.states[2]]-before)
			}
			// Reset: in place as well.
			h.call(msgResetState, encodeStateID(b.id))
			b.hist = nil
			h.prefill(b, prompt(9, 4))
			h.gen(b, 6)
			// Free a and b; a new state takes b's id: nothing recorded
			// for the old b may serve it.
			open := f.open
			h.free(a.id, b.id)
			if slices.Contains(h.cached(), a.id) || slices.Contains(h.cached(), b.id) || f.open >= open {
				t.Fatalf("freed states' recordings kept: cache %v, %d open (were %d)", h.cached(), f.open, open)
			}
			b2 := h.open(2, 96, 32)
			h.prefill(b2, prompt(6, 2)) // b's prompt, so the same buckets
			h.interleave(10, b2, c)
			if n := h.replays[rk.states[2]]; n == 0 {
				t.Fatal("the reused id replayed nothing")
			}
			if len(rk.graphs.entries) > maxGraphs || f.open != len(rk.graphs.entries) {
				t.Fatalf("%d recordings cached, %d open (bound %d)", len(rk.graphs.entries), f.open, maxGraphs)
			}
			if !rk.graphs.usable() {
				t.Fatal("replay turned off")
			}
		})
	}
}

// TestHybridGraphMisuse: steps the eager path refuses (no state, an
// unknown state, a state not at the step's position) are not replayed,
// answer their error and leave replay on; a recording found under a
// state id that now names another object (freed and reused without the
// free reaching the cache) is dropped, not replayed.
func TestHybridGraphMisuse(t *testing.T) {
	arch := "qwen3_5"
	h := newHybridGraphs(t, arch, 64)
	rk, f := h.rk, h.f
	a := h.open(1, 0, 32)
	h.prefill(a, prompt(10, 1))
	h.gen(a, 4)
	launched := f.launched
	for _, c := range []struct {
		id  uint64
		pos int
	}{{0, len(a.hist)}, {9, len(a.hist)}, {a.id, len(a.hist) - 1}, {a.id, len(a.hist) + 1}} {
		if _, _, err := stateStep(rk, msgForwardArgmax, c.id, a.table, c.pos, []int32{a.next}, models.LastLogits); err == nil {
			t.Fatalf("state %d at %d: accepted", c.id, c.pos)
		}
	}
	if f.launched != launched || !rk.graphs.usable() {
		t.Fatalf("refused steps replayed (%d) or turned replay off", f.launched-launched)
	}
	h.gen(a, 3)
	// Swap the object under id 1 behind the cache's back.
	old := rk.states[a.id]
	rk.states[a.id] = old.Clone()
	caps := f.captures
	h.gen(a, 3)
	if f.captures != caps+1 {
		t.Fatalf("%d recordings for the swapped state, want 1", f.captures-caps)
	}
	for _, e := range rk.graphs.entries {
		if e.owner == old {
			t.Fatal("a recording for the replaced object is still cached")
		}
	}
}

// TestHybridGraphChurn: more sequences decoding round-robin than the cache
// holds do not record a graph on every step: the sequences beyond the
// bound run eagerly while the others replay, all exact; once sequences
// are freed the others get recordings.
func TestHybridGraphChurn(t *testing.T) {
	h := newHybridGraphs(t, "qwen3_next", 256)
	rk, f := h.rk, h.f
	const n = maxGraphs + 3
	var seqs []*hseq
	for i := range n {
		s := h.open(uint64(i+1), 20*i, 20)
		h.prefill(s, prompt(5, int32(i)))
		seqs = append(seqs, s)
	}
	// Positions 5..14 lie in bucket 4: one recording per sequence.
	h.interleave(10, seqs...)
	if f.captures != maxGraphs {
		t.Fatalf("%d recordings for %d sequences, want %d (the bound)", f.captures, n, maxGraphs)
	}
	replayed := 0
	for _, s := range seqs {
		if h.replays[rk.states[s.id]] > 0 {
			replayed++
		}
	}
	if replayed != maxGraphs {
		t.Fatalf("%d sequences replayed, want %d", replayed, maxGraphs)
	}
	// Free the first three: the sequences left out get recordings.
	h.free(1, 2, 3)
	h.interleave(4, seqs[3:]...)
	for _, s := range seqs[3:] {
		if h.replays[rk.states[s.id]] == 0 {
			t.Fatalf("state %d never replayed after others were freed", s.id)
		}
	}
	if len(rk.graphs.entries) != maxGraphs || f.open != maxGraphs {
		t.Fatalf("%d cached, %d open", len(rk.graphs.entries), f.open)
	}
}

// TestGraphCacheStates: per-state keys in the cache itself: a state's
// recordings are dropped with it, an id naming another object misses, and
// a full hybrid cache evicts only a recording left unused for
// churnWindow lookups.
func TestGraphCacheStates(t *testing.T) {
	var closed []int
	c := newGraphCache(nil, 2)
	c.perState = true
	recorded := 0
	gen := func() uint64 { return 0 }
	get := func(bucket int, id uint64, owner any) error {
		t.Helper()
		_, err := c.graph(graphKey{bucket: bucket, state: id}, owner, gen, func() (StepGraph, error) {
			recorded++
			return &stubGraph{bucket: bucket*100 + int(id), closed: &closed}, nil
		})
		return err
	}
	x, y, z := new(int), new(int), new(int)
	for _, k := range []struct {
		id    uint64
		owner any
	}{{1, x}, {2, y}, {1, x}, {2, y}} {
		if err := get(4, k.id, k.owner); err != nil {
			t.Fatal(err)
		}
	}
	if recorded != 2 {
		t.Fatalf("%d recordings for two states, want 2", recorded)
	}
	// A third state while both are in use: eager, nothing evicted.
	if err := get(4, 3, z); err != errThrash || recorded != 2 || len(closed) != 0 {
		t.Fatalf("churn: %v, %d recordings, closed %v", err, recorded, closed)
	}
	// Id 2 now names another object: its recording is closed, not reused.
	if err := get(4, 2, z); err != nil || recorded != 3 || !slices.Equal(closed, []int{402}) {
		t.Fatalf("reused id: %v, %d recordings, closed %v", err, recorded, closed)
	}
	c.dropState(1)
	if len(c.entries) != 1 || !slices.Equal(closed, []int{402, 401}) {
		t.Fatalf("dropState: %d cached, closed %v", len(c.entries), closed)
	}
	c.dropState(0) // attention-only recordings are never dropped per state
	// Unused long enough, a recording may be evicted.
	if err := get(8, 2, z); err != nil {
		t.Fatal(err)
	}
	for range churnWindow {
		if err := get(8, 2, z); err != nil {
			t.Fatal(err)
		}
	}
	if err := get(4, 5, x); err != nil || !slices.Equal(closed, []int{402, 401, 402}) {
		t.Fatalf("stale eviction: %v, closed %v", err, closed)
	}
}

// TestHybridGraphRecordingFails: a recording that fails after its pass ran
// (Forward's host code moved the state's position, no op ran) leaves the
// state where the step started: the eager path takes the step, every
// later step runs eagerly, and the tokens are exact.
func TestHybridGraphRecordingFails(t *testing.T) {
	for _, arch := range hybrids {
		t.Run(arch, func(t *testing.T) {
			h := newHybridGraphs(t, arch, 64)
			h.f.failAfter = errors.New("cannot record")
			a := h.open(1, 0, 32)
			h.prefill(a, prompt(11, 3))
			h.gen(a, 8)
			if h.f.captures != 1 || h.f.launched != 0 || h.rk.graphs.usable() {
				t.Fatalf("%d recordings (want 1), %d replays (want 0), replay on %v", h.f.captures, h.f.launched, h.rk.graphs.usable())
			}
		})
	}
}
