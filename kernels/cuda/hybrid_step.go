//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The one-token DeltaNet mix in one launch (kernels.FusedDeltaMix;
// hybrid.cu: delta_step_K, where the geometry and the counters are
// explained). Off unless POCKET_DELTA_FUSED=1 until measured.

var _ kernels.FusedDeltaMix = (*Backend)(nil)

// Limits of delta_step (hybrid.cu: DS_ROWS, DS_CH, 512 threads).
const (
	maxStepConv   = 4
	maxStepRows   = 32
	maxStepCh     = 640
	maxStepKHeads = 64
	// stepSlots is the counter ring: a slot is reused only stepSlots calls
	// later, far beyond the launches PDL lets overlap.
	stepSlots = 64
)

// deltaStepPlan is delta_step's block for s: DVP = dv rounded up to a
// warp, the most row groups (≤ 4) that keep the block within 512 threads;
// ok is false for shapes it does not take.
func deltaStepPlan(s kernels.DeltaShape) (threads int, ok bool) {
	if s.KHeads < 1 || s.KHeads > maxStepKHeads || s.VHeads%s.KHeads != 0 || s.DK < 1 || s.DV < 1 ||
		s.ConvKernel < 1 || s.ConvKernel > maxStepConv || 2*s.DK+s.DV > maxStepCh {
		return 0, false
	}
	dvp := cdiv(s.DV, 32) * 32
	ng := min(4, 512/dvp)
	if ng < 1 || cdiv(s.DK, ng) > maxStepRows {
		return 0, false
	}
	return ng * dvp, true
}

// SetDeltaFused turns DeltaMix on or off for this backend (default
// POCKET_DELTA_FUSED), so that conformance can check it whatever the
// environment says; it returns the previous setting.
func (b *Backend) SetDeltaFused(on bool) (was bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.hybridState()
	was, m.fused = m.fused, on
	return was
}

// DeltaMix implements kernels.FusedDeltaMix with one delta_step launch.
// It declines while switched off, for shapes deltaStepPlan rejects, and
// for weights the three ops would refuse, so that those report the error.
func (b *Backend) DeltaMix(core, qkv, z, a, bb, convState, recState kernels.Buf, conv, aLog, dtBias, norm kernels.Tensor,
	s kernels.DeltaShape, eps float32) bool {
	threads, ok := deltaStepPlan(s)
	if !ok {
		return false
	}
	t, isT := conv.(*tensor)
	if !isT || t.w.DType != kernels.F32 && t.w.DType != kernels.F16 && t.w.DType != kernels.BF16 ||
		t.w.Elems() != s.ConvDim()*s.ConvKernel {
		return false
	}
	al, dt, nw := normVec(aLog, s.VHeads), normVec(dtBias, s.VHeads), normVec(norm, s.DV)
	vd := s.VHeads * s.DV
	if al == 0 || dt == 0 || nw == 0 || core.Len() < vd || qkv.Len() < s.ConvDim() || z.Len() < vd ||
		a.Len() < s.VHeads || bb.Len() < s.VHeads || convState.Len() < s.ConvStateLen() || recState.Len() < s.RecStateLen() {
		return false
	}
	b.mu.Lock()
	on := b.hybridState().fused
	b.mu.Unlock()
	if !on {
		return false
	}
	m, ok := b.hybridEnter()
	defer b.exit()
	if !ok {
		return true
	}
	if m.stepCnt == 0 {
		// Counters start at zero and every launch leaves its slot there.
		m.stepCnt = b.alloc(stepSlots * maxStepKHeads * 4)
		b.fail(cu.MemsetD32Async(m.stepCnt, 0, stepSlots*maxStepKHeads, b.stream))
	}
	cnt := m.stepCnt + cu.DevicePtr(m.stepSlot*maxStepKHeads*4)
	m.stepSlot = (m.stepSlot + 1) % stepSlots
	f := m.step[s.ConvKernel-1]
	if switches.deltaStepMode > 0 && s.ConvKernel == 4 {
		f = m.stepProbe[switches.deltaStepMode-1]
	}
	b.runHybrid(f, s.VHeads, 1, threads, ptr(dptr(core)), ptr(dptr(qkv)), ptr(dptr(z)),
		ptr(dptr(a)), ptr(dptr(bb)), ptr(dptr(convState)), ptr(dptr(recState)), ptr(t.data), uint64(t.w.DType), ptr(al),
		ptr(dt), ptr(nw), ptr(cnt), i32(s.KHeads), i32(s.VHeads), i32(s.DK), i32(s.DV), f32(eps), ptr(b.l2Hint),
		uint64(b.l2Bytes))
	return true
}

var _ kernels.L2Hinter = (*Backend)(nil)

// HintL2 implements kernels.L2Hinter when POCKET_L2_HINT=1 (not yet
// measured; off by default): the next attn_decode or delta_step launch
// asks L2 for t's weight bytes after its PDL wait.
func (b *Backend) HintL2(t kernels.Tensor) {
	if !switches.l2Hint {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.l2Hint, b.l2Bytes = 0, 0
	tt, ok := t.(*tensor)
	if !ok || tt == nil || len(tt.w.Shape) != 2 {
		return
	}
	rb, err := tt.w.DType.RowBytes(tt.w.Cols())
	if err != nil {
		return
	}
	b.l2Hint, b.l2Bytes = tt.data, int64(rb)*int64(tt.w.Rows())
}
