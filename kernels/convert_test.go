package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestF32ToF16: every float16 survives the round trip; random floats
// (normal, subnormal, overflowing) round to the nearest float16, ties to
// even; NaN stays NaN.
func TestF32ToF16(t *testing.T) {
	for h := range 1 << 16 {
		x := F16ToF32(uint16(h))
		if x != x {
			if g := F32ToF16(x); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(x); g != uint16(h) && !(x == 0 && g&0x7fff == 0) {
			t.Fatalf("%#04x (%g) came back as %#04x", h, x, g)
		}
	}
	rng := rand.New(rand.NewPCG(23, 24))
	for range 1 << 20 {
		x := float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(50)-30)))
		g := F32ToF16(x)
		got := float64(F16ToF32(g))
		if math.IsInf(got, 0) {
			if math.Abs(float64(x)) < 65520 { // halfway between the largest float16 and 2^16
				t.Fatalf("%g overflowed to %#04x", x, g)
			}
			continue
		}
		for _, n := range []uint16{g - 1, g + 1} { // the neighbours are no nearer
			if n&0x7c00 == 0x7c00 {
				continue
			}
			other := float64(F16ToF32(n))
			dg, dn := math.Abs(got-float64(x)), math.Abs(other-float64(x))
			if dn < dg || (dn == dg && g&1 == 1) {
				t.Fatalf("%g rounded to %#04x (%g); %#04x (%g) is nearer or even", x, g, got, n, other)
			}
		}
	}
}
