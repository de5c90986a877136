package models

import (
	"fmt"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
)

// Snapshots taken inside one pass. The session cache keeps a hybrid's
// recurrent state at fixed positions (every 256 tokens up to 4K, ...), and
// a pass's end used to be the only place where that state exists, so a
// long prompt was prefilled in pieces ending on those positions: on one
// H200 a 4096-token Qwen3.5-27B prompt took 687 ms in sixteen pieces
// against 424 ms in one pass (each piece reads every weight again and
// pays a round trip and a snapshot). A marked pass runs the projections,
// norms and attention layers over all its rows at once; each DeltaNet
// layer's delta rule runs as the segments a piece ending on each mark
// would have run (kernels.DeltaSegmenter: one launch a run of chunk-aligned
// segments on CUDA), its state at each mark copied on the device into that
// mark's own state, and its convolution's state at a mark is the input
// rows before it (markedMix). A segment is exactly what a piece ending
// there ran, so the recurrent states are bit for bit the pieces' wherever
// the backend's other kernels give a row the same result in a pass of any
// length (the CPU backend's do; a GPU's GEMMs may differ in the last bits
// between pass lengths).

// MarkingState is a RecurrentState that can keep copies of itself at
// positions inside its next pass.
type MarkingState interface {
	RecurrentState
	// HoldAt asks the next Forward of the state to leave a held copy of
	// it at each position in pos (ascending, past Pos()); that Forward must
	// reach the last of them (a mark at a chunk's end of Model.MaxChunk
	// is a copy of the whole state). An error, nothing asked, where the
	// runner cannot: the caller then ends its passes on those positions
	// instead.
	HoldAt(pos []int) error
	// TakeHeld returns the copies the last Forward left, one a position of
	// HoldAt in its order, and forgets the request: nil where that pass
	// failed or HoldAt was not called.
	TakeHeld() []HeldState
}

var (
	_ MarkingState = (*DeltaState)(nil)
	_ HeldState    = (*HeldDelta)(nil)
)

// deltaMarks is a DeltaState's request of HoldAt. Model.Forward may run
// a pass in chunks (Model.MaxChunk): each chunk fills the marks inside it
// and the one at its end.
type deltaMarks struct {
	pos    []int
	dst    []*DeltaState
	filled int // dst[:filled] hold the states at pos[:filled]
	inner  int // the chunk running now segments at pos[filled:inner]
}

// HeldDelta is a copy of a DeltaState that a marked pass left: a state of
// its own that no pass advances. A worker registers State under an id of
// its own; the session cache of a runner in its own process stores Data,
// as it stores any snapshot of such a state.
type HeldDelta struct {
	State *DeltaState
}

// Pos implements HeldState.
func (h *HeldDelta) Pos() int { return h.State.pos }

// Bytes implements HeldState.
func (h *HeldDelta) Bytes() int64 { return h.State.SizeBytes() }

// Release implements HeldState: the buffers go with the last reference
// (the backends free them when collected).
func (h *HeldDelta) Release() {}

// Data is the copy's contents as RecurrentState.Snapshot gives them.
func (h *HeldDelta) Data() []float32 { return h.State.Snapshot() }

// HoldAt implements MarkingState. It needs a backend that views and
// copies buffers in place (kernels.BufViewer, kernels.BufCopier).
func (s *DeltaState) HoldAt(pos []int) error {
	s.marks = nil
	if _, ok := s.be.(kernels.BufViewer); !ok {
		return fmt.Errorf("%w: backend %s cannot view buffers", kernels.ErrUnsupported, s.be.Name())
	}
	if _, ok := s.be.(kernels.BufCopier); !ok {
		return fmt.Errorf("%w: backend %s cannot copy buffers", kernels.ErrUnsupported, s.be.Name())
	}
	if len(pos) == 0 {
		return nil
	}
	last := s.pos
	for _, p := range pos {
		if p <= last {
			return fmt.Errorf("%w: marks %v from a state at %d", ErrState, pos, s.pos)
		}
		last = p
	}
	m := &deltaMarks{pos: slices.Clone(pos)}
	for range pos {
		d := newDeltaState(s.be, s.shape, len(s.conv))
		d.pos = -1 // until the pass fills it
		m.dst = append(m.dst, d)
	}
	s.marks = m
	return nil
}

// TakeHeld implements MarkingState.
func (s *DeltaState) TakeHeld() []HeldState {
	m := s.marks
	s.marks = nil
	if m == nil || m.filled < len(m.pos) {
		return nil
	}
	out := make([]HeldState, len(m.dst))
	for i, d := range m.dst {
		out[i] = &HeldDelta{State: d}
	}
	return out
}

