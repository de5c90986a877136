package worker

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/pocketllm/pocketllm/models"
)

// Recurrent state over the protocol (hybrid models: Gated DeltaNet
// layers). A sequence's state lives in the worker, next to the weights
// and the KV pool, under an id; the daemon holds a remoteState, which
// implements models.RecurrentState by sending requests (messages_state.go)
// and keeps the position itself, so Pos costs no round trip.
//
// States are made lazily: NewState hands out an object holding nothing,
// whose contents are zeros at position 0, and the worker allocates it on
// its first use (a Forward or a Restore). So the session package's
// "NewState() != nil" probes cost nothing, and a fresh state needs no
// worker at all.
//
// A worker restart loses every state. A state knows the generation of
// the worker that holds it; an id of a dead generation is never sent to
// a new worker (ids are not reused either). Such a state is lost: a
// Forward with it fails with ErrWorkerLost and session.ErrKVLost, like
// lost KV, so the scheduler drops every sequence's KV and state and
// recomputes them from the token histories (NewState again, full
// prefill); a Restore, which overwrites everything, makes the state live
// again in the new worker.
//
// On a tensor-parallel group every rank holds its heads' share of each
// state (models' plan splits DeltaNet layers by heads) under the same id:
// every state request goes to all ranks alike, as Forward does, except
// Snapshot and Restore, which move the ranks' shares one after the other
// (rank 0's first, as KV blocks travel). A group's snapshot is therefore
// not laid out as a whole-model worker's, but snapshots live in the
// daemon's cache only, which a different group never reads: a restart
// with another --tp starts an empty cache.

// stateBook is the Proxy's bookkeeping of its worker's states.
type stateBook struct {
	next uint64 // the last id handed out (p.req held)

	mu      sync.Mutex
	pending []stateSlot // dropped states the worker still holds
	freed   int         // ids sent in FreeStates so far
}

// stateSlot is where a state lives: its id in the worker of generation
// gen (id 0: nowhere yet).
type stateSlot struct {
	id  uint64
	gen int
}

// remoteState is a sequence's recurrent state held by the worker.
type remoteState struct {
	p    *Proxy
	slot *stateSlot // separate, so that the cleanup can read it
	pos  int
	// err says why the contents are unknown (a failed request, a lost
	// worker); a Restore or Reset clears it.
	err     error
	cleanup runtime.Cleanup
	freed   bool
	marks   *remoteMarks // HoldAt's request (state_held.go)
}

var _ models.RecurrentState = (*remoteState)(nil)

// newRemoteState is a state holding nothing yet (zeros at position 0).
// Its id is freed when the session drops it (Free); the cleanup is a
// backstop for a state dropped without Free.
func (p *Proxy) newRemoteState() *remoteState {
	s := &remoteState{p: p, slot: &stateSlot{}}
	s.cleanup = runtime.AddCleanup(s, func(sl *stateSlot) { p.dropState(*sl) }, s.slot)
	return s
}

// NewState implements session.Runner: a state for hybrid models, nil
// for attention-only ones.
func (p *Proxy) NewState() any {
	if !p.ready.Recurrent {
		return nil
	}
	return p.newRemoteState()
}

// newStateID hands out the next state id (p.req held; never reused).
func (p *Proxy) newStateID() uint64 {
	p.states.next++
	return p.states.next
}

// dropState queues sl's id to be freed with the next request to its
// worker (any goroutine; ids of other generations died with them).
func (p *Proxy) dropState(sl stateSlot) {
	if sl.id == 0 {
		return
	}
	p.states.mu.Lock()
	p.states.pending = append(p.states.pending, sl)
	p.states.mu.Unlock()
}

// StatesFreed counts the state ids sent to workers to be freed.
func (p *Proxy) StatesFreed() int {
	p.states.mu.Lock()
	defer p.states.mu.Unlock()
	return p.states.freed
}

// flushFrees sends the queued frees of g's states (p.req held). Only a
// lost worker is an error: a worker that refuses a free keeps a few
// buffers until it exits.
func (p *Proxy) flushFrees(g *group) error {
	p.states.mu.Lock()
	var ids []uint64
	for _, sl := range p.states.pending {
		if sl.gen == g.gen {
			ids = append(ids, sl.id)
		}
	}
	p.states.pending = nil
	p.states.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), maxFreeIDs)
		_, err := p.call(g, msgFreeStates, same(encodeFreeStates(ids[:n]), 0), msgOK)
		if errors.Is(err, ErrWorkerLost) {
			return err
		}
		if err != nil {
			p.log.Warn("free recurrent states", "err", err)
		}
		p.states.mu.Lock()
		p.states.freed += n
		p.states.mu.Unlock()
		ids = ids[n:]
	}
	return nil
}

