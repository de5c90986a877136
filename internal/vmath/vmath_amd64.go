//go:build amd64

package vmath

import (
	"math"

	"golang.org/x/sys/cpu"
)

// The vector loops: AVX-512 where the CPU has it (16 lanes), else AVX2 (8
// lanes), else the portable Go; the tests switch these off and on.
var (
	haveAVX2   = cpu.X86.HasAVX2
	haveAVX512 = haveAVX2 && cpu.X86.HasAVX512F
)

//go:noescape
func maxF32x512(x *float32, n int) float32

//go:noescape
func maxF32AVX2(x *float32, n int) float32

// Max is the largest of x (-Inf for none).
func Max(x []float32) float32 {
	m, n := float32(math.Inf(-1)), 0
	switch {
	case haveAVX512 && len(x) >= 16:
		n = len(x) &^ 15
		m = maxF32x512(&x[0], n)
	case haveAVX2 && len(x) >= 8:
		n = len(x) &^ 7
		m = maxF32AVX2(&x[0], n)
	}
	for _, v := range x[n:] {
		m = max(m, v)
	}
	return m
}

//go:noescape
func scaleF32x512(x *float32, n int, s float32)

//go:noescape
func scaleF32AVX2(x *float32, n int, s float32)

// Scale multiplies each x[i] by s.
func Scale(x []float32, s float32) {
	n := 0
	switch {
	case haveAVX512 && len(x) >= 16:
		n = len(x) &^ 15
		scaleF32x512(&x[0], n, s)
	case haveAVX2 && len(x) >= 8:
		n = len(x) &^ 7
		scaleF32AVX2(&x[0], n, s)
	}
	for i := range x[n:] {
		x[n+i] *= s
	}
}

//go:noescape
func mulAddF32x512(d, a, b *float32, n int)

//go:noescape
func mulAddF32AVX2(d, a, b *float32, n int)

// MulAdd adds a[i]·b[i] to each d[i], the product rounded before the sum
// (the portable loop's bits).
func MulAdd(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	n := 0
	switch {
	case haveAVX512 && len(d) >= 16:
		n = len(d) &^ 15
		mulAddF32x512(&d[0], &a[0], &b[0], n)
	case haveAVX2 && len(d) >= 8:
		n = len(d) &^ 7
		mulAddF32AVX2(&d[0], &a[0], &b[0], n)
	}
	mulAddGo(d[n:], a[n:], b[n:])
}

//go:noescape
func sigmoidMulx512(d, x *float32, n int)

//go:noescape
func sigmoidMulAVX2(d, x *float32, n int)

// SigmoidMul multiplies each d[i] by sigmoid(x[i]) (vmath.go); d may be x,
// which makes it SiLU in place. Every form gives the same bits.
func SigmoidMul(d, x []float32) {
	x = x[:len(d)]
	n := 0
	switch {
	case haveAVX512 && len(d) >= 16:
		n = len(d) &^ 15
		sigmoidMulx512(&d[0], &x[0], n)
	case haveAVX2 && len(d) >= 8:
		n = len(d) &^ 7
		sigmoidMulAVX2(&d[0], &x[0], n)
	}
	sigmoidMulGo(d[n:], x[n:])
}

//go:noescape
func expShiftedx512(s *float32, n int, maxS float32, lanes *[16]float32)

//go:noescape
func expShiftedAVX2(s *float32, n int, maxS float32, lanes *[16]float32)

// ExpShifted replaces each score s by e^(s - maxS) (vmath.go) and returns
// their sum: the softmax weights of every attention here, unnormalised.
// Whole 16-score steps run in the vector loops, the rest in Go; every
// form gives the same bits.
func ExpShifted(scores []float32, maxS float32) float32 {
	var lanes [16]float32
	n := len(scores) &^ 15
	switch {
	case n == 0:
	case haveAVX512:
		expShiftedx512(&scores[0], n, maxS, &lanes)
	case haveAVX2:
		expShiftedAVX2(&scores[0], n, maxS, &lanes)
	default:
		n = 0
	}
	expShiftedFrom(scores, n, maxS, &lanes)
	return sumLanes16(&lanes)
}
