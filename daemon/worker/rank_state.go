package worker

import (
	"fmt"
	"runtime"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
)

// maxStates bounds the recurrent states a rank holds at once: a daemon
// that leaks them is refused rather than allowed to fill the device.
const maxStates = 1 << 16

// gcFreedBytes is how many bytes of freed states trigger a collection.
const gcFreedBytes = 256 << 20

// stateOf resolves a request's state id (rk.states is nil for
// attention-only models, which take none).
func (rk *rank) stateOf(id uint64, what string) (models.RecurrentState, error) {
	if rk.states == nil {
		return nil, fmt.Errorf("%w: %s: the model keeps no recurrent state", errBadRequest, what)
	}
	st, ok := rk.states[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s: no recurrent state %d", errBadRequest, what, id)
	}
	return st, nil
}

// addState registers a new state under a fresh id.
func (rk *rank) addState(id uint64, st models.RecurrentState, what string) error {
	if _, dup := rk.states[id]; dup || id == 0 {
		return fmt.Errorf("%w: %s: state id %d in use or zero", errBadRequest, what, id)
	}
	if len(rk.states) >= maxStates {
		return fmt.Errorf("%w: %s: %d recurrent states held already", errBadRequest, what, len(rk.states))
	}
	rk.states[id] = st
	return nil
}

// cloneArgs decodes a CloneState or HoldState request (with its reserve
// where withReserve): the source state and the new id, which must be free.
func (rk *rank) cloneArgs(d *dec, what string, withReserve bool) (st models.RecurrentState, dst, reserve uint64, err error) {
	src := d.u64("src")
	dst = d.u64("dst")
	if withReserve {
		reserve = d.u64("reserve")
	}
	if err := d.done(what); err != nil {
		return nil, 0, 0, err
	}
	if st, err = rk.stateOf(src, what); err != nil {
		return nil, 0, 0, err
	}
	if _, dup := rk.states[dst]; dup || dst == 0 {
		return nil, 0, 0, fmt.Errorf("%w: %s: state id %d in use or zero", errBadRequest, what, dst)
	}
	return st, dst, reserve, nil
}

// handleState answers the recurrent-state requests; ok is false for
// other types.
func (rk *rank) handleState(f frame) (typ msgType, payload, extra []byte, ok bool, err error) {
	d := dec{b: f.payload}
	fail := func(err error) (msgType, []byte, []byte, bool, error) { return 0, nil, nil, true, err }
	if rk.states == nil {
		switch f.typ {
		case msgNewState, msgFreeStates, msgSnapshotState, msgRestoreState, msgRestoreStateShared, msgCloneState, msgResetState,
			msgHoldState, msgCopyState, msgMarkState:
			return fail(fmt.Errorf("%w: %s: the model keeps no recurrent state", errBadRequest, f.typ))
		}
	}
	switch f.typ {
	case msgNewState:
		id := d.u64("id")
		if err := d.done("new-state"); err != nil {
			return fail(err)
		}
		st, _ := rk.model.NewState().(models.RecurrentState)
		if st == nil {
			return fail(fmt.Errorf("new-state: the model made no recurrent state"))
		}
		return msgOK, nil, nil, true, rk.addState(id, st, "new-state")
	case msgFreeStates:
		ids := decodeFreeStates(&d)
		if err := d.done("free-states"); err != nil {
			return fail(err)
		}
		for _, id := range ids {
			delete(rk.marks, id)
			if st, ok := rk.states[id]; ok {
				rk.freedBytes += st.SizeBytes()
				delete(rk.states, id)
				// Its recordings address the buffers let go here.
				rk.graphs.dropState(id)
			}
		}
		// A backend's buffers go back to its free list when collected
		// (the CUDA backend's finalizers), and the Go heap, which paces
		// collections, barely grows with device memory: collect once
		// enough state memory was let go, so that new states reuse it
		// instead of failing an allocation.
		if rk.freedBytes >= gcFreedBytes {
			runtime.GC()
			rk.freedBytes = 0
		}
		return msgOK, nil, nil, true, nil
	case msgSnapshotState:
		id := d.u64("id")
		if err := d.done("snapshot-state"); err != nil {
			return fail(err)
		}
		st, err := rk.stateOf(id, "snapshot-state")
		if err != nil {
			return fail(err)
		}
		var e enc
		if n := st.Len(); rk.shm.fits(n) {
			ref := shmRef{count: n}
			buf, err := rk.shm.floats(ref, "state")
			if err != nil {
				return fail(err)
			}
			// Straight into the region where the state can (models'
			// DeltaState): no second copy of it in this process.
			if to, ok := st.(interface{ SnapshotTo([]float32) bool }); !ok || !to.SnapshotTo(buf) {
				copy(buf, st.Snapshot())
			}
			e.ref(ref)
			return msgBlockShared, e.b, nil, true, nil
		}
		data := st.Snapshot()
		e.f32sHeader(len(data))
		return msgBlock, e.b, f32Bytes(data), true, nil
	case msgRestoreState, msgRestoreStateShared:
		id, pos := d.u64("id"), d.i32("pos")
		var data []float32
		if f.typ == msgRestoreState {
			data = d.f32s("state")
		} else if ref := d.ref("state"); d.err == nil {
			if data, err = rk.shm.floats(ref, "state"); err != nil {
				return fail(err)
			}
		}
		if err := d.done(f.typ.String()); err != nil {
			return fail(err)
		}
		st, err := rk.stateOf(id, f.typ.String())
		if err != nil {
			return fail(err)
		}
		// Restore writes into the state's buffers: its recordings stay
		// valid (graphs.go).
		if err := st.Restore(data, pos); err != nil {
			return fail(fmt.Errorf("%w: %w", errBadRequest, err))
		}
		return msgOK, nil, nil, true, nil
	case msgCloneState:
		st, dst, _, err := rk.cloneArgs(&d, "clone-state", false)
		if err != nil {
			return fail(err)
		}
		// The clone has buffers of its own, recorded anew under dst.
		return msgOK, nil, nil, true, rk.addState(dst, st.Clone(), "clone-state")
	case msgHoldState:
		st, dst, reserve, err := rk.cloneArgs(&d, "hold-state", true)
		if err != nil {
			return fail(err)
		}
		// A held copy is optional (the daemon snapshots through the host
		// instead): decline it, as an answer rather than an error, where
		// the device would be left short, since a failed allocation fails
		// the backend. Ranks may answer differently; the daemon frees dst
		// on all of them then.
		if !rk.roomFor(st.SizeBytes(), reserve) {
			return msgOK, []byte{0}, nil, true, nil
		}
		if err := rk.addState(dst, st.Clone(), "hold-state"); err != nil {
			return fail(err)
		}
		return msgOK, []byte{1}, nil, true, nil
	case msgCopyState:
		src, dst := d.u64("src"), d.u64("dst")
		if err := d.done("copy-state"); err != nil {
			return fail(err)
		}
		from, err := rk.stateOf(src, "copy-state")
		if err != nil {
			return fail(err)
		}
		to, err := rk.stateOf(dst, "copy-state")
		if err != nil {
			return fail(err)
		}
		// Into dst's own buffers: its decode recordings stay valid.
		cp, ok := to.(interface {
			CopyFrom(models.RecurrentState) error
		})
		if !ok {
			return fail(fmt.Errorf("%w: copy-state: %T cannot copy", errBadRequest, to))
		}
		if err := cp.CopyFrom(from); err != nil {
			return fail(fmt.Errorf("%w: copy-state: %w", errBadRequest, err))
		}
		return msgOK, nil, nil, true, nil
	case msgMarkState:
		m := decodeMark(&d)
		if err := d.done("mark-state"); err != nil {
			return fail(err)
		}
		held, err := rk.markState(m)
		if err != nil {
			return fail(err)
		}
		return msgOK, []byte{held}, nil, true, nil
	case msgResetState:
		id := d.u64("id")
		if err := d.done("reset-state"); err != nil {
			return fail(err)
		}
		st, err := rk.stateOf(id, "reset-state")
		if err != nil {
			return fail(err)
		}
		st.Reset() // in place, like Restore
		return msgOK, nil, nil, true, nil
	}
	return 0, nil, nil, false, nil
}

