package worker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

func TestBucketFor(t *testing.T) {
	for _, c := range [][2]int{{0, 4}, {1, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 16}, {17, 32}, {512, 512}, {513, 1024}} {
		if got := bucketFor(c[0]); got != c[1] {
			t.Errorf("bucketFor(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

// stubGraph is a recording that only counts.
type stubGraph struct {
	bucket int
	closed *[]int
}

func (g *stubGraph) Launch(Step) error          { return nil }
func (g *stubGraph) Argmax() (int32, error)     { return 0, nil }
func (g *stubGraph) Logits(dst []float32) error { return nil }
func (g *stubGraph) Close()                     { *g.closed = append(*g.closed, g.bucket) }
func cacheBuckets(c *graphCache) (b []int) {
	for _, e := range c.entries {
		b = append(b, e.key.bucket)
	}
	return b
}

// TestGraphCache: recordings are reused per bucket, the least recently
// used is closed past the limit, a scratch generation change drops them
// all, and a failed recording turns replay off without being retried.
func TestGraphCache(t *testing.T) {
	var closed []int
	c := newGraphCache(nil, 2)
	var gen uint64
	recorded := 0
	get := func(bucket int) {
		t.Helper()
		g, err := c.graph(graphKey{bucket: bucket}, nil, func() uint64 { return gen }, func() (StepGraph, error) {
			recorded++
			return &stubGraph{bucket: bucket, closed: &closed}, nil
		})
		if err != nil || g.(*stubGraph).bucket != bucket {
			t.Fatalf("bucket %d: %v %v", bucket, g, err)
		}
	}
	get(4)
	get(8)
	get(4) // reused, now the most recent
	if recorded != 2 || !slices.Equal(cacheBuckets(c), []int{8, 4}) {
		t.Fatalf("%d recordings, cache %v", recorded, cacheBuckets(c))
	}
	get(16) // evicts 8
	if recorded != 3 || !slices.Equal(closed, []int{8}) || !slices.Equal(cacheBuckets(c), []int{4, 16}) {
		t.Fatalf("%d recordings, closed %v, cache %v", recorded, closed, cacheBuckets(c))
	}
	gen++ // the scratch moved: every recording is stale
	get(4)
	if recorded != 4 || !slices.Equal(closed, []int{8, 4, 16}) || !slices.Equal(cacheBuckets(c), []int{4}) {
		t.Fatalf("%d recordings, closed %v, cache %v", recorded, closed, cacheBuckets(c))
	}
	c.reset()
	if len(c.entries) != 0 || !c.usable() {
		t.Fatal("reset")
	}
	boom := errors.New("boom")
	for range 3 {
		_, err := c.graph(graphKey{bucket: 8}, nil, func() uint64 { return gen }, func() (StepGraph, error) { recorded++; return nil, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("failed recording: %v", err)
		}
	}
	if recorded != 5 || c.usable() {
		t.Fatalf("a failed recording was retried (%d) or left replay on", recorded)
	}
	var nilCache *graphCache
	nilCache.reset()
	if nilCache.usable() {
		t.Fatal("a nil cache is usable")
	}
}

// fakeGrapher stands in for CUDA graphs on the CPU. A "recording" runs
// the pass (to check that Model.Forward accepts the padded table), undoes
// what its ops did to the recurrent states' buffers (a recording runs no
// op; Forward's host code, which moves the state's position, does run) and
// remembers what a CUDA graph bakes in: the KV pool and the state object
// the pass used. A replay runs the step eagerly with exactly the inputs a
// CUDA graph would get, against that pool and state, not the ones the
// rank holds now: a keying or invalidation bug gives wrong tokens. It
// neither checks nor moves the state's host position, as a CUDA graph
// does not (the rank must).
type fakeGrapher struct {
	rk   *rank
	fail error
	// failAfter fails a recording after its pass ran, as EndCapture can.
	failAfter error
	captures  int
	open      int
	launched  int
	fed       int        // of them fed (LaunchFed)
	drawnFed  int        // of them drawn recordings' (CaptureDrawn)
	last      *fakeGraph // the graph launched last
}

// CaptureDrawn makes the fake a DrawnGrapher: its recording draws the
// step's token from the replay's logits by the launch's Step.Draw, as
// CUDA's sample_draw_grid_f does inside the recording.
func (f *fakeGrapher) CaptureDrawn(fwd func() error) (StepGraph, error) {
	g, err := f.Capture(fwd)
	if err != nil {
		return nil, err
	}
	g.(*fakeGraph).drawn = true
	return g, nil
}

func (f *fakeGrapher) Capture(fwd func() error) (StepGraph, error) {
	f.captures++
	if f.fail != nil {
		return nil, f.fail
	}
	type saved struct {
		data []float32
		pos  int
	}
	before := map[models.RecurrentState]saved{}
	for _, st := range f.rk.states {
		before[st] = saved{st.Snapshot(), st.Pos()}
	}
	err := fwd()
	var used models.RecurrentState
	for st, sv := range before {
		if st.Pos() == sv.pos {
			continue
		}
		if used != nil {
			return nil, errors.New("a recorded step moved two recurrent states")
		}
		used = st
		// Undo the ops but not the host code: Forward's move of the
		// position stands, as it does after a CUDA recording.
		moved := st.Pos()
		if rerr := st.Restore(sv.data, sv.pos); rerr != nil {
			return nil, rerr
		}
		st.(graphState).SetPos(moved)
	}
	if err == nil {
		err = f.failAfter
	}
	if err != nil {
		return nil, err
	}
	if f.rk.states != nil && used == nil {
		return nil, errors.New("a recorded hybrid step used no recurrent state")
	}
	f.open++
	return &fakeGraph{f: f, pool: f.rk.pool, state: used}, nil
}

type fakeGraph struct {
	f        *fakeGrapher
	pool     kernels.KVPool        // the pool at recording
	state    models.RecurrentState // the state at recording (hybrids)
	n        int                   // table length fixed by the first launch
	launches int
	logits   []float32
	drawn    bool          // CaptureDrawn's
	draw     *session.Draw // the latest launch's (drawn)
}

// Drawn reports a CaptureDrawn recording.
func (g *fakeGraph) Drawn() bool { return g.drawn }

// Draw makes the fake a StepDrawer (a draw from its logits, as CUDA's
// device draw).
func (g *fakeGraph) Draw(d session.Draw) (int32, error) {
	var dr session.Drawer
	return dr.Token(g.logits, d), nil
}

// token is the latest replay's token: drawn by its Step.Draw, or greedy.
func (g *fakeGraph) token() int32 {
	if g.drawn {
		var dr session.Drawer
		return dr.Token(g.logits, *g.draw)
	}
	return session.Argmax(g.logits)
}

func (g *fakeGraph) Launch(s Step) error {
	rk := g.f.rk
	bs := int32(rk.spec.BlockSize)
	switch {
	case g.n == 0:
		g.n = len(s.Table)
	case len(s.Table) != g.n:
		return fmt.Errorf("launch with a %d-block table, recorded with %d", len(s.Table), g.n)
	}
	if s.Slot != s.Table[s.Pos/bs]*bs+s.Pos%bs {
		return fmt.Errorf("slot %d for position %d", s.Slot, s.Pos)
	}
	if g.drawn != (s.Draw != nil) || (s.Draw != nil && s.Draw.Adjust != nil) {
		return fmt.Errorf("a launch's draw %+v for a recording drawn=%v", s.Draw, g.drawn)
	}
	g.draw = s.Draw
	seq := models.Seq{Pool: g.pool, Table: slices.Clone(s.Table), Start: int(s.Pos)}
	if g.state != nil {
		gs := g.state.(graphState)
		old := gs.Pos()
		gs.SetPos(int(s.Pos))
		defer gs.SetPos(old)
		seq.State = g.state
	}
	l, err := rk.model.Forward(seq, []int32{s.ID}, models.LastLogits)
	g.logits = l
	g.f.launched++
	g.launches++
	g.f.last = g
	return err
}

func (g *fakeGraph) Argmax() (int32, error) { return session.Argmax(g.logits), nil }

// Pending and LaunchFed make the fake a StepFeeder, as CUDA's recordings
// are: the fed step embeds the token of this graph's latest replay (its
// greedy token, or the one it drew).
func (g *fakeGraph) Pending() func() (int32, error) {
	id := g.token()
	return func() (int32, error) { return id, nil }
}

func (g *fakeGraph) LaunchFed(s Step) error {
	if g.f.last != g {
		return errors.New("fed launch after another graph's replay")
	}
	g.f.fed++
	if g.drawn {
		g.f.drawnFed++
	}
	s.ID = g.token()
	return g.Launch(s)
}
func (g *fakeGraph) Logits(dst []float32) error { copy(dst, g.logits); return nil }
func (g *fakeGraph) Close()                     { g.f.open-- }

// newGraphRank is an in-process CPU rank serving the qwen3 fixture with a
// pool of blocks blocks of bs tokens and the fake recorder.
func newGraphRank(t *testing.T, blocks, bs int) (*rank, *fakeGrapher) {
	t.Helper()
	return newGraphRankOf(t, "qwen3", blocks, bs)
}

// newGraphRankOf is newGraphRank for arch's fixture.
func newGraphRankOf(t *testing.T, arch string, blocks, bs int) (*rank, *fakeGrapher) {
	t.Helper()
	f := &fakeGrapher{}
	rk := &rank{opts: RankOptions{Backend: "cpu",
		NewBackend: func(_, _, _ int) (kernels.Backend, error) { return cpu.New(1), nil },
		Graphs:     func(kernels.Backend) StepGrapher { return f }},
		log: slog.New(slog.DiscardHandler), w: io.Discard}
	h := Hello{Version: Version, Backend: "cpu", Threads: 1, Name: arch, Path: fixture(arch),
		Pool: inProcess(t, arch).KVSpec(blocks, bs)}
	closeFn, err := rk.hello(frame{typ: msgHello, payload: h.encode()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	if rk.graphs == nil {
		t.Fatal("no graph cache")
	}
	f.rk = rk
	return rk, f
}

// decodeChain prefills toks over table through rk and continues greedily
// to n tokens, each step sent by next (its start and token).
func decodeChain(t *testing.T, rk *rank, table, toks []int32, n int, next func(start int, tok []int32) (int32, error)) []int32 {
	t.Helper()
	_, l, err := step(rk, msgForward, table, 0, toks, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	out := []int32{session.Argmax(l)}
	for len(out) < n {
		id, err := next(len(toks)+len(out)-1, out[len(out)-1:])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// step sends one forward request for tokens at start over table (cut to
// the blocks the positions cover, as the Proxy sends it) and returns the
// token or the logits.
func step(rk *rank, typ msgType, table []int32, start int, tokens []int32, want models.Logits) (int32, []float32, error) {
	return stateStep(rk, typ, 0, table, start, tokens, want)
}

// stateStep is step for the sequence of recurrent state id.
func stateStep(rk *rank, typ msgType, id uint64, table []int32, start int, tokens []int32, want models.Logits) (int32, []float32, error) {
	bs := rk.spec.BlockSize
	nb := min(len(table), (start+len(tokens)+bs-1)/bs)
	req := forwardReq{start: start, want: want, tokens: tokens, table: table[:nb], state: id}
	typ, payload, extra, err := rk.handle(frame{typ: typ, payload: req.encode()})
	if err != nil {
		return 0, nil, err
	}
	d := dec{b: append(slices.Clip(payload), extra...)}
	switch typ {
	case msgToken:
		v := d.i32("token")
		return int32(v), nil, d.done("token")
	case msgLogits:
		l := d.f32s("logits")
		return 0, l, d.done("logits")
	}
	return 0, nil, fmt.Errorf("reply %s", typ)
}

// TestGraphDecodeExact: greedy decode served by replays (padded tables,
// several buckets) gives exactly the cold greedy tokens; buffers replaced
// by a longer pass, and a new pool, drop the recordings; a failed
// recording leaves every step eager, still exact, and is not retried.
func TestGraphDecodeExact(t *testing.T) {
	const bs, blocks = 4, 64
	toks := prompt(30, 9)
	// Decode positions 30..69 cover 8..18 blocks: buckets 8, 16 and 32.
	// One more cold token checks the logits step at the end.
	const n = 40
	want := greedy(t, inProcess(t, "qwen3"), toks, n+1)
	next, want := want[n], want[:n]
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(blocks - 1 - i) // backwards, so that padding with the first block is not block 0
	}
	decode := func(rk *rank) []int32 {
		t.Helper()
		return decodeChain(t, rk, table, toks, n, func(start int, tok []int32) (int32, error) {
			id, _, err := step(rk, msgForwardArgmax, table, start, tok, models.LastLogits)
			return id, err
		})
	}

	rk, f := newGraphRank(t, blocks, bs)
	if got := decode(rk); !slices.Equal(got, want) {
		t.Fatalf("replayed greedy %v,\ncold %v", got, want)
	}
	// The first decode step runs eagerly (see replay), the others replay.
	if f.captures != 3 || f.launched != n-2 || f.open != 3 {
		t.Fatalf("%d recordings (want 3), %d replays (want %d), %d open", f.captures, f.launched, n-2, f.open)
	}
	// A one-token Forward with logits replays too, and its logits agree.
	pos := len(toks) + n - 1
	_, l, err := step(rk, msgForward, table, pos, want[n-1:], models.LastLogits)
	if err != nil || len(l) != rk.model.Config.VocabSize || f.launched != n-1 || session.Argmax(l) != next {
		t.Fatalf("logits step: %d logits, %v, %d replays, top %d want %d", len(l), err, f.launched, session.Argmax(l), next)
	}
	// Input the eager path refuses is not replayed (and keeps replay on).
	if _, _, err := step(rk, msgForwardArgmax, table, pos, []int32{-1}, models.LastLogits); err == nil {
		t.Fatal("a token outside the vocabulary was accepted")
	}
	if !rk.graphs.usable() || f.launched != n-1 {
		t.Fatal("a refused step reached the graphs")
	}
	// A pass with more rows than any before replaces the scratch.
	if _, _, err := step(rk, msgForward, table, 0, prompt(48, 2), models.NoLogits); err != nil {
		t.Fatal(err)
	}
	if _, _, err := step(rk, msgForwardArgmax, table, 48, []int32{7}, models.LastLogits); err != nil {
		t.Fatal(err)
	}
	if f.captures != 4 || f.open != 1 {
		t.Fatalf("after the scratch moved: %d recordings (want 4), %d open (want 1)", f.captures, f.open)
	}
	// A new pool drops them too.
	var e enc
	e.spec(rk.spec)
	if _, _, _, err := rk.handle(frame{typ: msgNewKVPool, payload: e.b}); err != nil || f.open != 0 {
		t.Fatalf("new pool: %v, %d open", err, f.open)
	}
	if got := decode(rk); !slices.Equal(got, want) {
		t.Fatalf("replayed greedy on the new pool %v,\ncold %v", got, want)
	}

	rk, f = newGraphRank(t, blocks, bs)
	f.fail = errors.New("cannot record")
	if got := decode(rk); !slices.Equal(got, want) {
		t.Fatalf("eager after a failed recording %v,\ncold %v", got, want)
	}
	if f.captures != 1 || f.launched != 0 || rk.graphs.usable() {
		t.Fatalf("failed recording: %d attempts (want 1), %d replays", f.captures, f.launched)
	}
}
