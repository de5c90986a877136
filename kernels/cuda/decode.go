//go:build cuda

package cuda

//go:generate nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o decode.ptx decode.cu

import (
	_ "embed"
	"fmt"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The fused decode kernels (decode.cu) implement kernels.FusedOps for one
// activation row and bf16 weights; other shapes and formats are declined
// and run unfused. They are launched with programmatic dependent launch
// unless POCKET_PDL=0, and declined altogether with POCKET_FUSED=0 (the
// A/B switches of switches.go).

//go:embed decode.ptx
var decodePTX string

const (
	dGemvNormMulti = iota
	dGemvAdd
	dGemvNormSwiGLU
	dRopeStore
	dGemvR4
	numDecodeFuncs
)

var decodeNames = [numDecodeFuncs]string{"gemv_norm_multi", "gemv_add", "gemv_norm_swiglu", "rope_store", "gemv_r4"}

var _ kernels.FusedOps = (*Backend)(nil)

// loadDecode loads the module (at backend creation: it is small, and every
// model uses it).
func (b *Backend) loadDecode() error {
	mod, err := cu.LoadData(decodePTX)
	if err != nil {
		return fmt.Errorf("cuda: load decode PTX: %w", err)
	}
	for i, name := range decodeNames {
		f, err := mod.Function(name)
		if err != nil {
			return fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		b.dec[i] = cfunc(f)
	}
	return nil
}

// runDec launches a decode.cu kernel, with PDL unless switched off.
func (b *Backend) runDec(f, gx, gy, bx int, args ...uint64) {
	if b.err != nil || gx == 0 || gy == 0 {
		return
	}
	b.a(args...)
	if switches.noPDL {
		b.fail(launch(b.dec[f], gx, gy, bx, b.s, &b.args, b.nargs))
		return
	}
	b.fail(launchPDL(b.dec[f], gx, gy, bx, b.s, &b.args, b.nargs))
}

// groupRows is R of decode.cu: the weight rows one warp streams at once.
const groupRows = 4

// groupWarps picks how many warps share a group's columns: the fewest that
// give two blocks (of 8 warps) per SM, while every lane keeps at least four
// 16-byte chunks per row.
func (b *Backend) groupWarps(groups, chunks int) int {
	wpr := 1
	for wpr < 8 && cdiv(groups, 8/wpr) < 2*b.sms && chunks >= 4*32*wpr*2 {
		wpr *= 2
	}
	return wpr
}

// gemvable reports whether w is a bf16 matrix the fused GEMVs read: in
// elements per row, a multiple of 8.
func gemvable(w kernels.Tensor, in int) bool {
	t, ok := w.(*tensor)
	return ok && t.w.DType == kernels.BF16 && len(t.w.Shape) == 2 && t.w.Cols() == in && in%8 == 0 && t.data != 0
}

// normVec is the float32 device copy of a norm weight of n elements, or 0.
func normVec(w kernels.Tensor, n int) cu.DevicePtr {
	t, ok := w.(*tensor)
	if !ok || t.vec == 0 || len(t.w.Shape) != 1 || t.w.Shape[0] != n {
		return 0
	}
	return t.vec
}

// NormMatMul implements kernels.FusedOps.
func (b *Backend) NormMatMul(dst []kernels.Buf, x kernels.Buf, norm kernels.Tensor, eps float32, ws []kernels.Tensor, rows int) bool {
	if !switches.fused["qkv"] || rows != 1 || len(ws) == 0 || len(ws) > 4 || len(dst) != len(ws) {
		return false
	}
	in := ws[0].Weight().Cols()
	nv := normVec(norm, in)
	if nv == 0 || x.Len() < in {
		return false
	}
	total := 0
	for i, w := range ws {
		if !gemvable(w, in) || dst[i].Len() < w.Weight().Rows() {
			return false
		}
		total += w.Weight().Rows()
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	wpr := b.groupWarps(cdiv(total, groupRows), in/8)
	per := groupRows * 8 / wpr // rows per block
	args := []uint64{ptr(dptr(x)), ptr(nv), f32(eps), i32(in), i32(wpr)}
	blocks := 0
	for i := range 4 {
		j := min(i, len(ws)-1)
		t := ws[j].(*tensor)
		out := t.w.Rows()
		if i >= len(ws) {
			out = 0
		}
		blocks += cdiv(out, per)
		args = append(args, ptr(dptr(dst[j])), ptr(t.data), i32(out))
		if i < 3 {
			args = append(args, i32(blocks))
		}
	}
	b.runDec(dGemvNormMulti, blocks, 1, 256, args...)
	return true
}

// NormSwiGLU implements kernels.FusedOps.
func (b *Backend) NormSwiGLU(act, x kernels.Buf, norm kernels.Tensor, eps float32, gate, up kernels.Tensor, rows int) bool {
	if !switches.fused["mlp"] || rows != 1 {
		return false
	}
	in := gate.Weight().Cols()
	nv := normVec(norm, in)
	if nv == 0 || x.Len() < in || !gemvable(gate, in) || !gemvable(up, in) {
		return false
	}
	out := gate.(*tensor).w.Rows()
	if up.(*tensor).w.Rows() != out || act.Len() < out {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	// A group is two gate and two up rows: two outputs.
	wpr := b.groupWarps(cdiv(out, 2), in/8)
	b.runDec(dGemvNormSwiGLU, cdiv(out, 2*8/wpr), 1, 256, ptr(dptr(act)), ptr(dptr(x)), ptr(nv), f32(eps),
		ptr(gate.(*tensor).data), ptr(up.(*tensor).data), i32(out), i32(in), i32(wpr))
	return true
}

// MatMulAdd implements kernels.FusedOps.
func (b *Backend) MatMulAdd(acc, x kernels.Buf, w kernels.Tensor, rows int) bool {
	if !switches.fused["add"] || rows != 1 {
		return false
	}
	in := w.Weight().Cols()
	if x.Len() < in || !gemvable(w, in) || acc.Len() < w.(*tensor).w.Rows() || dptr(acc) == dptr(x) {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	out := w.(*tensor).w.Rows()
	wpr := b.groupWarps(cdiv(out, groupRows), in/8)
	b.runDec(dGemvAdd, cdiv(out, groupRows*8/wpr), 1, 256, ptr(dptr(acc)), ptr(dptr(x)), ptr(w.(*tensor).data), i32(out), i32(in), i32(wpr))
	return true
}

// RoPEStoreKV implements kernels.FusedOps.
func (b *Backend) RoPEStoreKV(q, k, v kernels.Buf, qNorm, kNorm kernels.Tensor, eps float32, kp kernels.KVPool, layer int,
	pos, slots []int32, heads, kvHeads, headDim int, r *kernels.RoPE) bool {
	p, ok := kp.(*kvPool)
	if !switches.fused["rope"] || !ok || len(pos) == 0 || len(pos) != len(slots) || headDim > 256 || r.RotaryDim > headDim ||
		r.RotaryDim%2 != 0 || p.spec.KVHeads != kvHeads || p.spec.HeadDimK != headDim || p.spec.HeadDimV != headDim ||
		layer < 0 || layer >= p.spec.Layers {
		return false
	}
	var nq, nk cu.DevicePtr
	if qNorm != nil || kNorm != nil {
		if nq, nk = normVec(qNorm, headDim), normVec(kNorm, headDim); nq == 0 || nk == 0 {
			return false
		}
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	fp := b.ropeFreq(r)
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	neox := 0
	if r.NeoX {
		neox = 1
	}
	pp := b.put(kPos, words(pos))
	sp := b.put(kSlots, words(slots))
	b.runDec(dRopeStore, heads+kvHeads, len(pos), 128, ptr(dptr(q)), ptr(dptr(k)), ptr(dptr(v)), ptr(nq), ptr(nk), f32(eps),
		ptr(p.kLayer(layer)), ptr(p.vLayer(layer)), ptr(pp), ptr(sp), ptr(fp), i32(heads), i32(kvHeads), i32(headDim),
		i32(r.RotaryDim/2), i32(neox), f32(scale))
	return true
}

// gemvR4 launches y = w·x for one row of a bf16 weight on gemv_r4 (the
// grouped GEMV of decode.cu) and reports whether it did: the deferred
// single GEMVs of MatMul use it when the fused kernels are on.
func (b *Backend) gemvR4(y, x, w uint64, out, in int) bool {
	if !switches.fused["add"] {
		return false
	}
	wpr := b.groupWarps(cdiv(out, groupRows), in/8)
	b.runDec(dGemvR4, cdiv(out, groupRows*8/wpr), 1, 256, y, x, w, i32(out), i32(in), i32(wpr))
	return true
}
