//go:build amd64

package cpu

import "golang.org/x/sys/cpu"

// The decode GEMV is bound by how fast weight bytes stream through the
// cores; scalar Go converts and multiplies one element at a time, so the
// two hot dot products have AVX2+FMA versions (32 elements per step, four
// accumulators). Other CPUs use the portable loops.
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotBF16AVX2(w *uint16, x *float32, n int) float32

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

func dotBF16(w []uint16, x []float32) float32 {
	n := len(w) &^ 31
	if !haveAVX2 || n == 0 {
		return dotBF16Go(w, x)
	}
	x = x[:len(w)]
	s := dotBF16AVX2(&w[0], &x[0], n)
	if n < len(w) {
		s += dotBF16Go(w[n:], x[n:])
	}
	return s
}

func dotF32(a, b []float32) float32 {
	n := len(a) &^ 31
	if !haveAVX2 || n == 0 {
		return dotF32Go(a, b)
	}
	b = b[:len(a)]
	s := dotF32AVX2(&a[0], &b[0], n)
	if n < len(a) {
		s += dotF32Go(a[n:], b[n:])
	}
	return s
}
