//go:build amd64

package cpu

//go:noescape
func dot2x2AccF32x512(w0, w1, x0, x1 *float32, n int, acc *[16][16]float32)

//go:noescape
func dot2x2SumF32x512(acc *[16][16]float32, out *[4]float32)

// matMulChunked is MatMul's prefill path for long rows; false where it
// does not apply (no AVX-512, rows not whole 64-float steps, short rows).
func (b *Backend) matMulChunked(d, xs []float32, t *tensor, rows, out, in int) bool {
	if !haveAVX512 || in%64 != 0 || in <= gemmMinIn || rows < 2 {
		return false
	}
	group, chunk := gemmGroup, gemmChunk
	pairs := rows / 2
	b.parallel(out, group, func(lo, hi int) {
		tmp := make([]float32, group*in)
		accs := make([][16][16]float32, pairs*(group/2))
		var four [4]float32
		var two [2]float32
		for o0 := lo; o0 < hi; o0 += group {
			n := min(group, hi-o0)
			for k := range n {
				t.rowTo(o0+k, tmp[k*in:(k+1)*in])
			}
			wp := n / 2 // pairs of weight rows
			tiles := accs[:pairs*wp]
			clear(tiles)
			for c0 := 0; c0 < in; c0 += chunk {
				m := min(chunk, in-c0)
				for p := range pairs {
					x0, x1 := xs[2*p*in+c0:], xs[(2*p+1)*in+c0:]
					for k := range wp {
						dot2x2AccF32x512(&tmp[2*k*in+c0], &tmp[(2*k+1)*in+c0], &x0[0], &x1[0], m, &tiles[p*wp+k])
					}
				}
			}
			for p := range pairs {
				r := 2 * p
				for k := range wp {
					dot2x2SumF32x512(&tiles[p*wp+k], &four)
					o := o0 + 2*k
					d[r*out+o], d[(r+1)*out+o] = four[0], four[1]
					d[r*out+o+1], d[(r+1)*out+o+1] = four[2], four[3]
				}
				if n%2 == 1 { // a last weight row
					k := n - 1
					dot2(tmp[k*in:(k+1)*in], xs[r*in:(r+1)*in], xs[(r+1)*in:(r+2)*in], &two)
					d[r*out+o0+k], d[(r+1)*out+o0+k] = two[0], two[1]
				}
			}
			if rows%2 == 1 { // a last input row
				r := rows - 1
				for k := range n {
					d[r*out+o0+k] = dotF32(tmp[k*in:(k+1)*in], xs[r*in:(r+1)*in])
				}
			}
		}
	})
	return true
}
