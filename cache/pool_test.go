package cache

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

var spec = kernels.KVSpec{Layers: 2, Blocks: 4, BlockSize: 4, KVHeads: 1, HeadDimK: 2, HeadDimV: 2}

func newPool(t *testing.T, host int64) *Pool {
	t.Helper()
	p, err := New(Config{Backend: cpu.New(1), Spec: spec, HostTierBytes: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// fill writes a recognisable pattern into a block.
func fill(p *Pool, b int32, v float32) []float32 {
	data := make([]float32, spec.BytesPerBlock()/4)
	for i := range data {
		data[i] = v + float32(i)/1000
	}
	p.be.WriteKVBlock(p.kv, int(b), data)
	return data
}

func alloc(t *testing.T, p *Pool) int32 {
	t.Helper()
	b, err := p.Alloc()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRefcountAndFree(t *testing.T) {
	p := newPool(t, 0)
	var got []int32
	for range 4 {
		got = append(got, alloc(t, p))
	}
	if _, err := p.Alloc(); !errors.Is(err, ErrFull) {
		t.Fatalf("fifth alloc: %v", err)
	}
	p.Ref(got[0])
	p.Release(got[0])
	if _, err := p.Alloc(); !errors.Is(err, ErrFull) {
		t.Fatal("block with a reference left was handed out")
	}
	p.Release(got[0])
	if b := alloc(t, p); b != got[0] {
		t.Fatalf("freed block %d, got %d", got[0], b)
	}
	if s := p.Stats(); s.Referenced != 4 || s.Free != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestPrefixIndexAndLRU(t *testing.T) {
	p := newPool(t, 0)
	seed := Seed("m", 1)
	keys := ChainKeys(seed, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4)
	if len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("keys %v", keys)
	}
	// The chain depends on everything before: same block after a
	// different prefix, or under another owner, is another key.
	if k := ChainKeys(seed, []int32{0, 2, 3, 4, 5, 6, 7, 8}, 4); k[1] == keys[1] {
		t.Error("second key ignores the first block")
	}
	if k := ChainKeys(Seed("m", 2), []int32{1, 2, 3, 4}, 4); k[0] == keys[0] {
		t.Error("owners share keys")
	}
	a, b := alloc(t, p), alloc(t, p)
	if !p.Register(a, keys[0]) || !p.Register(b, keys[1]) {
		t.Fatal("register")
	}
	c := alloc(t, p)
	if p.Register(c, keys[0]) {
		t.Error("key registered twice")
	}
	p.Release(c)
	// Held blocks are found with a new reference.
	if got, ok := p.Lookup(keys[0]); !ok || got != a || p.Refs(a) != 2 {
		t.Fatalf("lookup: %d %v refs %d", got, ok, p.Refs(a))
	}
	p.Release(a)
	// Released keyed blocks stay cached; b released first is older.
	p.Release(b)
	p.Release(a)
	if s := p.Stats(); s.Cached != 2 {
		t.Fatalf("stats %+v", s)
	}
	if got, ok := p.Lookup(keys[1]); !ok || got != b {
		t.Fatal("cached block not found")
	}
	p.Release(b) // now b is the most recent
	// Filling the pool evicts cached blocks, least recently used first.
	x, y := alloc(t, p), alloc(t, p) // the two free ones
	_ = y
	if z := alloc(t, p); z != a {
		t.Fatalf("evicted %d, want LRU block %d", z, a)
	}
	if _, ok := p.Lookup(keys[0]); ok {
		t.Error("evicted block still indexed")
	}
	if got, ok := p.Lookup(keys[1]); !ok || got != b {
		t.Error("recent block was evicted")
	}
	_ = x
}

func TestCopyOnWrite(t *testing.T) {
	p := newPool(t, 0)
	a := alloc(t, p)
	want := fill(p, a, 1)
	p.Ref(a) // a fork shares it
	w, err := p.Writable(a, p.Alloc)
	if err != nil {
		t.Fatal(err)
	}
	if w == a || p.Refs(a) != 1 || p.Refs(w) != 1 {
		t.Fatalf("shared block not copied: %d→%d refs %d/%d", a, w, p.Refs(a), p.Refs(w))
	}
	if got := p.ReadBlock(w); !slices.Equal(got, want) {
		t.Fatal("copy differs")
	}
	fill(p, w, 9)
	if got := p.ReadBlock(a); !slices.Equal(got, want) {
		t.Fatal("writing the copy changed the original")
	}
	// A sole holder writes in place, and a keyed block leaves the index.
	k := Seed("m", 1).Next([]int32{1, 2, 3, 4})
	p.Register(a, k)
	if w2, _ := p.Writable(a, p.Alloc); w2 != a {
		t.Fatal("sole holder got a copy")
	}
	if p.Contains(k) {
		t.Error("block being rewritten is still indexed")
	}
}

// TestHostTier: an evicted block falls to the host tier and comes back
// with the same bytes.
func TestHostTier(t *testing.T) {
	p := newPool(t, 1<<20)
	keys := ChainKeys(Seed("m", 1), make([]int32, 16), 4)
	var want [][]float32
	for i, k := range keys {
		b := alloc(t, p)
		want = append(want, fill(p, b, float32(i+1)))
		p.Register(b, k)
		p.Release(b)
	}
	// Four more allocations evict all four cached blocks to the host.
	var held []int32
	for range 4 {
		held = append(held, alloc(t, p))
	}
	s := p.Stats()
	if s.HostStores != 4 || s.HostBytes != 4*spec.BytesPerBlock() {
		t.Fatalf("stats %+v", s)
	}
	p.Release(held[0])
	b, ok := p.Lookup(keys[2])
	if !ok {
		t.Fatal("host tier miss")
	}
	if got := p.ReadBlock(b); !slices.Equal(got, want[2]) {
		t.Fatal("block came back with other bytes")
	}
	if s := p.Stats(); s.HostHits != 1 || s.HostBytes != 3*spec.BytesPerBlock() {
		t.Errorf("stats %+v", s)
	}
	// With every block referenced, a host hit cannot come back.
	if _, ok := p.Lookup(keys[3]); ok {
		t.Error("host hit without a free block")
	}
}

// TestHostTierLogits: a real model's KV evicted to the host tier and
// brought back gives the same logits as the KV that never left.
func TestHostTierLogits(t *testing.T) {
	ck, err := checkpoint.Open(filepath.Join("..", "models", "testdata", "models", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := ck.Model(cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	const bs = 16
	p, err := New(Config{Backend: m.Backend, Spec: m.KVSpec(3, bs), HostTierBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	toks := make([]int32, 2*bs+1)
	for i := range toks {
		toks[i] = int32(i*7+3) % 500
	}
	table := []int32{}
	for range 3 {
		b, err := p.Alloc()
		if err != nil {
			t.Fatal(err)
		}
		table = append(table, b)
	}
	logits, err := m.Forward(models.Seq{Pool: p.KV(), Table: table}, toks, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	keys := ChainKeys(Seed("qwen3", 1), toks, bs)
	before := [][]float32{p.ReadBlock(table[0]), p.ReadBlock(table[1])}
	for i, k := range keys {
		p.Register(table[i], k)
	}
	p.ReleaseAll(table)
	// Another sequence takes the whole pool: both cached blocks go to the host.
	var other []int32
	for range 3 {
		b, err := p.Alloc()
		if err != nil {
			t.Fatal(err)
		}
		other = append(other, b)
	}
	if _, ok := p.Lookup(keys[0]); ok {
		t.Fatal("lookup succeeded with a full pool")
	}
	p.ReleaseAll(other)
	var back []int32
	for i, k := range keys {
		b, ok := p.Lookup(k)
		if !ok {
			t.Fatalf("block %d lost", i)
		}
		if !slices.Equal(p.ReadBlock(b), before[i]) {
			t.Fatalf("block %d bytes differ", i)
		}
		back = append(back, b)
	}
	last, err := p.Alloc()
	if err != nil {
		t.Fatal(err)
	}
	// Recompute only the last token over the restored blocks.
	got, err := m.Forward(models.Seq{Pool: p.KV(), Table: append(back, last), Start: 2 * bs}, toks[2*bs:], models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, logits) {
		t.Fatal("logits over restored KV differ")
	}
}

// countingKV counts the device reads of KV blocks.
type countingKV struct {
	kernels.KVOps
	reads int
}

func (c *countingKV) ReadKVBlock(p kernels.KVPool, b int, dst []float32) {
	c.reads++
	c.KVOps.ReadKVBlock(p, b, dst)
}

// TestPrespill: blocks copied to the host tier ahead of time are evicted
// without a device read and come back with their bytes; nothing is copied
// while the pool has room, nor twice.
func TestPrespill(t *testing.T) {
	be := &countingKV{KVOps: cpu.New(1)}
	p, err := New(Config{Backend: be, Spec: kernels.KVSpec{Layers: 2, Blocks: 8, BlockSize: 4, KVHeads: 1, HeadDimK: 2, HeadDimV: 2},
		HostTierBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	keys := ChainKeys(Seed("m", 1), make([]int32, 32), 4)
	var want [][]float32
	var blocks []int32
	for i, k := range keys[:7] {
		b := alloc(t, p)
		want = append(want, fill(p, b, float32(i+1)))
		p.Register(b, k)
		blocks = append(blocks, b)
	}
	// Seven of eight referenced: one free block is within the quarter, but
	// nothing is cached yet.
	if n := p.Prespill(8); n != 0 {
		t.Fatalf("prespilled %d with no cached block", n)
	}
	for _, b := range blocks {
		p.Release(b) // LRU back = blocks[0]
	}
	if n := p.Prespill(8); n != 2 || be.reads != 2 {
		t.Fatalf("prespilled %d (reads %d), want the 2 blocks of the eviction window", n, be.reads)
	}
	if n := p.Prespill(8); n != 0 {
		t.Fatalf("second prespill copied %d again", n)
	}
	// The free block, then the two spilled ones: no device read.
	var held []int32
	for range 3 {
		held = append(held, alloc(t, p))
	}
	if be.reads != 2 {
		t.Errorf("evicting prespilled blocks read the device: %d reads", be.reads)
	}
	// The next eviction (blocks[2], not spilled) reads it.
	held = append(held, alloc(t, p))
	if be.reads != 3 {
		t.Errorf("eviction of an unspilled block: %d reads, want 3", be.reads)
	}
	p.ReleaseAll(held)
	for i := range 3 {
		b, ok := p.Lookup(keys[i])
		if !ok {
			t.Fatalf("block %d lost", i)
		}
		if got := p.ReadBlock(b); !slices.Equal(got, want[i]) {
			t.Fatalf("block %d came back with other bytes", i)
		}
		p.Release(b)
	}
}

// TestPrespillRoom: nothing is copied while more than a quarter of the
// pool is free.
func TestPrespillRoom(t *testing.T) {
	p := newPool(t, 1<<20) // 4 blocks
	keys := ChainKeys(Seed("m", 1), make([]int32, 16), 4)
	b := alloc(t, p)
	fill(p, b, 1)
	p.Register(b, keys[0])
	p.Release(b)
	if n := p.Prespill(4); n != 0 {
		t.Errorf("prespilled %d with 3 of 4 blocks free", n)
	}
}

// TestPrespillDeclined: a host tier too small for a block declines it;
// Prespill reports nothing done (the idle loop stops) instead of copying
// the same block again and again.
func TestPrespillDeclined(t *testing.T) {
	be := &countingKV{KVOps: cpu.New(1)}
	p, err := New(Config{Backend: be, Spec: spec, HostTierBytes: spec.BytesPerBlock() / 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	keys := ChainKeys(Seed("m", 1), make([]int32, 16), 4)
	for i, k := range keys {
		b := alloc(t, p)
		fill(p, b, float32(i))
		p.Register(b, k)
		p.Release(b)
	}
	for range 3 {
		if n := p.Prespill(4); n != 0 {
			t.Fatalf("prespilled %d into a tier smaller than a block", n)
		}
	}
	if be.reads != 3 {
		t.Errorf("%d device reads, want one per attempt", be.reads)
	}
}