// ownState is seq.State as this proxy's state: nil for attention-only
// models, an error for anything else.
func (p *Proxy) ownState(state any) (*remoteState, error) {
	if !p.ready.Recurrent {
		if state != nil {
			return nil, fmt.Errorf("%w: recurrent state %T for a model without recurrent layers", models.ErrState, state)
		}
		return nil, nil
	}
	s, ok := state.(*remoteState)
	if !ok || s.p != p {
		return nil, fmt.Errorf("%w: need the state from this worker's NewState, have %T", models.ErrState, state)
	}
	if s.freed {
		return nil, fmt.Errorf("%w: state used after Free", models.ErrState)
	}
	return s, nil
}

// live returns s's id in g (p.req held), allocating it there first when
// s holds nothing yet and create is set (0 otherwise). A state of a dead
// generation is an error wrapping ErrWorkerLost.
func (p *Proxy) live(g *group, s *remoteState, create bool) (uint64, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.slot.id != 0 {
		if s.slot.gen != g.gen {
			s.err = fmt.Errorf("%w: recurrent state %d lived in worker generation %d, now %d", ErrWorkerLost, s.slot.id, s.slot.gen, g.gen)
			s.slot.id = 0
			return 0, s.err
		}
		return s.slot.id, nil
	}
	if !create {
		return 0, nil
	}
	id := p.newStateID()
	if _, err := p.call(g, msgNewState, same(encodeStateID(id), 0), msgOK); err != nil {
		return 0, fmt.Errorf("new recurrent state: %w", err)
	}
	*s.slot = stateSlot{id: id, gen: g.gen}
	return id, nil
}

// stateReq runs one state operation with the worker (p.req held by it).
func (p *Proxy) stateReq(op func(g *group) error) error {
	p.req.Lock()
	defer p.req.Unlock()
	g, err := p.worker()
	if err != nil {
		return err
	}
	if err := p.flushFrees(g); err != nil {
		return err
	}
	return op(g)
}

// Pos implements models.RecurrentState: -1 when the contents are unknown.
func (s *remoteState) Pos() int {
	if s.err != nil {
		return -1
	}
	if s.slot.id != 0 {
		s.p.mu.Lock()
		gen := s.p.gen
		s.p.mu.Unlock()
		if gen != s.slot.gen {
			return -1 // lost with its worker
		}
	}
	return s.pos
}

// Len implements models.RecurrentState.
func (s *remoteState) Len() int { return int(s.p.ready.StateLen) }

// SizeBytes implements models.RecurrentState.
func (s *remoteState) SizeBytes() int64 { return s.p.ready.StateLen * 4 }

// Snapshot implements models.RecurrentState. It returns nil when the
// state cannot be read (lost with its worker, or a failed request): the
// interface has no error result, and the session stores no snapshot of
// the wrong length.
func (s *remoteState) Snapshot() []float32 {
	n := s.Len()
	if s.freed || s.err != nil {
		return nil
	}
	if s.slot.id == 0 {
		return make([]float32, n)
	}
	var out []float32
	err := s.p.stateReq(func(g *group) error {
		id, err := s.p.live(g, s, false)
		if err != nil {
			return err
		}
		per := n / len(g.ranks) // each rank's share
		replies, err := s.p.call(g, msgSnapshotState, same(encodeStateID(id), per*4+64), msgBlock, msgBlockShared)
		if err != nil {
			return err
		}
		data := make([]float32, n)
		for r, f := range replies {
			if err := readState(g.ranks[r], f, data[r*per:(r+1)*per]); err != nil { // the worker does not speak the protocol: replace it
				s.p.lose(g, err)
				return fmt.Errorf("snapshot-state: %w: rank %d: %w", ErrWorkerLost, r, err)
			}
		}
		out = data
		return nil
	})
	if err != nil {
		s.p.log.Error("snapshot recurrent state", "err", err)
		return nil
	}
	return out
}

// readState reads a rank's share of a snapshot from its reply (inline, or
// in its shared memory) into part.
func readState(pr *proc, f frame, part []float32) error {
	d := dec{b: f.payload}
	n := len(part)
	if f.typ == msgBlockShared {
		ref := d.ref("state")
		err := d.done("state")
		if err == nil && ref.count != n {
			err = fmt.Errorf("%w: state of %d values, want %d", ErrBadFrame, ref.count, n)
		}
		if err != nil {
			return err
		}
		return readShared(pr.shm, pr.shmSize, ref, part, "state")
	}
	if got := d.count(4, "state"); got != n || len(d.b) != 4*n {
		return fmt.Errorf("%w: state of %d values, want %d", ErrBadFrame, got, n)
	}
	copy(f32Bytes(part), d.b)
	return nil
}

