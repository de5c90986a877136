package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/cache"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// hybrids are the fixtures with recurrent (Gated DeltaNet) layers.
var hybrids = []string{"qwen3_5", "qwen3_next"}

func needFixture(t *testing.T, arch string) {
	t.Helper()
	if _, err := os.Stat(fixture(arch)); err != nil {
		t.Skipf("no %s fixture", arch)
	}
}

// TestHybridSessionsOverWorker: append, greedy and sampled generation
// (decode steps by the token paths where no snapshot wants the logits),
// forks inside and at the end of the KV, truncation and prefix reuse of
// hybrid models over a worker process, and over a tensor-parallel group
// of CPU rank processes (each holding its heads' share of every
// recurrent state), give exactly the tokens and reuse counts of the
// in-process model, and greedy runs match a cold run. The worker holds
// the snapshots (models.HoldingState), or, in the host/ runs, the daemon
// keeps them as data.
func TestHybridSessionsOverWorker(t *testing.T) {
	for _, world := range worlds() {
		for _, arch := range hybrids {
			t.Run(fmt.Sprintf("tp%d/%s", world, arch), func(t *testing.T) {
				needFixture(t, arch)
				hybridParity(t, arch, world, false)
			})
		}
	}
	for _, arch := range hybrids {
		t.Run("host/"+arch, func(t *testing.T) {
			needFixture(t, arch)
			hybridParity(t, arch, 1, true)
		})
	}
}

// snapEvery snapshots hybrid states at every block boundary (16 tokens),
// so that forks, truncations and prefix reuse restore snapshots into
// worker-side states instead of recomputing.
var snapEvery = cache.Intervals{Dense: 16, Until: 16, Sparse: 16}

// hybridPair is newPair for a hybrid model on world ranks, with
// snapshots every block (in the daemon's memory where hostSnaps, else
// held by the worker) and a host tier of hostBytes.
func hybridPair(t *testing.T, arch string, world, kvBlocks int, hostBytes int64, hostSnaps bool) *pair {
	px := startProxy(t, arch, world, time.Minute)
	m := inProcess(t, arch)
	cfg := func(r session.Runner) session.ModelConfig {
		return session.ModelConfig{Name: arch, Model: r, KVBlocks: kvBlocks, BlockSize: 16,
			SnapshotIntervals: snapEvery, HostTierBytes: hostBytes, HostSnapshots: hostSnaps}
	}
	return &pair{t: t, local: newManager(t, cfg(m)), remote: newManager(t, cfg(px)), model: arch,
		ids: map[string][2]string{}, inproc: m, workerPx: px}
}

