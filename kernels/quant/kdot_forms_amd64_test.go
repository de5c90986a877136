package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// TestKDotForms holds both widths of the K-quant and Q8_0 loops (the AVX2
// ones run on CPUs without AVX-512, the AVX-512 ones where it is picked)
// to the dequantized weights: bit for bit on one-hot rows, and to the
// float64 dot of the dequantized row on random ones.
func TestKDotForms(t *testing.T) {
	if !haveKDot {
		t.Skip("no AVX2+FMA on this machine")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		typ  kernels.DType
		f    func(*byte, *float32, int) float32
		size int
		wide bool
	}{
		{kernels.Q4_K, q4kDotAVX2, 144, false}, {kernels.Q5_K, q5kDotAVX2, 176, false},
		{kernels.Q6_K, q6kDotAVX2, 210, false}, {kernels.Q8_0, q80DotAVX2, 34, false},
		{kernels.Q4_K, q4kDot512, 144, true}, {kernels.Q5_K, q5kDot512, 176, true},
		{kernels.Q6_K, q6kDot512, 210, true}, {kernels.Q8_0, q80Dot512, 34, true},
		{kernels.Q4_0, q40DotAVX2, 18, false}, {kernels.IQ4_NL, iq4nlDotAVX2, 18, false}, {kernels.IQ4_XS, iq4xsDotAVX2, 136, false},
		{kernels.Q4_0, q40Dot512, 18, true}, {kernels.IQ4_NL, iq4nlDot512, 18, true}, {kernels.IQ4_XS, iq4xsDot512, 136, true},
		{kernels.Q3_K, q3kDotAVX2, 110, false}, {kernels.Q3_K, q3kDot512, 110, true},
		{kernels.Q2_K, q2kDotAVX2, 84, false}, {kernels.Q2_K, q2kDot512, 84, true},
	} {
		if c.wide && !haveKDot512 {
			continue
		}
		dot := func(row []byte, x []float32) float32 { return c.f(&row[0], &x[0], len(row)/c.size) }
		for iter := 0; iter < 10; iter++ {
			const n = 512
			row := randomRow(r, c.typ, n)
			w := make([]float32, n)
			if err := DequantizeRow(c.typ, row, w); err != nil {
				t.Fatal(err)
			}
			x := make([]float32, n)
			for i := range n {
				x[i] = 1
				if got := dot(row, x); got != w[i] {
					t.Fatalf("%s (wide %v) weight %d: %v, dequantized %v", c.typ, c.wide, i, got, w[i])
				}
				x[i] = 0
			}
			var ref, mag float64
			for i := range x {
				x[i] = float32(r.NormFloat64())
				ref += float64(w[i]) * float64(x[i])
				mag += math.Abs(float64(w[i]) * float64(x[i]))
			}
			if d := math.Abs(float64(dot(row, x)) - ref); d > 1e-5*mag+1e-30 {
				t.Fatalf("%s (wide %v): %v, reference %v", c.typ, c.wide, dot(row, x), ref)
			}
		}
	}
}

// TestKDotPicksWide: where the CPU has AVX-512, the row dots the backend
// calls are the AVX-512 loops (their sums run in another order than the
// AVX2 loops', so the bits tell which ran).
func TestKDotPicksWide(t *testing.T) {
	if !haveKDot512 {
		t.Skip("no AVX-512 on this machine")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		typ  kernels.DType
		fast func([]byte, []float32) (float32, bool)
		wide func(*byte, *float32, int) float32
		size int
	}{
		{kernels.Q2_K, fastDot(kernels.Q2_K), q2kDot512, 84}, {kernels.Q3_K, fastDot(kernels.Q3_K), q3kDot512, 110},
		{kernels.Q4_K, fastDot(kernels.Q4_K), q4kDot512, 144}, {kernels.Q5_K, fastDot(kernels.Q5_K), q5kDot512, 176},
		{kernels.Q6_K, fastDot(kernels.Q6_K), q6kDot512, 210}, {kernels.Q8_0, fastDot(kernels.Q8_0), q80Dot512, 34},
		{kernels.Q4_0, fastDot(kernels.Q4_0), q40Dot512, 18}, {kernels.IQ4_NL, fastDot(kernels.IQ4_NL), iq4nlDot512, 18},
		{kernels.IQ4_XS, fastDot(kernels.IQ4_XS), iq4xsDot512, 136},
	} {
		const n = 4096
		row := randomRow(r, c.typ, n)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		got, ok := c.fast(row, x)
		if want := c.wide(&row[0], &x[0], len(row)/c.size); !ok || math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("%s: the backend's dot %v (%v), the AVX-512 loop %v", c.typ, got, ok, want)
		}
	}
}