// Restore implements models.RecurrentState. It also revives a state lost
// with its worker: the data replaces everything.
func (s *remoteState) Restore(data []float32, pos int) error {
	if s.freed {
		return fmt.Errorf("%w: restore after Free", models.ErrState)
	}
	if len(data) != s.Len() {
		return fmt.Errorf("%w: snapshot of %d values, state holds %d", models.ErrState, len(data), s.Len())
	}
	if pos < 0 || pos > 1<<30 {
		return fmt.Errorf("%w: position %d", models.ErrState, pos)
	}
	s.dropMarks() // the worker's state forgets them too
	err := s.p.stateReq(func(g *group) error {
		if s.slot.id != 0 && s.slot.gen != g.gen {
			s.slot.id = 0 // died with its worker
		}
		s.err = nil
		id, err := s.p.live(g, s, true)
		if err != nil {
			return err
		}
		per := len(data) / len(g.ranks)
		_, err = s.p.call(g, msgRestoreState, func(pr *proc) rankReq {
			part := data[pr.rank*per : (pr.rank+1)*per] // the rank's share
			e := restoreHeader(id, pos)
			if int64(len(part))*4 <= pr.shmSize && len(part) > 0 {
				// One request at a time: the region is free until the reply.
				if err := writeShared(pr.shm, f32Bytes(part)); err == nil {
					e.ref(shmRef{count: len(part)})
					return rankReq{typ: msgRestoreStateShared, payload: e.b}
				}
			}
			e.f32sHeader(len(part))
			return rankReq{payload: e.b, extra: f32Bytes(part), limit: 0}
		}, msgOK)
		return err
	})
	if err != nil {
		s.err, s.pos = fmt.Errorf("restore recurrent state: %w", err), -1
		return s.err
	}
	s.pos = pos
	return nil
}

// Clone implements models.RecurrentState. A state that cannot be cloned
// (lost, or the request failed) gives a clone whose Pos is -1, which no
// Forward accepts.
func (s *remoteState) Clone() models.RecurrentState {
	c := s.p.newRemoteState()
	c.pos = s.pos
	if s.freed {
		c.err, c.pos = fmt.Errorf("%w: clone after Free", models.ErrState), -1
		return c
	}
	if s.err == nil && s.slot.id == 0 {
		return c // nothing held yet: neither is the clone
	}
	err := s.p.stateReq(func(g *group) error {
		dst, _, err := s.p.newFrom(g, s, msgCloneState, encodeClone)
		if err != nil {
			return err
		}
		*c.slot = stateSlot{id: dst, gen: g.gen}
		return nil
	})
	if err != nil {
		c.err, c.pos = fmt.Errorf("clone recurrent state: %w", err), -1
	}
	return c
}

// newFrom asks g's ranks for a new state made from s (typ CloneState or
// HoldState, its payload from the two ids; p.req held): the new id and
// the replies. On an error the id is queued to be freed, on every rank
// that made it.
func (p *Proxy) newFrom(g *group, s *remoteState, typ msgType, payload func(src, dst uint64) []byte) (uint64, []frame, error) {
	src, err := p.live(g, s, false)
	if err != nil {
		return 0, nil, err
	}
	dst := p.newStateID()
	replies, err := p.call(g, typ, same(payload(src, dst), 0), msgOK)
	if err != nil {
		p.dropState(stateSlot{id: dst, gen: g.gen})
		return 0, nil, err
	}
	return dst, replies, nil
}

// Reset implements models.RecurrentState. A state that cannot be reset
// in its worker lets its id go and holds nothing again (zeros at 0).
func (s *remoteState) Reset() {
	if s.freed {
		return
	}
	s.dropMarks()
	s.err, s.pos = nil, 0
	if s.slot.id == 0 {
		return
	}
	err := s.p.stateReq(func(g *group) error {
		id, err := s.p.live(g, s, false)
		if err != nil {
			return err
		}
		_, err = s.p.call(g, msgResetState, same(encodeStateID(id), 0), msgOK)
		return err
	})
	if err != nil {
		s.p.dropState(*s.slot)
		*s.slot = stateSlot{}
		s.err = nil
	}
}

// Free releases the state in the worker (with the next request): the
// session calls it when it drops the state. The state is unusable after.
func (s *remoteState) Free() {
	if s.freed {
		return
	}
	s.dropMarks()
	s.freed = true
	s.cleanup.Stop()
	s.p.dropState(*s.slot)
	*s.slot = stateSlot{}
}
