package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDotKernelsMatchPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 31, 32, 33, 64, 100, 1024, 4099} {
		w := make([]uint16, n)
		a := make([]float32, n)
		x := make([]float32, n)
		for i := range w {
			a[i] = rng.Float32()*2 - 1
			w[i] = uint16(math.Float32bits(a[i]) >> 16)
			x[i] = rng.Float32()*2 - 1
		}
		if got, want := dotBF16(w, x), dotBF16Go(w, x); math.Abs(float64(got-want)) > 1e-4*math.Sqrt(float64(n)) {
			t.Errorf("bf16 n=%d: %v vs %v", n, got, want)
		}
		if got, want := dotF32(a, x), dotF32Go(a, x); math.Abs(float64(got-want)) > 1e-4*math.Sqrt(float64(n)) {
			t.Errorf("f32 n=%d: %v vs %v", n, got, want)
		}
	}
}

func BenchmarkDotBF16(b *testing.B) {
	const n = 4096
	w := make([]uint16, n)
	x := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		dotBF16(w, x)
	}
}
