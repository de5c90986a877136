//go:build cuda

package cuda

import "math/bits"

// fp8Stream launches y = W·x (k = f8R) or y += W·x (f8Add) on gemv_fp8s
// (decode.cu): FP8 rows streamed as the bf16 GEMVs stream theirs. It
// reports false, launching nothing, for other kinds and for scale blocks
// whose width in 16-byte chunks is not a power of two.
func (b *Backend) fp8Stream(k int, y, x uint64, t *tensor, f gform) bool {
	if k != f8R && k != f8Add || !f.fp8 || f.b1%16 != 0 || bits.OnesCount(uint(f.b1/16)) != 1 {
		return false
	}
	out, chunks := t.w.Rows(), f.in/16
	// A row to wpr warps: enough that a lane has two to four rounds of
	// four chunks, whatever the row's length (5120 columns: one warp;
	// 17408: four).
	wpr := 1
	for wpr < 8 && chunks >= 32*2*wpr*8 {
		wpr *= 2
	}
	kernel := dGemvFP8S
	if k == f8Add {
		kernel++
	}
	b.runDec(kernel, cdiv(out, 8/wpr), 1, 256, y, x, ptr(t.data), ptr(t.scale), i32(out), i32(f.in), i32(f.b0),
		i32(bits.TrailingZeros(uint(f.b1/16))), i32(f.nsc), i32(wpr))
	return true
}
