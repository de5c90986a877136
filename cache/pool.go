// Package cache owns every KV byte of a model: a paged pool of fixed-size
// blocks with reference counts, copy-on-write sharing between forked
// sequences, a prefix index that maps a hash chain over full blocks of
// tokens to the block holding their KV, LRU eviction of unreferenced cached
// blocks, and a host tier (ristretto, cost = bytes) that evicted blocks fall
// to and come back from. For hybrid models it also keeps snapshots of the
// sequences' recurrent state at block boundaries (see Snapshot).
//
// A block is in one of three states: referenced (ref > 0, held by one or
// more sequences' block tables), cached (ref == 0 but keyed in the prefix
// index, on the LRU list, reusable by any later sequence with the same
// prefix) or free. Keyed blocks are immutable: a sequence that must write
// into a block it shares calls Writable, which copies (ref > 1) or unkeys
// (sole owner) it first.
//
// The pool is safe for concurrent use, but the scheduler of a model is its
// only writer of KV contents; the pool's lock only protects bookkeeping.
package cache

import (
	"container/list"
	"errors"
	"fmt"
	"sync"

	"github.com/pocketllm/pocketllm/kernels"
)

// ErrFull is returned by Alloc when every block is referenced.
var ErrFull = errors.New("kv pool full")

// Config describes a pool.
type Config struct {
	Backend kernels.KVOps
	// Spec is the pool's shape (Blocks and BlockSize set).
	Spec kernels.KVSpec
	// HostTierBytes bounds the host tier; 0 disables it.
	HostTierBytes int64
	// SnapshotBytes bounds the host memory that recurrent-state snapshots
	// of hybrid models take (see Snapshot); 0 disables them.
	SnapshotBytes int64
}

// Pool is the paged KV memory of one model.
type Pool struct {
	be   kernels.KVOps
	kv   kernels.KVPool
	spec kernels.KVSpec

	mu     sync.Mutex
	blocks []blockMeta
	free   []int32
	lru    *list.List // of int32 block ids, front = most recently released
	index  map[Key]int32
	snaps  *snapStore // nil: no snapshots
	host   *hostTier
	stats  Stats
}

type blockMeta struct {
	ref   int32
	keyed bool
	key   Key
	elem  *list.Element // on lru while ref == 0 && keyed
	// spilled: the host tier got a copy of this keyed block ahead of its
	// eviction (Prespill), so evicting it needs no device read.
	spilled bool
}

// Stats is a snapshot of the pool's occupancy and traffic.
type Stats struct {
	Blocks     int   // blocks in the pool
	Referenced int   // blocks held by sequences
	Cached     int   // unreferenced blocks kept for prefix reuse
	Free       int   // blocks holding nothing
	BlockBytes int64 // bytes per block
	HostBytes  int64 // bytes held by the host tier
	HostLimit  int64 // the host tier's bound
	// Counters since the pool was made.
	Hits, HostHits, Misses uint64 // prefix lookups
	Evictions, HostStores  uint64 // cached blocks pushed out of the device pool / into the host tier
}

