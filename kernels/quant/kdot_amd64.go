//go:build amd64

package quant

import (
	"golang.org/x/sys/cpu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The CPU decode GEMV of a GGUF model is these row dot products, and the
// scalar Go ones decode a weight at a time: a Qwen3-0.6B-shaped Q4_K_M ran
// at 6 tok/s on two cores, 5% of what its bytes allow. Every format but
// F16/BF16/F32 (kernels/cpu's own loops) gets an AVX2+FMA loop
// (kdot_amd64.s): Q2_K to Q6_K (the K-quant mixes), the legacy Q8_0, Q4_0,
// Q4_1, Q5_0 and Q5_1 (the mixes' fallback for rows not a multiple of
// 256), the non-linear IQ4_NL, IQ4_XS and MXFP4, and the IQ1–IQ3 lattices
// of the small "UD" quants (their expanded float grids and sign rows,
// indexed from general registers). Each loop unpacks a block's scales
// itself into the float32 products the scalar decoders form (d·s and
// dmin·m for Q2_K, Q4_K, Q5_K, d·scale for Q3_K and Q6_K, d for Q8_0, Q4_0,
// Q5_0 and IQ4_NL, d and m for Q4_1 and Q5_1, d·(scale−32) for IQ4_XS,
// MXFP4's power of two, the lattices' d·(0.5+s)·k and d·(2s+1); d by F16C,
// exactly), so every weight is the dequantized one bit for bit, eight at a
// time; only the order of the sums differs. (Unpacking the scales in Go
// first cost as much as the dot products.)
var haveKDot = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// haveKDot512: the Q4_K, Q5_K, Q6_K and Q8_0 loops in AVX-512
// (kdot512_amd64.s), and Q2_K, Q3_K, Q4_0, IQ4_NL and IQ4_XS's (kdot_amd64.s), the
// same weights sixteen at a time. A 4096-element row on a Zen 5 core: Q4_K
// 254 → 155 ns, Q5_K 370 → 208, Q6_K 325 → 178, Q3_K 423 → 228, Q8_0 244 →
// 225, Q4_0 270 → 237, IQ4_XS 246 → 163; a Qwen3-0.6B-shaped Q4_K_M decodes
// at 52–53 tok/s on two cores against 37–38 (docs/benchmarks.md). The
// Q6_K loop puts its quants together with byte-wide AVX-512BW ops, which
// every AVX-512 core since Skylake-SP has.
var haveKDot512 = haveKDot && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW

//go:noescape
func q4kDot512(row *byte, x *float32, nb int) float32

//go:noescape
func q6kDot512(row *byte, x *float32, nb int) float32

//go:noescape
func q5kDot512(row *byte, x *float32, nb int) float32

//go:noescape
func q80Dot512(row *byte, x *float32, nb int) float32

//go:noescape
func q40Dot512(row *byte, x *float32, nb int) float32

//go:noescape
func q3kDot512(row *byte, x *float32, nb int) float32

//go:noescape
func q2kDot512(row *byte, x *float32, nb int) float32

//go:noescape
func iq4nlDot512(row *byte, x *float32, nb int) float32

//go:noescape
func iq4xsDot512(row *byte, x *float32, nb int) float32

//go:noescape
func q2kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q3kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q4kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q5kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q6kDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q80DotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq4nlDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q40DotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq4xsDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q41DotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q50DotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func q51DotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func mxfp4DotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq2xxsDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq3xxsDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq2xsDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq2sDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq3sDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq1sDotAVX2(row *byte, x *float32, nb int) float32

//go:noescape
func iq1mDotAVX2(row *byte, x *float32, nb int) float32

// pick is the AVX-512 loop where the CPU has AVX-512, else the AVX2 one.
func pick(f512, f256 func(row *byte, x *float32, nb int) float32) func(row *byte, x *float32, nb int) float32 {
	if haveKDot512 {
		return f512
	}
	return f256
}

// rowLoop is an assembly row dot and the bytes of its format's block.
type rowLoop struct {
	f    func(row *byte, x *float32, nb int) float32
	size int
}

// rowLoops are the row dots by format as this CPU runs them (AVX-512 where
// it has it), none without AVX2: chosen once, for DotRow and DotRows.
var rowLoops = func() (l [64]rowLoop) {
	if !haveKDot {
		return l
	}
	for _, e := range []struct {
		t        kernels.DType
		f512, f2 func(row *byte, x *float32, nb int) float32
		size     int
	}{
		{kernels.Q2_K, q2kDot512, q2kDotAVX2, 84}, {kernels.Q3_K, q3kDot512, q3kDotAVX2, 110},
		{kernels.Q4_K, q4kDot512, q4kDotAVX2, 144}, {kernels.Q5_K, q5kDot512, q5kDotAVX2, 176},
		{kernels.Q6_K, q6kDot512, q6kDotAVX2, 210}, {kernels.Q8_0, q80Dot512, q80DotAVX2, 34},
		{kernels.IQ4_NL, iq4nlDot512, iq4nlDotAVX2, 18}, {kernels.Q4_0, q40Dot512, q40DotAVX2, 18},
		{kernels.IQ4_XS, iq4xsDot512, iq4xsDotAVX2, 136},
		{kernels.Q4_1, nil, q41DotAVX2, 20}, {kernels.Q5_0, nil, q50DotAVX2, 22}, {kernels.Q5_1, nil, q51DotAVX2, 24},
		{kernels.MXFP4, nil, mxfp4DotAVX2, 17}, {kernels.IQ2_XXS, nil, iq2xxsDotAVX2, 66},
		{kernels.IQ3_XXS, nil, iq3xxsDotAVX2, 98}, {kernels.IQ2_XS, nil, iq2xsDotAVX2, 74},
		{kernels.IQ2_S, nil, iq2sDotAVX2, 82}, {kernels.IQ3_S, nil, iq3sDotAVX2, 110},
		{kernels.IQ1_S, nil, iq1sDotAVX2, 50}, {kernels.IQ1_M, nil, iq1mDotAVX2, 56},
	} {
		f := e.f2
		if e.f512 != nil {
			f = pick(e.f512, e.f2)
		}
		l[e.t] = rowLoop{f, e.size}
	}
	return l
}()

// rowLoopOf is t's assembly row dot, or nil.
func rowLoopOf(t kernels.DType) rowLoop {
	if int(t) < len(rowLoops) {
		return rowLoops[t]
	}
	return rowLoop{}
}
