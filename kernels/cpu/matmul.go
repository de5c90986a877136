package cpu

import "github.com/pocketllm/pocketllm/kernels"

// MatMul implements kernels.Backend. Decode (one row) streams each weight
// row once straight from the mapped bytes; prefill decodes a weight row to
// float32 once and reuses it for every input row, so the weight bytes are
// read once per call either way. Every path accumulates a row's dot product
// in the same order, so results are independent of the batch size (a
// prompt prefilled at once or in pieces gives bit-identical KV). FP8 rows
// take the decode-to-float32 path even for one row for that reason; GGUF
// block formats use their fused dot product for decode, which is faster
// but not bit-identical to their prefill path.
func (b *Backend) MatMul(dst, x kernels.Buf, w kernels.Tensor, rows int) {
	t := w.(*tensor)
	out, in := t.w.Rows(), t.w.Cols()
	d, xs := f32(dst), f32(x)
	if rows == 1 && t.w.DType != kernels.F8E4M3 {
		xv := xs[:in]
		b.parallel(out, 64, func(lo, hi int) { t.dots(lo, hi, xv, d[lo:hi]) })
		return
	}
	if rows == 1 && t.fp8Fused() {
		// A decode step's FP8 rows dotted as they widen, with the bits of
		// the decode-then-dotF32 below (which a prompt's rows share).
		xv := xs[:in]
		b.parallel(out, 64, func(lo, hi int) {
			for o := lo; o < hi; o++ {
				d[o] = t.fp8RowDot(o, xv)
			}
		})
		return
	}
	if b.matMulChunked(d, xs, t, rows, out, in) {
		return
	}
	// Weight rows are decoded a block at a time and each pair of input
	// rows is dotted with all of them before the next pair: the pair is
	// read from L2 once per block of weight rows instead of once per
	// row. Every dot is still dotF32's bit for bit (dot2x2 over pairs of
	// weight rows, dot2, dotF32), so a row's results do not depend on the
	// pass.
	block := prefillBlock(in)
	b.parallel(out, block, func(lo, hi int) {
		tmp := make([]float32, block*in)
		var acc [2]float32
		var acc4 [4]float32
		for o0 := lo; o0 < hi; o0 += block {
			n := min(block, hi-o0)
			for k := range n {
				t.rowTo(o0+k, tmp[k*in:(k+1)*in])
			}
			r := 0
			for ; r+2 <= rows; r += 2 {
				x0, x1 := xs[r*in:(r+1)*in], xs[(r+1)*in:(r+2)*in]
				k := 0
				for ; k+2 <= n; k += 2 { // 2×2 tiles (dot2x2), then a last row (dot2)
					dot2x2(tmp[k*in:(k+1)*in], tmp[(k+1)*in:(k+2)*in], x0, x1, &acc4)
					d[r*out+o0+k], d[(r+1)*out+o0+k] = acc4[0], acc4[1]
					d[r*out+o0+k+1], d[(r+1)*out+o0+k+1] = acc4[2], acc4[3]
				}
				for ; k < n; k++ {
					dot2(tmp[k*in:(k+1)*in], x0, x1, &acc)
					d[r*out+o0+k], d[(r+1)*out+o0+k] = acc[0], acc[1]
				}
			}
			for ; r < rows; r++ {
				for k := range n {
					d[r*out+o0+k] = dotF32(tmp[k*in:(k+1)*in], xs[r*in:(r+1)*in])
				}
			}
		}
	})
}

// prefillRows is how many decoded weight rows a prefill GEMM holds at
// once where they fit in 32 KB of L1; longer rows are held 4 at a time
// (prefillBlock). One core, bf16, 1024-float rows: 136 → 161 GFLOP/s for
// 512 input rows against 4 rows; at 2048 floats 8 rows lose (137 → 111).
const prefillRows = 8

// prefillBlock is how many decoded weight rows of in floats the plain
// prefill GEMM holds at once.
func prefillBlock(in int) int {
	if in*4*prefillRows <= 32<<10 {
		return prefillRows
	}
	return 4
}

// The prefill GEMM for long weight rows (gemm_amd64.go). Where a block
// of decoded weight rows no longer fits L1 beside a pair of input rows,
// every 2×2 tile reloaded its weight rows from L2 for each pair of input
// rows. There the reduction runs in chunks of gemmChunk floats: a chunk
// of gemmGroup weight rows (32 KB) stays in L1 while every pair of input
// rows passes it, each tile's sixteen accumulators kept in memory between
// chunks. A lane's products are added in the same order as in one pass
// and the sums reduced as dot2x2F32x512 reduces them, so every result
// keeps dotF32's bits. One core, bf16, 128 rows: 4096-float rows 85 →
// 131 GFLOP/s, 3072 104 → 131, 8192 82 → 131; at 2048 the plain blocks
// are faster (138 against 130), hence gemmMinIn.
var (
	gemmGroup = 8    // weight rows decoded at once (even)
	gemmChunk = 1024 // floats of a row a chunk (a multiple of 64)
	gemmMinIn = 2048 // rows up to this many floats take the plain blocks
)
