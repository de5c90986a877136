//go:build !amd64

package vmath

import "math"

// haveAVX512 is amd64's switch of the wide loops (its tests turn it off
// and on); never set here.
var haveAVX512 = false

// ExpShifted replaces each score s by e^(s - shift) and returns their sum.
func ExpShifted(scores []float32, shift float32) float32 { return expShiftedGo(scores, shift) }

// SigmoidMul multiplies each d[i] by sigmoid(x[i]); d may be x.
func SigmoidMul(d, x []float32) { sigmoidMulGo(d, x) }

// MulAdd adds a[i]·b[i] to each d[i], the product rounded before the sum.
func MulAdd(d, a, b []float32) { mulAddGo(d, a, b) }

// Max is the largest of x (-Inf for none).
func Max(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// Scale multiplies each x[i] by s.
func Scale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}