// New allocates the pool's KV memory on the backend.
func New(cfg Config) (*Pool, error) {
	kv, err := cfg.Backend.NewKVPool(cfg.Spec)
	if err != nil {
		return nil, fmt.Errorf("kv pool: %w", err)
	}
	p := &Pool{
		be: cfg.Backend, kv: kv, spec: cfg.Spec,
		blocks: make([]blockMeta, cfg.Spec.Blocks),
		free:   make([]int32, 0, cfg.Spec.Blocks),
		lru:    list.New(),
		index:  make(map[Key]int32),
	}
	// Hand out low block ids first.
	for b := cfg.Spec.Blocks - 1; b >= 0; b-- {
		p.free = append(p.free, int32(b))
	}
	if cfg.SnapshotBytes > 0 {
		p.snaps = newSnapStore(cfg.SnapshotBytes)
	}
	if cfg.HostTierBytes > 0 {
		if p.host, err = newHostTier(cfg.HostTierBytes, cfg.Spec.BytesPerBlock()); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// KV is the backend pool that Forward reads and writes.
func (p *Pool) KV() kernels.KVPool { return p.kv }

// Spec is the pool's shape.
func (p *Pool) Spec() kernels.KVSpec { return p.spec }

// BlockSize is the number of tokens per block.
func (p *Pool) BlockSize() int { return p.spec.BlockSize }

// Close releases the host tier.
func (p *Pool) Close() {
	if p.host != nil {
		p.host.close()
	}
}

// Alloc returns a free block with one reference. When no block is free it
// evicts the least recently used cached block (to the host tier, when
// there is one); when every block is referenced it returns ErrFull.
func (p *Pool) Alloc() (int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allocLocked()
}

func (p *Pool) allocLocked() (int32, error) {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		p.blocks[b] = blockMeta{ref: 1}
		return b, nil
	}
	b, ok := p.evictLocked()
	if !ok {
		return -1, ErrFull
	}
	p.blocks[b] = blockMeta{ref: 1}
	return b, nil
}

// evictLocked pushes the least recently used cached block out of the
// device pool (to the host tier, when there is one) and returns it
// unkeyed, on no list.
func (p *Pool) evictLocked() (int32, bool) {
	e := p.lru.Back()
	if e == nil {
		return -1, false
	}
	b := e.Value.(int32)
	m := &p.blocks[b]
	p.lru.Remove(e)
	m.elem = nil
	if p.host != nil && !(m.spilled && p.host.has(m.key)) {
		p.spillLocked(b)
	}
	p.stats.Evictions++
	p.dropKeyLocked(b)
	return b, true
}

// spillLocked copies keyed block b's KV into the host tier; false when
// the tier declined it (its admission policy, or no room).
func (p *Pool) spillLocked(b int32) bool {
	m := &p.blocks[b]
	buf := make([]float32, p.spec.BytesPerBlock()/4)
	p.be.ReadKVBlock(p.kv, int(b), buf)
	if !p.host.put(m.key, buf) {
		return false
	}
	p.stats.HostStores++
	m.spilled = true
	return true
}

// Prespill copies up to n of the cached blocks next in line for eviction
// into the host tier ahead of time, keeping them on the device, and
// returns how many it copied. An eviction then only drops the block: the
// device read (through pinned memory, on a GPU a round trip to the worker)
// leaves the critical path of the allocation that needs the block, which
// is the middle of someone's prefill. The scheduler calls it while idle;
// it does nothing while more than a quarter of the pool is free.
func (p *Pool) Prespill(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.host == nil || len(p.free) > len(p.blocks)/4 {
		return 0
	}
	done := 0
	// The back of the LRU list goes first; look no further than the
	// blocks that a quarter of the pool's worth of allocations would evict.
	window := max(len(p.blocks)/4, 1)
	for e := p.lru.Back(); e != nil && done < n && window > 0; e, window = e.Prev(), window-1 {
		b := e.Value.(int32)
		if m := &p.blocks[b]; m.keyed && !m.spilled {
			if !p.spillLocked(b) {
				break // declined: do not retry in a loop; the eviction will
			}
			done++
		}
	}
	return done
}

// dropKeyLocked removes b's entry from the prefix index. The snapshot
// keyed like it stays while the host tier may still hold the block.
func (p *Pool) dropKeyLocked(b int32) {
	m := &p.blocks[b]
	if !m.keyed {
		return
	}
	if p.index[m.key] == b {
		delete(p.index, m.key)
	}
	if p.host == nil {
		p.snaps.del(m.key)
	}
	m.keyed, m.spilled = false, false
}

// Ref adds a reference to b (a fork sharing it).
func (p *Pool) Ref(b int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refLocked(b)
}

func (p *Pool) refLocked(b int32) {
	m := &p.blocks[b]
	if m.ref == 0 && m.elem != nil {
		p.lru.Remove(m.elem)
		m.elem = nil
	}
	m.ref++
}

// Release drops a reference. A block nobody references stays cached when
// it is keyed in the prefix index and becomes free otherwise.
func (p *Pool) Release(b int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(b)
}

func (p *Pool) releaseLocked(b int32) {
	m := &p.blocks[b]
	if m.ref <= 0 {
		panic(fmt.Sprintf("cache: release of unreferenced block %d", b))
	}
	m.ref--
	if m.ref > 0 {
		return
	}
	if m.keyed {
		m.elem = p.lru.PushFront(b)
		return
	}
	p.free = append(p.free, b)
}

// ReleaseAll releases every block of a table.
func (p *Pool) ReleaseAll(table []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range table {
		p.releaseLocked(b)
	}
}

// Refs is b's reference count (for tests and assertions).
func (p *Pool) Refs(b int32) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.blocks[b].ref)
}

