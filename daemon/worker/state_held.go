package worker

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pocketllm/pocketllm/models"
)

// Snapshots the worker keeps. A hybrid's snapshot of a Qwen3.5-27B is
// 151 MB; through the daemon's cache it crossed the device, the worker,
// the shared region and the daemon's heap twice (tens of milliseconds
// each way, 16 times in a 4096-token prompt). A held snapshot is a clone
// of the state that stays in the worker, on the device (HoldState), and
// restores by a device copy into the live state's own buffers (CopyState,
// so its decode recordings stay valid). The daemon's cache keeps the
// handle and bounds the bytes as before; evicting it frees the clone.
// A held snapshot dies with its worker: restoring it then fails and the
// session recomputes, as for any lost snapshot.

// heldReserve is the device memory a held snapshot must leave free: KV
// blocks and scratch are allocated up front, but a prefill's scratch can
// still grow, and a failed allocation fails the worker.
const heldReserve = 1 << 30

// ErrNotHeld is returned by Hold when a rank declines (too little device
// memory): the caller snapshots through the host instead.
var ErrNotHeld = errors.New("snapshot not held by the worker")

// heldState is a snapshot kept by the worker: a state nobody forwards.
type heldState struct {
	c *remoteState
}

var (
	_ models.HeldState    = (*heldState)(nil)
	_ models.HoldingState = (*remoteState)(nil)
	_ models.MarkingState = (*remoteState)(nil)
)

func (h *heldState) Pos() int     { return h.c.pos }
func (h *heldState) Bytes() int64 { return h.c.SizeBytes() }
func (h *heldState) Release()     { h.c.Free() }

// Snapshot reads the held copy to the daemon (a marked pass's copies
// where the daemon keeps the snapshots: session.ModelConfig.HostSnapshots);
// nil where it cannot be read.
func (h *heldState) Snapshot() []float32 { return h.c.Snapshot() }

// Hold implements models.HoldingState.
func (s *remoteState) Hold() (models.HeldState, error) {
	switch {
	case s.freed:
		return nil, fmt.Errorf("%w: hold after Free", models.ErrState)
	case s.err != nil:
		return nil, s.err
	case s.slot.id == 0:
		return nil, fmt.Errorf("%w: nothing to hold (an empty state)", ErrNotHeld)
	}
	c := s.p.newRemoteState()
	c.pos = s.pos
	err := s.p.stateReq(func(g *group) error {
		dst, replies, err := s.p.newFrom(g, s, msgHoldState, func(src, dst uint64) []byte { return encodeHold(src, dst, heldReserve) })
		if err != nil {
			return err
		}
		for r, f := range replies {
			if len(f.payload) != 1 || f.payload[0] != 1 {
				s.p.dropState(stateSlot{id: dst, gen: g.gen})
				return fmt.Errorf("%w: rank %d has too little device memory", ErrNotHeld, r)
			}
		}
		*c.slot = stateSlot{id: dst, gen: g.gen}
		return nil
	})
	if err != nil {
		c.Free()
		return nil, fmt.Errorf("hold recurrent state: %w", err)
	}
	return &heldState{c: c}, nil
}

// RestoreHeld implements models.HoldingState: s becomes h's contents at
// h's position, by a copy in the worker into s's own buffers.
func (s *remoteState) RestoreHeld(h models.HeldState) error {
	hs, ok := h.(*heldState)
	switch {
	case s.freed:
		return fmt.Errorf("%w: restore after Free", models.ErrState)
	case !ok || hs.c.p != s.p:
		return fmt.Errorf("%w: a held snapshot %T of another worker", models.ErrState, h)
	case hs.c.freed:
		return fmt.Errorf("%w: the held snapshot was released", models.ErrState)
	}
	s.dropMarks() // the worker's state forgets them in the copy
	err := s.p.stateReq(func(g *group) error {
		if s.slot.id != 0 && s.slot.gen != g.gen {
			s.slot.id = 0 // died with its worker
		}
		src, err := s.p.live(g, hs.c, false)
		if err != nil {
			return err
		}
		if src == 0 {
			return fmt.Errorf("%w: the held snapshot holds nothing", models.ErrState)
		}
		s.err = nil
		dst, err := s.p.live(g, s, true)
		if err != nil {
			return err
		}
		_, err = s.p.call(g, msgCopyState, same(encodeClone(src, dst), 0), msgOK)
		return err
	})
	if err != nil {
		s.err, s.pos = fmt.Errorf("restore held recurrent state: %w", err), -1
		return s.err
	}
	s.pos = hs.c.pos
	return nil
}

// remoteMarks is a state's MarkState request: the ids its worker gives
// the copies the next Forward leaves at pos.
type remoteMarks struct {
	pos    []int
	ids    []uint64
	gen    int
	filled bool // a Forward reached the last of pos
}

// HoldAt implements models.MarkingState: a MarkState request to every
// rank (each keeps its share of the copies). A rank that declines (too
// little device memory, as for Hold) makes it ErrNotHeld, the request
// forgotten on all.
func (s *remoteState) HoldAt(pos []int) error {
	s.dropMarks()
	switch {
	case s.freed:
		return fmt.Errorf("%w: hold after Free", models.ErrState)
	case s.err != nil:
		return s.err
	case len(pos) == 0:
		return nil
	case len(pos) > maxMarks:
		return fmt.Errorf("%w: %d marks (at most %d)", ErrNotHeld, len(pos), maxMarks)
	}
	return s.p.stateReq(func(g *group) error {
		src, err := s.p.live(g, s, true)
		if err != nil {
			return err
		}
		m := markReq{src: src, reserve: heldReserve, pos: pos}
		for range pos {
			m.dst = append(m.dst, s.p.newStateID())
		}
		replies, err := s.p.call(g, msgMarkState, same(m.encode(), 0), msgOK)
		if err != nil {
			return fmt.Errorf("mark recurrent state: %w", err)
		}
		for r, f := range replies {
			if len(f.payload) != 1 || f.payload[0] != 1 {
				forget := markReq{src: src}
				if _, err := s.p.call(g, msgMarkState, same(forget.encode(), 0), msgOK); err != nil {
					return fmt.Errorf("mark recurrent state: %w", err)
				}
				return fmt.Errorf("%w: rank %d declined the marks", ErrNotHeld, r)
			}
		}
		s.marks = &remoteMarks{pos: slices.Clone(pos), ids: m.dst, gen: g.gen}
		return nil
	})
}

// TakeHeld implements models.MarkingState: the copies as held snapshots,
// once a Forward reached the last mark.
func (s *remoteState) TakeHeld() []models.HeldState {
	m := s.marks
	s.marks = nil
	if m == nil {
		return nil
	}
	if !m.filled {
		for _, id := range m.ids {
			s.p.dropState(stateSlot{id: id, gen: m.gen})
		}
		return nil
	}
	out := make([]models.HeldState, len(m.ids))
	for i, id := range m.ids {
		c := s.p.newRemoteState()
		c.pos = m.pos[i]
		*c.slot = stateSlot{id: id, gen: m.gen}
		out[i] = &heldState{c: c}
	}
	return out
}

// dropMarks forgets a request of HoldAt that no pass will fill.
func (s *remoteState) dropMarks() {
	if s.marks != nil {
		s.marks.filled = false
		s.TakeHeld()
	}
}

// markCount is the number of logits rows before the last one that a
// MarkedLogits Forward of s returns.
func (s *remoteState) markCount() int {
	if s == nil || s.marks == nil {
		return 0
	}
	return len(s.marks.pos)
}