// pendingMarks are the positions of HoldAt not filled yet (Model.Forward's
// MarkedLogits rows).
func (s *DeltaState) pendingMarks() []int {
	if s.marks == nil {
		return nil
	}
	return s.marks.pos[s.marks.filled:]
}

// beginMarks is hybrid.Forward's start of a pass over rows from start: the
// marks strictly inside it are the segment ends of its DeltaNet layers.
// A mark the pass has passed over is an error (and forgets the request).
func (s *DeltaState) beginMarks(start, rows int) error {
	m := s.marks
	if m == nil {
		return nil
	}
	if m.filled < len(m.pos) && m.pos[m.filled] <= start {
		s.marks = nil
		return fmt.Errorf("%w: mark at %d before a pass from %d", ErrState, m.pos[m.filled], start)
	}
	m.inner = m.filled
	for m.inner < len(m.pos) && m.pos[m.inner] < start+rows {
		m.inner++
	}
	return nil
}

// endMarks is hybrid.Forward's end of a pass that reached end: the marks
// inside it are filled, and a mark at its end takes a copy of the state.
func (s *DeltaState) endMarks(end int) error {
	m := s.marks
	if m == nil {
		return nil
	}
	for ; m.filled < m.inner; m.filled++ {
		m.dst[m.filled].pos = m.pos[m.filled]
	}
	if m.filled < len(m.pos) && m.pos[m.filled] == end {
		if err := m.dst[m.filled].CopyFrom(s); err != nil {
			s.marks = nil
			return err
		}
		m.filled++
	}
	return nil
}

// markedMix is mix over a marked pass: the convolution and the delta rule
// as passes ending on the marks, each one's end state copied into its
// mark's state, then the gated norm over every row.
//
// The convolution is one launch over all rows where every mark leaves
// ConvKernel-1 rows before it in the pass: a row's output does not depend
// on where passes end, and the state at a mark is the inputs of the rows
// before it, copied from the pass's input. The delta rule is one
// DeltaSegmenter call where the backend has it (one launch for runs of
// chunked segments on CUDA), else a call a segment.
func (n *DeltaNet) markedMix(p *Pass, st *DeltaState, b deltaBufs) {
	rows, sh := p.Rows, n.Shape
	view := n.be.(kernels.BufViewer).ViewBuf
	cp := n.be.(kernels.BufCopier)
	cd, vh, vd := sh.ConvDim(), sh.VHeads, sh.VHeads*sh.DV
	ends := make([]int, 0, st.marks.inner-st.marks.filled)
	for _, m := range st.marks.pos[st.marks.filled:st.marks.inner] {
		ends = append(ends, m-p.Seq.Start)
	}
	dst := st.marks.dst[st.marks.filled:st.marks.inner]
	convState, recState := sh.ConvStateLen(), sh.RecStateLen()
	window := sh.ConvKernel - 1
	if ends[0] >= window {
		n.ops.CausalConv1D(b.conv, b.qkv, st.conv[n.Index], n.Conv, rows, sh)
		for i, e := range ends {
			cp.CopyBuf(dst[i].conv[n.Index], view(b.qkv, (e-window)*cd, window*cd), convState)
		}
	} else {
		kernels.Segments(ends, rows, func(i, r0, r1 int) {
			r := r1 - r0
			n.ops.CausalConv1D(view(b.conv, r0*cd, r*cd), view(b.qkv, r0*cd, r*cd), st.conv[n.Index], n.Conv, r, sh)
			if i < len(ends) {
				cp.CopyBuf(dst[i].conv[n.Index], st.conv[n.Index], convState)
			}
		})
	}
	if seg, ok := n.ops.(kernels.DeltaSegmenter); ok {
		snaps := make([]kernels.Buf, len(dst))
		for i, d := range dst {
			snaps[i] = d.rec[n.Index]
		}
		seg.GatedDeltaRuleSegments(b.core, b.conv, b.a, b.b, st.rec[n.Index], n.ALog, n.DtBias, rows, sh, ends, snaps)
	} else {
		kernels.Segments(ends, rows, func(i, r0, r1 int) {
			r := r1 - r0
			n.ops.GatedDeltaRule(view(b.core, r0*vd, r*vd), view(b.conv, r0*cd, r*cd), view(b.a, r0*vh, r*vh),
				view(b.b, r0*vh, r*vh), st.rec[n.Index], n.ALog, n.DtBias, r, sh)
			if i < len(ends) {
				cp.CopyBuf(dst[i].rec[n.Index], st.rec[n.Index], recState)
			}
		})
	}
	n.ops.RMSNormGated(b.core, b.core, b.z, n.Norm, rows*sh.VHeads, sh.DV, n.Eps)
}
