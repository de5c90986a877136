package cache

// Snapshot is per-sequence recurrent state (hybrid linear-attention
// layers) copied at a block boundary. Attention KV alone cannot resume such
// a model mid-sequence: a prefix hit or a fork at position p also needs the
// recurrent state after p, so for those models the prefix index is only
// usable at boundaries that carry a snapshot. Taking snapshots is not
// implemented yet; until it is, sessions of recurrent models recompute
// instead of reusing (see package session).
type Snapshot interface {
	// Bytes is the memory the snapshot holds.
	Bytes() int64
}

// AttachSnapshot records the recurrent state after the block whose key is
// key.
func (p *Pool) AttachSnapshot(key Key, s Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snaps[key] = s
}

// Snapshot returns the state attached to key's boundary, if any.
func (p *Pool) Snapshot(key Key) (Snapshot, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.snaps[key]
	return s, ok
}
