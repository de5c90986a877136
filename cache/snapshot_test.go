package cache

import (
	"math"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
)

// boundaries lists the snapshot positions in (0, n] by At and by Next.
func boundaries(iv Intervals, n int) (at, next []int) {
	for p := 1; p <= n; p++ {
		if iv.At(p) {
			at = append(at, p)
		}
	}
	for p := iv.Next(0); p <= n; p = iv.Next(p) {
		next = append(next, p)
	}
	return at, next
}

func TestIntervals(t *testing.T) {
	iv := DefaultIntervals.Aligned(16)
	at, next := boundaries(iv, 20000)
	if !slices.Equal(at, next) {
		t.Fatalf("At and Next disagree:\n%v\n%v", at, next)
	}
	var want []int
	for p := 256; p <= 4096; p += 256 {
		want = append(want, p)
	}
	for p := 8192; p <= 20000; p += 4096 {
		want = append(want, p)
	}
	if !slices.Equal(at, want) {
		t.Fatalf("default boundaries %v, want %v", at, want)
	}
	if iv.Next(255) != 256 || iv.Next(256) != 512 || iv.Next(4095) != 4096 || iv.Next(4096) != 8192 || iv.Next(5000) != 8192 {
		t.Error("Next around the boundaries")
	}

	// Test-sized policies are rounded to whole blocks.
	small := Intervals{Dense: 6, Until: 20, Sparse: 10}.Aligned(8)
	if small != (Intervals{Dense: 8, Until: 24, Sparse: 16}) {
		t.Fatalf("aligned %+v", small)
	}
	at, next = boundaries(small, 80)
	if want := []int{8, 16, 24, 40, 56, 72}; !slices.Equal(at, want) || !slices.Equal(next, want) {
		t.Fatalf("small boundaries %v / %v, want %v", at, next, want)
	}
	if (Intervals{Dense: 4}).Aligned(4).Sparse != 4 {
		t.Error("Sparse 0 should mean Dense")
	}

	off := Intervals{}.Aligned(16)
	if off.Enabled() || off.At(256) || off.Next(0) != math.MaxInt {
		t.Errorf("disabled policy %+v takes snapshots", off)
	}
}

func TestSnapshotStore(t *testing.T) {
	snap := func(pos int, v float32) *Snapshot {
		s := &Snapshot{Pos: pos, State: make([]float32, 4)}
		s.State[0] = v
		return s
	}
	// 48 bytes: three 16-byte snapshots.
	p, err := New(Config{Backend: cpu.New(1), Spec: spec, SnapshotBytes: 48})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	keys := ChainKeys(Seed("m", 1), []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 4)
	for i := range 3 {
		if !p.PutSnapshot(keys[i], snap(4*(i+1), float32(i))) {
			t.Fatalf("put %d refused", i)
		}
	}
	if s := p.SnapshotStats(); s.Count != 3 || s.Bytes != 48 {
		t.Fatalf("stats %+v", s)
	}
	// Using the oldest makes the second the least recently used.
	if s, ok := p.Snapshot(keys[0]); !ok || s.Pos != 4 || s.State[0] != 0 {
		t.Fatalf("get: %+v %v", s, ok)
	}
	if !p.HasSnapshot(keys[1]) { // a peek does not count as use
		t.Fatal("second snapshot missing")
	}
	p.PutSnapshot(keys[3], snap(16, 3))
	if p.HasSnapshot(keys[1]) || !p.HasSnapshot(keys[0]) || !p.HasSnapshot(keys[2]) || !p.HasSnapshot(keys[3]) {
		t.Fatal("LRU evicted the wrong snapshot")
	}
	// Logits count toward the bytes; too large for the store is refused.
	big := snap(16, 4)
	big.Logits = make([]float32, 9)
	if p.PutSnapshot(keys[3], big) {
		t.Fatal("snapshot larger than the store was admitted")
	}
	withLogits := snap(16, 5)
	withLogits.Logits = make([]float32, 4)
	if !p.PutSnapshot(keys[3], withLogits) {
		t.Fatal("replacement refused")
	}
	if s := p.SnapshotStats(); s.Bytes > 48 || s.Count != 2 || s.Rejected != 1 {
		t.Fatalf("after replacement: %+v", s)
	}
	if s, _ := p.Snapshot(keys[3]); s.State[0] != 5 {
		t.Fatal("replacement not stored")
	}

	// A pool without a snapshot budget keeps none.
	q := newPool(t, 0)
	if q.PutSnapshot(keys[0], snap(4, 0)) || q.HasSnapshot(keys[0]) {
		t.Fatal("disabled store kept a snapshot")
	}
}

