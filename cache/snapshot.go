package cache

import (
	"container/list"
	"math"
	"sync"
)

// Snapshots of recurrent state.
//
// Hybrid models (Gated DeltaNet layers interleaved with attention) carry,
// besides the attention layers' KV in the paged pool, a per-sequence
// recurrent state that cannot be rewound. To resume such a sequence at
// position p — a prefix hit, a fork or a truncation — the KV blocks up to
// p are not enough: the state after exactly p tokens is needed too. So the
// scheduler copies the state at block boundaries chosen by Intervals and
// stores it here, keyed by the chain key of the block that ends at p. Equal
// keys mean equal tokens from position 0 (within one model and owner), so a
// snapshot at p is valid for every sequence whose first p tokens have that
// key, exactly like the KV block it is keyed by.
//
// Snapshots live in host memory, bounded by bytes (a real model's state is
// megabytes), least recently used first out — or in the runner (Held: a
// worker's copy on the device), where the store keeps the handle, counts
// its bytes against the same bound and releases it when the entry goes.
// A stored Snapshot is immutable; one handed out stays valid after it is
// evicted (the garbage collector keeps its data while a reader holds it),
// so readers need no reference count — except a held one, whose copy the
// eviction releases: restoring it then fails, and the reader recomputes. A
// snapshot is a cache entry, never the only copy of anything: a sequence
// without one recomputes from the tokens.

// Snapshot is the recurrent state of a sequence after its first Pos tokens.
type Snapshot struct {
	Pos int
	// State is the state as models.RecurrentState.Snapshot lays it out.
	State []float32
	// Logits are the logits at position Pos-1, when they were computed
	// (nil otherwise): with them a sequence resumed at Pos needs no forward
	// pass before sampling.
	Logits []float32
	// Held, when set instead of State, is the state kept by the runner
	// (models.HeldState).
	Held Held
}

// Held is a snapshot's state kept outside the store (by a worker, on its
// device): its size, and Release to let it go.
type Held interface {
	Bytes() int64
	Release()
}

// Bytes is the memory the snapshot holds, a held state's included.
func (s *Snapshot) Bytes() int64 {
	n := 4 * int64(len(s.State)+len(s.Logits))
	if s.Held != nil {
		n += s.Held.Bytes()
	}
	return n
}

// release lets a held state go.
func (s *Snapshot) release() {
	if s.Held != nil {
		s.Held.Release()
	}
}

// Intervals is the snapshot policy: a snapshot every Dense tokens up to
// Until, then every Sparse tokens. Dense ≤ 0 disables snapshots.
type Intervals struct {
	Dense, Until, Sparse int
}

// DefaultIntervals snapshots every 256 tokens up to 4K, then every 4K: a
// resume recomputes at most 256 tokens in short contexts and 4K in long
// ones, while a 32K context holds 23 snapshots.
var DefaultIntervals = Intervals{Dense: 256, Until: 4096, Sparse: 4096}

// Aligned returns the policy with its spacings rounded up to multiples of
// the block size bs (snapshots are keyed by full blocks) and Until rounded
// up to a multiple of Dense. Sparse ≤ 0 means Dense.
func (iv Intervals) Aligned(bs int) Intervals {
	if iv.Dense <= 0 || bs <= 0 {
		return Intervals{}
	}
	up := func(x, m int) int { return (x + m - 1) / m * m }
	iv.Dense = up(iv.Dense, bs)
	if iv.Sparse <= 0 {
		iv.Sparse = iv.Dense
	}
	iv.Sparse = up(iv.Sparse, bs)
	iv.Until = up(max(iv.Until, 0), iv.Dense)
	return iv
}

// Enabled reports whether the policy takes snapshots at all.
func (iv Intervals) Enabled() bool { return iv.Dense > 0 }

// At reports whether a snapshot is due after p tokens.
func (iv Intervals) At(p int) bool {
	if !iv.Enabled() || p <= 0 {
		return false
	}
	if p <= iv.Until {
		return p%iv.Dense == 0
	}
	return (p-iv.Until)%iv.Sparse == 0
}

