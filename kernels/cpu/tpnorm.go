package cpu

import (
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

var _ kernels.TPNormOps = (*Backend)(nil)

// SumSquares implements kernels.TPNormOps, accumulating in float64 as
// RMSNorm does.
func (b *Backend) SumSquares(dst kernels.Buf, off int, x kernels.Buf, rows, dim int) {
	d, s := f32(dst), f32(x)
	for r := 0; r < rows; r++ {
		var ss float64
		for _, v := range s[r*dim : (r+1)*dim] {
			ss += float64(v) * float64(v)
		}
		d[off+r] = float32(ss)
	}
}

// RMSNormSum implements kernels.TPNormOps.
func (b *Backend) RMSNormSum(dst, x, sumsq kernels.Buf, off int, w kernels.Tensor, rows, dim int, scale, eps float32) {
	sc := w.(*tensor).vector()
	d, s, ss := f32(dst), f32(x), f32(sumsq)
	for r := 0; r < rows; r++ {
		inv := float32(1 / math.Sqrt(float64(ss[off+r])*float64(scale)+float64(eps)))
		out := d[r*dim : (r+1)*dim]
		for i, v := range s[r*dim : (r+1)*dim] {
			out[i] = v * inv * sc[i]
		}
	}
}