// Register records that the referenced block b holds the full block of
// tokens whose chain key is key, so later sequences can reuse it. It
// reports false when another block already holds key (b then stays
// private). A registered block must not be written again; see Writable.
func (p *Pool) Register(b int32, key Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := &p.blocks[b]
	if m.keyed {
		return m.key == key
	}
	if _, ok := p.index[key]; ok {
		return false
	}
	m.keyed, m.key = true, key
	p.index[key] = b
	if p.host != nil {
		p.host.del(key) // the device copy is authoritative now
	}
	return true
}

// Lookup finds the block holding key, on the device or in the host tier
// (whence it is copied back into a newly allocated block), and returns it
// with a reference added. It reports false on a miss, including when the
// block is in the host tier but no device block can be freed for it.
func (p *Pool) Lookup(key Key) (int32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.index[key]; ok {
		p.refLocked(b)
		p.stats.Hits++
		return b, true
	}
	if p.host != nil {
		if data, ok := p.host.get(key); ok {
			b, err := p.allocLocked()
			if err == nil {
				p.be.WriteKVBlock(p.kv, int(b), data)
				p.host.del(key)
				m := &p.blocks[b]
				m.keyed, m.key = true, key
				p.index[key] = b
				p.stats.HostHits++
				return b, true
			}
		}
	}
	p.stats.Misses++
	return -1, false
}

// Contains reports whether key is cached on the device or the host tier,
// without taking a reference.
func (p *Pool) Contains(key Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.index[key]; ok {
		return true
	}
	return p.host != nil && p.host.has(key)
}

// Writable returns a block that the caller, holding one reference to b,
// may write: b itself when the caller is its only holder (removed from the
// prefix index if it was keyed, since its contents are about to change),
// or a copy made in a block from alloc, with b's reference released.
func (p *Pool) Writable(b int32, alloc func() (int32, error)) (int32, error) {
	p.mu.Lock()
	if p.blocks[b].ref == 1 {
		p.dropKeyLocked(b)
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	nb, err := alloc()
	if err != nil {
		return -1, err
	}
	p.be.CopyKVBlock(p.kv, int(nb), int(b))
	p.Release(b)
	return nb, nil
}

// EvictCached pushes up to n unreferenced cached blocks out of the device
// pool (to the host tier when there is one) and returns how many it freed.
func (p *Pool) EvictCached(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	freed := 0
	for freed < n {
		b, ok := p.evictLocked()
		if !ok {
			break
		}
		p.blocks[b] = blockMeta{}
		p.free = append(p.free, b)
		freed++
	}
	return freed
}

// ReadBlock copies b's KV bytes (all layers) into a new slice.
func (p *Pool) ReadBlock(b int32) []float32 {
	buf := make([]float32, p.spec.BytesPerBlock()/4)
	p.be.ReadKVBlock(p.kv, int(b), buf)
	return buf
}

// Stats reports occupancy and counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Blocks = len(p.blocks)
	s.Free = len(p.free)
	s.Cached = p.lru.Len()
	s.Referenced = s.Blocks - s.Free - s.Cached
	s.BlockBytes = p.spec.BytesPerBlock()
	if p.host != nil {
		s.HostBytes, s.HostLimit = p.host.used(), p.host.limit
	}
	return s
}
