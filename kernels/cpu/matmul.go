package cpu

import "github.com/pocketllm/pocketllm/kernels"

// MatMul implements kernels.Backend. Decode (one row) streams each weight
// row once straight from the mapped bytes; prefill decodes a weight row to
// float32 once and reuses it for every input row, so the weight bytes are
// read once per call either way.
func (b *Backend) MatMul(dst, x kernels.Buf, w kernels.Tensor, rows int) {
	t := w.(*tensor)
	out, in := t.w.Rows(), t.w.Cols()
	d, xs := f32(dst), f32(x)
	if rows == 1 {
		xv := xs[:in]
		b.parallel(out, 64, func(lo, hi int) {
			for o := lo; o < hi; o++ {
				d[o] = t.dot(o, xv)
			}
		})
		return
	}
	b.parallel(out, 4, func(lo, hi int) {
		tmp := make([]float32, in)
		for o := lo; o < hi; o++ {
			t.rowTo(o, tmp)
			for r := 0; r < rows; r++ {
				d[r*out+o] = dotF32(tmp, xs[r*in:(r+1)*in])
			}
		}
	})
}