func hybridParity(t *testing.T, arch string, world int, hostSnaps bool) {
	p := hybridPair(t, arch, world, 0, 0, hostSnaps)
	greedyN := func(n int) session.GenerateParams { return session.GenerateParams{MaxTokens: n} }
	p.open("a")
	p1, p2 := prompt(37, 1), prompt(9, 2)
	p.append("a", p1)
	// One pass over the 37 tokens: the snapshots at 16 and 32 are the
	// copies it left (MarkState), held by the worker or read to the
	// daemon (host snapshots).
	if info := p.remote.Models()[0]; info.Snapshots != 2 || info.HeldSnapshots != map[bool]int{false: 2, true: 0}[hostSnaps] {
		t.Errorf("after the first prompt: %d snapshots, %d held, want 2 (host snapshots: %v)", info.Snapshots, info.HeldSnapshots, hostSnaps)
	}
	g1 := p.generate("a", greedyN(6))
	if want := greedy(t, p.inproc, p1, 6); !slices.Equal(g1, want) {
		t.Fatalf("worker greedy %v, cold %v", g1, want)
	}
	// Append vs cold: the appended tokens continue the live state.
	p.append("a", p2)
	g2 := p.generate("a", greedyN(4))
	hist := slices.Concat(p1, g1, p2)
	if want := greedy(t, p.inproc, hist, 4); !slices.Equal(g2, want) {
		t.Fatalf("after an append: worker %v, cold %v", g2, want)
	}
	// Decode steps that end off the snapshot positions take the token
	// paths (argmax, draw) as attention models' do.
	if p.workerPx.ArgmaxSteps() == 0 {
		t.Error("no argmax-only step in a hybrid's greedy decode")
	}
	seed := uint64(7)
	p.generate("a", session.GenerateParams{MaxTokens: 8, Sampling: session.SamplingParams{Temperature: 0.9, TopP: 0.95, Seed: &seed},
		Logprobs: true, TopLogprobs: 3})
	drawn := p.workerPx.SampledSteps()
	p.generate("a", session.GenerateParams{MaxTokens: 8, Sampling: session.SamplingParams{Temperature: 0.9, TopP: 0.95, Seed: &seed}})
	if p.workerPx.SampledSteps() == drawn {
		t.Error("no drawn step in a hybrid's sampled decode")
	}
	// Forks: before any snapshot (recompute), at snapshot boundaries
	// (restore), inside a block and at the end of the KV (clone).
	for _, at := range []int{1, 16, 23, 32, 40, 64} {
		name := fmt.Sprint("fork", at)
		p.fork("a", name, at)
		ids := p.generate(name, greedyN(4))
		toks, err := p.remote.Tokens(1, p.ids[name][1])
		if err != nil {
			t.Fatal(err)
		}
		before := toks[:len(toks)-len(ids)]
		if want := greedy(t, p.inproc, before, 4); !slices.Equal(ids, want) {
			t.Fatalf("fork at %d: worker %v, cold %v", at, ids, want)
		}
	}
	for _, n := range []int{50, 33, 17} {
		p.truncate("a", n)
		ids := p.generate("a", greedyN(3))
		toks, _ := p.remote.Tokens(1, p.ids["a"][1])
		if want := greedy(t, p.inproc, toks[:n], 3); !slices.Equal(ids, want) {
			t.Fatalf("truncate to %d: worker %v, cold %v", n, ids, want)
		}
	}
	// Prefix reuse: a new session with the same first 37 tokens resumes
	// from a snapshot restored into a new worker-side state.
	p.open("b")
	r := p.append("b", slices.Concat(p1, prompt(5, 3)))
	if r.Reused == 0 {
		t.Errorf("no prefix reuse over the worker: %+v", r)
	}
	gb := p.generate("b", greedyN(5))
	if want := greedy(t, p.inproc, slices.Concat(p1, prompt(5, 3)), 5); !slices.Equal(gb, want) {
		t.Fatalf("after prefix reuse: worker %v, cold %v", gb, want)
	}
	info := p.remote.Models()[0]
	if held := info.HeldSnapshots; info.Snapshots == 0 || hostSnaps != (held == 0) || !hostSnaps && held != info.Snapshots {
		t.Errorf("%d snapshots, %d of them held by the worker (host snapshots: %v)", info.Snapshots, held, hostSnaps)
	}
	// Closing sessions frees their states in the worker (sent with the
	// next request).
	for name, id := range p.ids {
		if name != "b" {
			if err := p.remote.Close(1, id[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.generate("b", greedyN(2))
	if p.workerPx.StatesFreed() == 0 {
		t.Error("no recurrent state was freed in the worker")
	}
}

// TestKillHybridWorker: kill -9 of a worker serving a hybrid model, between
// requests and during one (SIGSTOP: the request times out): the states are
// lost with it, the next forward reports lost KV, and every session
// continues with exactly the tokens of a cold run (its state recomputed
// from the token history in the new worker).
func TestKillHybridWorker(t *testing.T) {
	for _, arch := range hybrids {
		t.Run(arch, func(t *testing.T) {
			needFixture(t, arch)
			killHybrid(t, arch)
		})
	}
}

func killHybrid(t *testing.T, arch string) {
	px := startProxy(t, arch, 1, 3*time.Second)
	m := inProcess(t, arch)
	mgr := newManager(t, session.ModelConfig{Name: arch, Model: px, BlockSize: 16, SnapshotIntervals: snapEvery})
	open := func(toks []int32) string {
		info, err := mgr.Open(1, arch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mgr.Append(bg, 1, info.ID, session.AppendInput{Tokens: toks}); err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	gen := func(id string, n int) {
		t.Helper()
		before, _ := mgr.Tokens(1, id)
		r, err := mgr.Generate(bg, 1, id, session.GenerateParams{MaxTokens: n}, nil)
		if err != nil {
			t.Fatalf("generate after a worker loss: %v", err)
		}
		if want := greedy(t, m, before, n); !slices.Equal(r.IDs, want) {
			t.Fatalf("after a worker loss: %v, cold run %v", r.IDs, want)
		}
	}
	a, b := open(prompt(40, 1)), open(prompt(40, 1)) // b reuses a's prefix and snapshots
	gen(a, 5)
	gen(b, 2)
	f, err := mgr.Fork(1, a, 20)
	if err != nil {
		t.Fatal(err)
	}
	gen(f.ID, 3)

	pid := px.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return px.Restarts() >= 1 && px.Health() == nil }, "the worker to restart")
	gen(a, 6)
	gen(b, 3)
	gen(f.ID, 2)
	c := open(prompt(33, 1))
	gen(c, 4)

	pid = px.PID()
	stopProcess(t, pid)
	start := time.Now()
	gen(a, 3)
	lostStopped(t, px, pid, 2, time.Since(start))
	gen(b, 2)
	gen(c, 2)
}

// TestHybridStateOps: the remote state's own operations against the
// in-process model's: snapshots match bit for bit, a restored or cloned
// state continues exactly, Reset starts over, and a state of a dead
// worker is reported as lost KV and never reaches the new worker.
func TestHybridStateOps(t *testing.T) {
	arch := "qwen3_5"
	needFixture(t, arch)
	px := startProxy(t, arch, 1, 3*time.Second)
	m := inProcess(t, arch)
	const bs = 16
	kp, err := px.NewKVPool(px.KVSpec(16, bs))
	if err != nil {
		t.Fatal(err)
	}
	lp, err := m.Backend.NewKVPool(m.KVSpec(16, bs))
	if err != nil {
		t.Fatal(err)
	}
	toks := prompt(20, 5)
	table := []int32{0, 1}
	rs := px.NewState().(models.RecurrentState)
	ls := m.NewState().(models.RecurrentState)
	if rs.Len() != ls.Len() || rs.Pos() != 0 {
		t.Fatalf("state of %d values at %d, in process %d", rs.Len(), rs.Pos(), ls.Len())
	}
	if snap := rs.Snapshot(); len(snap) != rs.Len() || slices.ContainsFunc(snap, func(v float32) bool { return v != 0 }) {
		t.Fatal("a fresh state's snapshot is not zeros")
	}
	rl, err := px.Forward(models.Seq{Pool: kp, Table: table, State: rs}, toks, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	ll, err := m.Forward(models.Seq{Pool: lp, Table: table, State: ls}, toks, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rl, ll) || rs.Pos() != 20 {
		t.Fatalf("forward with state: logits differ or pos %d", rs.Pos())
	}
	if !slices.Equal(rs.Snapshot(), ls.Snapshot()) {
		t.Fatal("snapshot differs from the in-process state's")
	}
	// A clone and a restored fresh state continue like the original.
	ag := cloneRestoreAgree(t, px, kp, rs, ls.Snapshot())
	c, fresh, step, want := ag.clone, ag.fresh, ag.step, ag.want
	// A wrong position is refused without reaching the worker.
	if _, err := px.Forward(models.Seq{Pool: kp, Table: table, Start: 5, State: rs}, []int32{1}, models.LastLogits); !errors.Is(err, models.ErrState) {
		t.Fatalf("forward at the wrong position: %v", err)
	}
	rs.Reset()
	if rs.Pos() != 0 {
		t.Fatalf("reset state at %d", rs.Pos())
	}
	if l, err := px.Forward(models.Seq{Pool: kp, Table: table, State: rs}, toks, models.LastLogits); err != nil || !slices.Equal(l, ll) {
		t.Fatalf("after reset: %v", err)
	}

	// Kill the worker: the states die with it.
	if err := syscall.Kill(px.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return px.Restarts() >= 1 && px.Health() == nil }, "the worker to restart")
	if rs.Pos() != -1 || rs.Snapshot() != nil {
		t.Fatalf("a state of a dead worker: pos %d", rs.Pos())
	}
	_, err = px.Forward(models.Seq{Pool: kp, Table: table, Start: 21, State: c}, []int32{7}, models.LastLogits)
	if !errors.Is(err, session.ErrKVLost) {
		t.Fatalf("forward with a state of a dead worker: %v", err)
	}
	cc := c.Clone()
	if cc.Pos() != -1 {
		t.Fatal("a clone of a lost state looks usable")
	}
	// A restore revives a lost state in the new worker.
	if err := c.Restore(ls.Snapshot(), 20); err != nil {
		t.Fatal(err)
	}
	if _, err := px.Forward(models.Seq{Pool: kp, Table: table, State: px.NewState()}, toks, models.NoLogits); err != nil {
		t.Fatal(err)
	}
	px.CopyKVBlock(kp, 2, 1)
	if got := step(c, table2{0, 2}); !slices.Equal(got, want) {
		t.Fatal("state restored after a restart diverged")
	}
	for _, st := range []models.RecurrentState{rs, c, cc, fresh} {
		st.(interface{ Free() }).Free()
	}
	if err := px.Ping(); err != nil {
		t.Fatal(err)
	}
}

type table2 = []int32

// restoredStates are cloneRestoreAgree's states, step and reference.
type restoredStates struct {
	clone, fresh models.RecurrentState
	step         func(st any, pool table2) []float32
	want         []float32 // rs's logits at position 20
}

// cloneRestoreAgree checks that a clone of rs (at position 20) and a fresh
// state restored from snap continue like rs by one token, every state
// writing position 20's KV into its own copy of block 1 (blocks 2 and 3).
func cloneRestoreAgree(t *testing.T, px *Proxy, kp kernels.KVPool, rs models.RecurrentState, snap []float32) restoredStates {
	t.Helper()
	r := restoredStates{clone: rs.Clone(), fresh: px.NewState().(models.RecurrentState)}
	if err := r.fresh.Restore(snap, 20); err != nil {
		t.Fatal(err)
	}
	r.step = func(st any, pool table2) []float32 {
		t.Helper()
		l, err := px.Forward(models.Seq{Pool: kp, Table: pool, Start: 20, State: st}, []int32{7}, models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	px.CopyKVBlock(kp, 2, 1)
	px.CopyKVBlock(kp, 3, 1)
	r.want = r.step(rs, table2{0, 1})
	if got := r.step(r.clone, table2{0, 2}); !slices.Equal(got, r.want) {
		t.Fatal("clone diverged")
	}
	if got := r.step(r.fresh, table2{0, 3}); !slices.Equal(got, r.want) {
		t.Fatal("restored state diverged")
	}
	return r
}

// TestHybridTPRefused: a hybrid whose heads do not divide over the
// group (the variant fixture's 3 KV heads over 2 ranks) does not start,
// with an error that says why.
func TestHybridTPRefused(t *testing.T) {
	dir := filepath.Join("..", "..", "models", "testdata", "variants", "qwen3_next")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("no qwen3_next variant fixture")
	}
	_, err := Start(Options{Command: DefaultCommand(workerBinary(t), "cpu"), World: 2,
		Hello: Hello{Backend: "cpu", Threads: 1, Name: "hybrid", Path: dir}, Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "tensor parallelism") || !strings.Contains(err.Error(), "3 KV heads") {
		t.Fatalf("qwen3_next variant on 2 ranks: %v", err)
	}
}

// TestHybridEvictionOverWorker: a small pool with a host tier makes the
// cache evict blocks of hybrid sequences, drop their states and resume
// them from snapshots (on a group: every rank's share); tokens stay
// exact.
func TestHybridEvictionOverWorker(t *testing.T) {
	for _, world := range worlds() {
		t.Run(fmt.Sprintf("tp%d", world), func(t *testing.T) { hybridEviction(t, world) })
	}
}

func hybridEviction(t *testing.T, world int) {
	arch := "qwen3_next"
	needFixture(t, arch)
	p := hybridPair(t, arch, world, 8, 64<<20, false)
	for i := range 4 {
		name := fmt.Sprint("s", i)
		p.open(name)
		p.append(name, prompt(50, int32(i%2)))
		p.generate(name, session.GenerateParams{MaxTokens: 3})
	}
	p.fork("s0", "f", 20)
	p.generate("f", session.GenerateParams{MaxTokens: 4})
	p.generate("s1", session.GenerateParams{MaxTokens: 4})
}

// TestHybridStateOpsTP: the state operations on a group of 2 CPU ranks,
// each holding half of every DeltaNet layer's heads: the group's state is
// as long as the whole model's (the shares add up), its logits are the
// in-process model's to float32 rounding, and a snapshot restored into a
// new state, and a clone, continue bit for bit like the original.
func TestHybridStateOpsTP(t *testing.T) {
	arch := "qwen3_next"
	needFixture(t, arch)
	px := startProxy(t, arch, 2, time.Minute)
	m := inProcess(t, arch)
	const bs = 16
	kp, err := px.NewKVPool(px.KVSpec(16, bs))
	if err != nil {
		t.Fatal(err)
	}
	lp, err := m.Backend.NewKVPool(m.KVSpec(16, bs))
	if err != nil {
		t.Fatal(err)
	}
	toks := prompt(20, 5)
	table := []int32{0, 1}
	rs := px.NewState().(models.RecurrentState)
	ls := m.NewState().(models.RecurrentState)
	if rs.Len() != ls.Len() {
		t.Fatalf("group state of %d values, whole model's %d", rs.Len(), ls.Len())
	}
	rl, err := px.Forward(models.Seq{Pool: kp, Table: table, State: rs}, toks, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	ll, err := m.Forward(models.Seq{Pool: lp, Table: table, State: ls}, toks, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ll {
		if !closeLogprob(rl[i], ll[i], 2) {
			t.Fatalf("logit %d: group %v, in process %v", i, rl[i], ll[i])
		}
	}
	snap := rs.Snapshot()
	if len(snap) != rs.Len() || !slices.ContainsFunc(snap, func(v float32) bool { return v != 0 }) {
		t.Fatalf("snapshot of %d values (want %d, not all zero)", len(snap), rs.Len())
	}
	ag := cloneRestoreAgree(t, px, kp, rs, snap)
	step, fresh, want := ag.step, ag.fresh, ag.want
	// The ranks' shares are not interchangeable: swapped halves give
	// another state.
	half := len(snap) / 2
	swapped := slices.Concat(snap[half:], snap[:half])
	if err := fresh.Restore(swapped, 20); err != nil {
		t.Fatal(err)
	}
	if got := step(fresh, table2{0, 3}); slices.Equal(got, want) {
		t.Fatal("a snapshot with the ranks' shares swapped continues alike: shares not per rank")
	}
}