// markState answers MarkState: the state's next Forward leaves copies of
// it at m.pos, kept under m.dst once it ran (keepMarked). Declined (0),
// nothing asked, where the copies would leave the device short, as
// HoldState declines, or the state cannot mark (n = 0 forgets a request).
func (rk *rank) markState(m markReq) (held uint8, err error) {
	st, err := rk.stateOf(m.src, "mark-state")
	if err != nil {
		return 0, err
	}
	ms, ok := st.(models.MarkingState)
	delete(rk.marks, m.src)
	if ok {
		ms.TakeHeld() // forgets an earlier request
	}
	if len(m.pos) == 0 || !ok {
		return 0, nil
	}
	seen := map[uint64]bool{}
	for _, id := range m.dst {
		if _, dup := rk.states[id]; dup || id == 0 || seen[id] {
			return 0, fmt.Errorf("%w: mark-state: state id %d in use or zero", errBadRequest, id)
		}
		seen[id] = true
	}
	if len(rk.states)+len(m.dst) > maxStates {
		return 0, fmt.Errorf("%w: mark-state: %d recurrent states held already", errBadRequest, len(rk.states))
	}
	if !rk.roomFor(int64(len(m.pos))*st.SizeBytes(), m.reserve) {
		return 0, nil
	}
	if err := ms.HoldAt(m.pos); err != nil {
		return 0, nil
	}
	if rk.marks == nil {
		rk.marks = map[uint64][]uint64{}
	}
	rk.marks[m.src] = m.dst
	return 1, nil
}

// keepMarked registers, after a Forward of the state id, the copies its
// MarkState request asked for, under the request's ids; after a failed
// pass there are none, and the ids name nothing (the daemon frees them).
func (rk *rank) keepMarked(id uint64, state any) {
	ids, ok := rk.marks[id]
	if !ok {
		return
	}
	delete(rk.marks, id)
	ms, ok := state.(models.MarkingState)
	if !ok {
		return
	}
	held := ms.TakeHeld()
	if len(held) != len(ids) {
		return
	}
	for i, h := range held {
		hd, ok := h.(*models.HeldDelta)
		if !ok {
			return
		}
		if err := rk.addState(ids[i], hd.State, "mark-state"); err != nil {
			rk.log.Warn("keep a marked state", "err", err)
		}
	}
}

// roomFor reports whether the device keeps reserve bytes free after
// allocating bytes more (always, for a backend without a memory of its
// own): optional copies (held snapshots, marks) are declined otherwise,
// since a failed allocation fails the backend.
func (rk *rank) roomFor(bytes int64, reserve uint64) bool {
	room, ok := rk.be.(kernels.MemoryRoom)
	if !ok {
		return true
	}
	free, err := room.FreeBytes()
	return err == nil && free >= bytes+int64(min(reserve, 1<<50))
}
