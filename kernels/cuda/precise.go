//go:build cuda

package cuda

import "github.com/pocketllm/pocketllm/kernels"

var _ kernels.PreciseMatMul = (*Backend)(nil)

// MatMulPrecise implements kernels.PreciseMatMul. Only MatMul's cuBLASLt
// path rounds the activations (to bf16, for the bf16 tensor-core GEMM);
// here those shapes go to the built-in GEMM kernels instead, which read
// fp32 activations and multiply at tf32, as MatMul does with
// POCKET_CUBLASLT=0. Everything else is MatMul's own path, already at
// least tf32: the GEMVs of up to 8 rows are fp32, and FP8/f16/f32 weights
// never reach cuBLASLt. Block-quantised (GGUF) weights also take MatMul's
// path, whose prefill GEMM over quantGEMVRows rows uses bf16 activations:
// no model with a hard selection loads those yet.
func (b *Backend) MatMulPrecise(dst, x kernels.Buf, w kernels.Tensor, rows int) {
	t := w.(*tensor)
	if rows <= 8 || isQuant(t.w.DType) {
		b.MatMul(dst, x, w, rows)
		return
	}
	if !b.enterKeep() {
		b.exit()
		return
	}
	defer b.exit()
	b.flush()
	out, in := t.w.Rows(), t.w.Cols()
	f := fGemmGeneric
	switch {
	case t.w.DType == kernels.BF16 && in%8 == 0:
		f = fGemmBF16
	case t.w.DType == kernels.F8E4M3 && in%16 == 0 && t.w.ScaleBlock[1]%16 == 0:
		f = fGemmFP8
	}
	y := dptr(dst)
	b.run(f, cdiv(out, 64), cdiv(rows, 64), 128, cat([]uint64{ptr(y), ptr(dptr(x))}, t.wargs(), []uint64{i32(rows), i32(out), i32(in)})...)
	// dst may be the source of the cached bf16 GEMM input: it is stale now.
	if y == b.lt.bfSrc {
		b.lt.bfSrc = 0
	}
}
