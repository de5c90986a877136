//go:build amd64

package quant

import "golang.org/x/sys/cpu"

// The CPU decode GEMV of a GGUF model is these row dot products, and the
// scalar Go ones decode a weight at a time: a Qwen3-0.6B-shaped Q4_K_M ran
// at 6 tok/s on two cores, 5% of what its bytes allow. The K-quants that
// Q4_K_M and Q5_K_M consist of (Q4_K or Q5_K, and Q6_K for the LM head and
// some down projections), Q8_0 and the non-linear IQ4_NL/IQ4_XS get AVX2+FMA loops (kdot_amd64.s) that unpack each block's
// scales themselves into the same float32 products the scalar decoders
// form (d·s and dmin·m for Q4_K/Q5_K, d·scale for Q6_K, d for Q8_0 and
// IQ4_NL, d·(scale−32) for IQ4_XS, the IQ4 values by a byte shuffle; d by F16C,
// exact), so
// every weight is formed exactly as they form it, eight at a time, and
// only the order of the sums differs. (Unpacking the scales in Go first
// cost as much as the dot products.)
var haveKDot = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

//go:noescape
func q4kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q6kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q80DotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q5kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq4nlDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq4xsDotAVX2(row *byte, x *float32, nb int) float32

// dotQ4KFast is dotQ4K on AVX2, false where there is none.
func dotQ4KFast(row []byte, x []float32) (float32, bool) {
	if !haveKDot || len(row) < 144 {
		return 0, false
	}
	return q4kDotAVX2(&row[0], &x[0], len(row)/144), true
}

// dotQ6KFast is dotQ6K on AVX2, false where there is none.
func dotQ6KFast(row []byte, x []float32) (float32, bool) {
	if !haveKDot || len(row) < 210 {
		return 0, false
	}
	return q6kDotAVX2(&row[0], &x[0], len(row)/210), true
}

// dotQ8_0Fast is dotQ8_0 on AVX2, false where there is none.
func dotQ8_0Fast(row []byte, x []float32) (float32, bool) {
	if !haveKDot || len(row) < 34 {
		return 0, false
	}
	return q80DotAVX2(&row[0], &x[0], len(row)/34), true
}

// dotQ5KFast is dotQ5K on AVX2, false where there is none.
func dotQ5KFast(row []byte, x []float32) (float32, bool) {
	if !haveKDot || len(row) < 176 {
		return 0, false
	}
	return q5kDotAVX2(&row[0], &x[0], len(row)/176), true
}

// dotIQ4NLFast is dotIQ4NL on AVX2, false where there is none.
func dotIQ4NLFast(row []byte, x []float32) (float32, bool) {
	if !haveKDot || len(row) < 18 {
		return 0, false
	}
	return iq4nlDotAVX2(&row[0], &x[0], len(row)/18), true
}

// dotIQ4XSFast is dotIQ4XS on AVX2, false where there is none.
func dotIQ4XSFast(row []byte, x []float32) (float32, bool) {
	if !haveKDot || len(row) < 136 {
		return 0, false
	}
	return iq4xsDotAVX2(&row[0], &x[0], len(row)/136), true
}
