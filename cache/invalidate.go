package cache

// Invalidate forgets the contents of every block after the backend lost
// its KV memory (a worker process restarted with a fresh pool): the prefix
// index and the host tier are emptied (a host copy may have been read from
// a dying worker), unreferenced blocks become free, and referenced ones
// stay with their holders but unkeyed, their contents garbage until
// rewritten. Callers drop their sequences' KV first and rebuild it from
// the tokens.
func (p *Pool) Invalidate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = p.free[:0]
	for b := len(p.blocks) - 1; b >= 0; b-- {
		m := &p.blocks[b]
		if m.ref > 0 {
			m.keyed, m.elem = false, nil
			continue
		}
		*m = blockMeta{}
		p.free = append(p.free, int32(b))
	}
	p.lru.Init()
	clear(p.index)
	p.snaps.clear() // states read from the same dying runner
	if p.host != nil {
		p.host.c.Clear()
		p.host.c.Wait()
	}
}
