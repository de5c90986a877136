//go:build cuda

package cuda

import "github.com/pocketllm/pocketllm/kernels"

// The gated norm of a Gated DeltaNet decode step folded into its FP8
// out_proj (kernels.FusedGatedNormAdd; fp8pipe.cuh's f8pipe_gadd_S, whose
// staging of the input applies RMSNormGated, fp8mma.cu's xPrologueGated).
// Off unless POCKET_GNORM_FOLD=1 until measured.
//
// Why: probes on an H200 priced a short kernel's cost in the captured
// decode step at its own chain of dependent loads, reductions and stores
// after its PDL wait, not at its launch (docs/benchmarks.md, session of
// 2026-11-30 from 10:59); rms_norm_gated is such a chain, 48 times a
// Qwen3.5-27B step, and the out_proj loads its input anyway.

var _ kernels.FusedGatedNormAdd = (*Backend)(nil)

// gnormGroup is the group f8pipe_gadd normalises over: a warp's 32
// float4s of a staging pass (Qwen3.5 and Qwen3-Next: the value head dim).
const gnormGroup = 128

// GatedNormMatMulAdd implements kernels.FusedGatedNormAdd for FP8 weights
// on the ring kernels, groups of 128; it declines anything else, and
// while switched off (POCKET_GNORM_FOLD, SetGNormFold).
func (b *Backend) GatedNormMatMulAdd(acc, x, z kernels.Buf, norm kernels.Tensor, eps float32, group int,
	w kernels.Tensor) bool {
	if !b.gnormOn() || group != gnormGroup {
		return false
	}
	in := w.Weight().Cols()
	t, isT := w.(*tensor)
	nv := normVec(norm, group)
	if !isT || nv == 0 || in%gnormGroup != 0 || x.Len() < in || z.Len() < in || acc.Len() < t.w.Rows() ||
		dptr(acc) == dptr(x) || dptr(acc) == dptr(z) {
		return false
	}
	f, ok := formOf(in, t)
	if !ok || !f.fp8 {
		return false
	}
	if _, ok := b.f8mmaVariant(f8Add, f, t); !ok {
		return false // the pipe kernels live in the fp8mma module and take its formats
	}
	out := t.w.Rows()
	tiles := cdiv(out, 16)
	g, fn, ok := b.pipePlan(p8GAdd, f, tiles)
	if !ok {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	b.runPipe(p8GAdd, fn, g, g.blocks([]int{tiles}), ptr(dptr(acc)), ptr(dptr(x)), ptr(t.data), ptr(t.scale), i32(out),
		i32(f.in), i32(g.wpr), i32(f.b0), i32(f.nsc), ptr(dptr(z)), ptr(nv), f32(eps))
	return true
}

// gnormOn reports whether GatedNormMatMulAdd runs (b.mu not held).
func (b *Backend) gnormOn() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hybridState().gnormFold
}

// SetGNormFold turns GatedNormMatMulAdd on or off for this backend
// whatever POCKET_GNORM_FOLD says (conformance checks it); it returns the
// previous setting.
func (b *Backend) SetGNormFold(on bool) (was bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.hybridState()
	was, m.gnormFold = m.gnormFold, on
	return was
}

// FP8PipeOn reports whether the ring-streamed FP8 GEMVs (fp8pipe.cuh), on
// which GatedNormMatMulAdd rides, are switched on (conformance knows then
// which declines are expected).
func FP8PipeOn() bool { return !switches.noFP8Pipe && switches.fp8MMA != 0 }
