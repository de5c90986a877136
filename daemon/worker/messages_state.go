package worker

import "fmt"

// Recurrent-state requests (hybrid models; see state.go). A state lives
// in the worker under a non-zero id that the daemon picks; ids are never
// reused within a Proxy, so an id of a dead worker can never name a state
// of its successor.
//
//	NewState{id}                         OK
//	FreeStates{ids}                      OK (unknown ids are ignored)
//	SnapshotState{id}                    Block{float32[]} or BlockShared{ref}
//	RestoreState{id, pos, float32[]}     OK
//	RestoreStateShared{id, pos, ref}     OK (the daemon pwrote the data first)
//	CloneState{src, dst}                 OK (dst is a new id)
//	ResetState{id}                       OK
//	HoldState{src, dst, reserve}         OK{held u8} (a clone under dst where the
//	                                     backend's memory keeps reserve bytes free
//	                                     after it; held 0: declined, nothing made)
//	CopyState{src, dst}                  OK (dst's contents and position := src's,
//	                                     in dst's own buffers)
//	MarkState{src, reserve, n,           OK{held u8} (the next Forward of src leaves
//	  n × (pos i32, dst u64)}            a copy of it at each pos under dst, where
//	                                     the memory keeps reserve bytes free; held
//	                                     0: declined; n = 0 forgets a request)

// maxFreeIDs bounds the ids of one FreeStates request (the daemon sends
// at most this many at once).
const maxFreeIDs = 1 << 16

func encodeStateID(id uint64) []byte {
	var e enc
	e.u64(id)
	return e.b
}

func encodeFreeStates(ids []uint64) []byte {
	var e enc
	e.u32(uint32(len(ids)))
	for _, id := range ids {
		e.u64(id)
	}
	return e.b
}

func decodeFreeStates(d *dec) []uint64 {
	n := d.count(8, "ids")
	if d.err == nil && n > maxFreeIDs {
		d.err = fmt.Errorf("%w: %d ids to free (at most %d)", ErrBadFrame, n, maxFreeIDs)
		return nil
	}
	ids := make([]uint64, 0, n)
	for range n {
		ids = append(ids, d.u64("id"))
	}
	return ids
}

// restoreHeader starts a RestoreState or RestoreStateShared payload.
func restoreHeader(id uint64, pos int) *enc {
	e := &enc{}
	e.u64(id)
	e.i32(pos)
	return e
}

func encodeHold(src, dst uint64, reserve int64) []byte {
	var e enc
	e.u64(src)
	e.u64(dst)
	e.u64(uint64(max(reserve, 0)))
	return e.b
}

func encodeClone(src, dst uint64) []byte {
	var e enc
	e.u64(src)
	e.u64(dst)
	return e.b
}

// maxMarks bounds the positions of one MarkState request.
const maxMarks = 1 << 12

// markReq is a MarkState request.
type markReq struct {
	src, reserve uint64
	pos          []int
	dst          []uint64
}

func (m *markReq) encode() []byte {
	var e enc
	e.u64(m.src)
	e.u64(m.reserve)
	e.u32(uint32(len(m.pos)))
	for i, p := range m.pos {
		e.i32(p)
		e.u64(m.dst[i])
	}
	return e.b
}

func decodeMark(d *dec) markReq {
	m := markReq{src: d.u64("src"), reserve: d.u64("reserve")}
	n := d.count(12, "marks")
	if d.err == nil && n > maxMarks {
		d.err = fmt.Errorf("%w: %d marks (at most %d)", ErrBadFrame, n, maxMarks)
		return m
	}
	for range n {
		m.pos = append(m.pos, d.i32("pos"))
		m.dst = append(m.dst, d.u64("dst"))
	}
	return m
}
