package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// fastDot is t's assembly row dot as the formats call it (kdot).
func fastDot(t kernels.DType) func([]byte, []float32) (float32, bool) {
	return func(row []byte, x []float32) (float32, bool) { return kdot(t, row, x) }
}

// TestKDotFast checks the AVX2 K-quant dot products against the
// dequantized rows (float64 sums) and the scalar loops, over several block
// counts.
func TestKDotFast(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		typ  kernels.DType
		fast func([]byte, []float32) (float32, bool)
		slow func([]byte, []float32) float32
	}{
		{kernels.Q2_K, fastDot(kernels.Q2_K), dotQ2K},
		{kernels.Q3_K, fastDot(kernels.Q3_K), blockDot(decodeQ3K, 256, 110)},
		{kernels.Q4_K, fastDot(kernels.Q4_K), dotQ4K},
		{kernels.Q6_K, fastDot(kernels.Q6_K), dotQ6K},
		{kernels.Q5_K, fastDot(kernels.Q5_K), dotQ5K},
		{kernels.IQ4_NL, fastDot(kernels.IQ4_NL), dotIQ4NL},
		{kernels.IQ4_XS, fastDot(kernels.IQ4_XS), dotIQ4XS},
		{kernels.Q4_0, fastDot(kernels.Q4_0), dotQ4_0},
		{kernels.Q8_0, fastDot(kernels.Q8_0), dotQ8_0},
		{kernels.Q4_1, fastDot(kernels.Q4_1), blockDot(decodeQ4_1, 32, 20)},
		{kernels.Q5_0, fastDot(kernels.Q5_0), blockDot(decodeQ5_0, 32, 22)},
		{kernels.Q5_1, fastDot(kernels.Q5_1), blockDot(decodeQ5_1, 32, 24)},
		{kernels.MXFP4, fastDot(kernels.MXFP4), blockDot(decodeMXFP4, 32, 17)},
		{kernels.IQ2_XXS, fastDot(kernels.IQ2_XXS), dotIQ2XXS},
		{kernels.IQ3_XXS, fastDot(kernels.IQ3_XXS), blockDot(decodeIQ3XXS, 256, 98)},
		{kernels.IQ2_XS, fastDot(kernels.IQ2_XS), blockDot(decodeIQ2XS, 256, 74)},
		{kernels.IQ2_S, fastDot(kernels.IQ2_S), blockDot(decodeIQ2S, 256, 82)},
		{kernels.IQ3_S, fastDot(kernels.IQ3_S), blockDot(decodeIQ3S, 256, 110)},
		{kernels.IQ1_S, fastDot(kernels.IQ1_S), blockDot(decodeIQ1S, 256, 50)},
		{kernels.IQ1_M, fastDot(kernels.IQ1_M), blockDot(decodeIQ1M, 256, 56)},
	} {
		for _, blocks := range []int{1, 2, 3, 16, 31, 48, 71} {
			n := blocks * 256 // whole blocks of the 32-element formats too
			for iter := 0; iter < 5; iter++ {
				row := randomRow(r, c.typ, n)
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				fast, ok := c.fast(row, x)
				if !ok {
					t.Skip("no AVX2+FMA on this machine")
				}
				slow := c.slow(row, x)
				w := make([]float32, n)
				if err := DequantizeRow(c.typ, row, w); err != nil {
					t.Fatal(err)
				}
				var ref, mag float64
				for i := range w {
					ref += float64(w[i]) * float64(x[i])
					mag += math.Abs(float64(w[i]) * float64(x[i]))
				}
				for name, got := range map[string]float32{"fast": fast, "scalar": slow} {
					if d := math.Abs(float64(got) - ref); d > 1e-5*mag+1e-30 {
						t.Fatalf("%s %d blocks: %s %v, reference %v (diff %.3g of magnitude %.3g)", c.typ, blocks, name, got, ref, d, mag)
					}
				}
			}
		}
	}
}

// TestKDotWeightsExact checks that the AVX2 loops of the 32-weight formats
// and of the IQ1, IQ2 and IQ3 lattices
// form every weight exactly as the dequantizer does: dotted with a
// one-hot x, a row gives that weight back exactly (one product, the rest
// adds of zeros; a −0 weight comes back +0). MXFP4's scale bytes cover
// its subnormal cases.
func TestKDotWeightsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		typ  kernels.DType
		fast func([]byte, []float32) (float32, bool)
	}{
		{kernels.Q4_0, fastDot(kernels.Q4_0)}, {kernels.Q4_1, fastDot(kernels.Q4_1)}, {kernels.Q5_0, fastDot(kernels.Q5_0)},
		{kernels.Q5_1, fastDot(kernels.Q5_1)}, {kernels.Q8_0, fastDot(kernels.Q8_0)}, {kernels.IQ4_NL, fastDot(kernels.IQ4_NL)},
		{kernels.MXFP4, fastDot(kernels.MXFP4)}, {kernels.IQ2_XXS, fastDot(kernels.IQ2_XXS)}, {kernels.IQ3_XXS, fastDot(kernels.IQ3_XXS)},
		{kernels.IQ2_XS, fastDot(kernels.IQ2_XS)}, {kernels.IQ2_S, fastDot(kernels.IQ2_S)}, {kernels.IQ3_S, fastDot(kernels.IQ3_S)},
		{kernels.IQ1_S, fastDot(kernels.IQ1_S)}, {kernels.IQ1_M, fastDot(kernels.IQ1_M)},
	} {
		for iter := 0; iter < 20; iter++ {
			const n = 512
			row := randomRow(r, c.typ, n)
			if c.typ == kernels.MXFP4 {
				row[0] = []byte{0, 1, 2, 127, 200}[iter%5]
			}
			w := make([]float32, n)
			if err := DequantizeRow(c.typ, row, w); err != nil {
				t.Fatal(err)
			}
			x := make([]float32, n)
			for i := range n {
				x[i] = 1
				got, ok := c.fast(row, x)
				if !ok {
					t.Skip("no AVX2+FMA on this machine")
				}
				if got != w[i] {
					t.Fatalf("%s weight %d: %v, dequantized %v", c.typ, i, got, w[i])
				}
				x[i] = 0
			}
		}
	}
}