// Next is the first snapshot position after p (math.MaxInt when none).
func (iv Intervals) Next(p int) int {
	if !iv.Enabled() {
		return math.MaxInt
	}
	p = max(p, 0)
	if p < iv.Until {
		return (p/iv.Dense + 1) * iv.Dense
	}
	return iv.Until + ((p-iv.Until)/iv.Sparse+1)*iv.Sparse
}

// snapStore is a byte-bounded LRU of snapshots.
type snapStore struct {
	mu    sync.Mutex
	limit int64
	used  int64
	lru   *list.List // of *snapEntry, front = most recently used
	byKey map[Key]*list.Element
	stats SnapshotStats
}

type snapEntry struct {
	key  Key
	snap *Snapshot
}

// SnapshotStats describes the snapshot store.
type SnapshotStats struct {
	Count     int
	Bytes     int64
	Limit     int64
	Hits      uint64 // snapshots handed out for a resume
	Stores    uint64 // snapshots admitted
	Evictions uint64 // snapshots pushed out by newer ones or dropped with their block
	Rejected  uint64 // snapshots larger than the whole store
	Held      int    // of Count, those whose state the runner keeps
}

func newSnapStore(limit int64) *snapStore {
	return &snapStore{limit: limit, lru: list.New(), byKey: map[Key]*list.Element{}}
}

func (s *snapStore) put(k Key, snap *Snapshot) bool {
	if s == nil {
		snap.release()
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	size := snap.Bytes()
	if size > s.limit {
		s.stats.Rejected++
		snap.release()
		return false
	}
	if e, ok := s.byKey[k]; ok {
		s.removeLocked(e)
	}
	for s.used+size > s.limit {
		s.removeLocked(s.lru.Back())
		s.stats.Evictions++
	}
	s.byKey[k] = s.lru.PushFront(&snapEntry{key: k, snap: snap})
	s.used += size
	s.stats.Stores++
	return true
}

func (s *snapStore) removeLocked(e *list.Element) {
	en := e.Value.(*snapEntry)
	s.lru.Remove(e)
	delete(s.byKey, en.key)
	s.used -= en.snap.Bytes()
	en.snap.release()
}

// get returns k's snapshot; touch marks it used (a resume) rather than
// only looked at.
func (s *snapStore) get(k Key, touch bool) (*Snapshot, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[k]
	if !ok {
		return nil, false
	}
	if touch {
		s.lru.MoveToFront(e)
		s.stats.Hits++
	}
	return e.Value.(*snapEntry).snap, true
}

func (s *snapStore) del(k Key) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[k]; ok {
		s.removeLocked(e)
		s.stats.Evictions++
	}
}

func (s *snapStore) clear() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Evictions += uint64(s.lru.Len())
	for e := s.lru.Front(); e != nil; e = e.Next() {
		e.Value.(*snapEntry).snap.release()
	}
	s.lru.Init()
	clear(s.byKey)
	s.used = 0
}

func (s *snapStore) snapshotStats() SnapshotStats {
	if s == nil {
		return SnapshotStats{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Count, st.Bytes, st.Limit = s.lru.Len(), s.used, s.limit
	for e := s.lru.Front(); e != nil; e = e.Next() {
		if e.Value.(*snapEntry).snap.Held != nil {
			st.Held++
		}
	}
	return st
}

// PutSnapshot stores the state after the block whose chain key is key
// (snap must not be modified afterwards). It reports false when the store
// is disabled or the snapshot is larger than the whole store. The store
// owns snap.Held from here: it is released when the entry goes, or at once
// when it is not stored.
func (p *Pool) PutSnapshot(key Key, snap *Snapshot) bool { return p.snaps.put(key, snap) }

// Snapshot returns the state stored for key's boundary, marking it used.
func (p *Pool) Snapshot(key Key) (*Snapshot, bool) { return p.snaps.get(key, true) }

// PeekSnapshot is Snapshot without marking it used.
func (p *Pool) PeekSnapshot(key Key) (*Snapshot, bool) { return p.snaps.get(key, false) }

// HasSnapshot reports whether key's boundary has a snapshot, without
// marking it used.
func (p *Pool) HasSnapshot(key Key) bool {
	_, ok := p.snaps.get(key, false)
	return ok
}

// SnapshotStats reports the snapshot store's occupancy and counters.
func (p *Pool) SnapshotStats() SnapshotStats { return p.snaps.snapshotStats() }
