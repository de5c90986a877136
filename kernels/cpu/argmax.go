package cpu

import (
	"math"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

var _ kernels.ArgmaxOps = (*Backend)(nil)

// ArgmaxPair implements kernels.ArgmaxOps with vmath.Argmax's rule.
func (b *Backend) ArgmaxPair(dst, x kernels.Buf, n, offset, slot, slots int) {
	d, s := f32(dst)[:2*slots], f32(x)[:n]
	clear(d)
	i := vmath.Argmax(s)
	v := float32(math.NaN())
	if n > 0 {
		v = s[i]
	}
	d[2*slot], d[2*slot+1] = v, float32(offset+int(i))
}