// TestSnapshotFollowsBlock: without a host tier a snapshot goes when the
// block it is keyed by leaves the device pool (its KV is gone, so it could
// never be used).
func TestSnapshotFollowsBlock(t *testing.T) {
	p, err := New(Config{Backend: cpu.New(1), Spec: spec, SnapshotBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	key := ChainKeys(Seed("m", 1), []int32{1, 2, 3, 4}, 4)[0]
	b := alloc(t, p)
	p.Register(b, key)
	p.PutSnapshot(key, &Snapshot{Pos: 4, State: []float32{1}})
	p.Release(b)
	if !p.HasSnapshot(key) {
		t.Fatal("snapshot of a cached block dropped")
	}
	if n := p.EvictCached(1); n != 1 {
		t.Fatalf("evicted %d", n)
	}
	if p.HasSnapshot(key) {
		t.Fatal("snapshot outlived its block")
	}
	// A runner that lost its KV loses its snapshots too.
	p.PutSnapshot(key, &Snapshot{Pos: 4, State: []float32{1}})
	p.Invalidate()
	if p.HasSnapshot(key) || p.SnapshotStats().Bytes != 0 {
		t.Fatal("snapshot survived Invalidate")
	}
}

// fakeHeld is a state kept by a runner: its bytes, and whether released.
type fakeHeld struct {
	n        int64
	released int
}

func (h *fakeHeld) Bytes() int64 { return h.n }
func (h *fakeHeld) Release()     { h.released++ }

// TestHeldSnapshots: a held state counts its bytes against the store and
// is released exactly once when its entry goes — evicted, replaced,
// dropped with its block, cleared — or at once when the store refuses it.
func TestHeldSnapshots(t *testing.T) {
	p, err := New(Config{Backend: cpu.New(1), Spec: spec, SnapshotBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	keys := ChainKeys(Seed("m", 1), []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 4)
	hs := make([]*fakeHeld, 6)
	for i := range hs {
		hs[i] = &fakeHeld{n: 40}
	}
	p.PutSnapshot(keys[0], &Snapshot{Pos: 4, Held: hs[0]})
	p.PutSnapshot(keys[1], &Snapshot{Pos: 8, Held: hs[1]})
	if s := p.SnapshotStats(); s.Count != 2 || s.Held != 2 || s.Bytes != 80 {
		t.Fatalf("stats %+v", s)
	}
	p.PutSnapshot(keys[2], &Snapshot{Pos: 12, Held: hs[2]}) // evicts keys[0]
	p.PutSnapshot(keys[1], &Snapshot{Pos: 8, Held: hs[3]})  // replaces hs[1]
	if p.PutSnapshot(keys[3], &Snapshot{Pos: 16, Held: &fakeHeld{n: 101}}) {
		t.Fatal("a held state larger than the store was admitted")
	}
	refused := &fakeHeld{n: 101}
	p.PutSnapshot(keys[3], &Snapshot{Pos: 16, Held: refused})
	want := []int{1, 1, 0, 0, 0, 0}
	for i, h := range hs {
		if h.released != want[i] {
			t.Fatalf("held %d released %d times, want %d", i, h.released, want[i])
		}
	}
	if refused.released != 1 {
		t.Fatalf("a refused held state released %d times", refused.released)
	}
	p.snaps.clear()
	if hs[2].released != 1 || hs[3].released != 1 {
		t.Fatalf("clear released %d and %d", hs[2].released, hs[3].released)
	}
	var off *snapStore // a pool without a store
	h := &fakeHeld{n: 1}
	if off.put(keys[0], &Snapshot{Held: h}) || h.released != 1 {
		t.Fatal("a disabled store kept, or did not release, a held state")
	}
}
