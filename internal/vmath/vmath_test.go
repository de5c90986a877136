package vmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpShiftedAccuracy: expNeg within 2 ulp of float64 e^x rounded to
// float32, over a dense sweep of the normal range and at its ends.
func TestExpShiftedAccuracy(t *testing.T) {
	worst, at := 0.0, float32(0)
	check := func(x float32) {
		got := ExpNeg(x)
		want := math.Exp(float64(x))
		if float32(want) == 0 || x < expMin {
			if got != 0 {
				t.Errorf("e^%g = %g, want 0", x, got)
			}
			return
		}
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		if d := math.Abs(float64(got)-want) / ulp; d > worst {
			worst, at = d, x
		}
	}
	for x := float32(-1e-7); x > -90; x *= 1 + 2e-5 { // ~1M points
		check(x)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 1 << 20 {
		check(-88 * rng.Float32())
	}
	for _, x := range []float32{float32(math.Copysign(0, -1)), -1e-30, -0.34657359, -0.34657360, expMin, math.Nextafter32(expMin, 0), -87.4, -1000, float32(math.Inf(-1))} {
		check(x)
	}
	t.Logf("worst error %.3f ulp at e^%g", worst, at)
	if worst > 2 {
		t.Errorf("error %.3f ulp at e^%g", worst, at)
	}
}

// TestExpShiftedBitIdentical: the vector loop gives expShiftedGo's bits,
// weights and sum, at every length around its 16-lane steps.
func TestExpShiftedBitIdentical(t *testing.T) { forEachWidth(t, testExpShiftedBitIdentical) }

func testExpShiftedBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099} {
		scores := make([]float32, n)
		maxS := float32(math.Inf(-1))
		for i := range scores {
			scores[i] = float32(rng.NormFloat64() * 8)
			if i%97 == 5 {
				scores[i] = -200 // weight 0
			}
			maxS = max(maxS, scores[i])
		}
		want := append([]float32(nil), scores...)
		wantSum := expShiftedGo(want, maxS)
		got := append([]float32(nil), scores...)
		gotSum := ExpShifted(got, maxS)
		if math.Float32bits(gotSum) != math.Float32bits(wantSum) {
			t.Errorf("n=%d: sum %g, portable %g", n, gotSum, wantSum)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("n=%d: weight %d = %g, portable %g (score %g)", n, i, got[i], want[i], scores[i]-maxS)
				break
			}
		}
	}
}

// forEachWidth runs test with the AVX-512 loops off (the AVX2 ones, as on
// CPUs without AVX-512) and, where the CPU has them, on.
func forEachWidth(t *testing.T, test func(*testing.T)) {
	wide := haveAVX512
	defer func() { haveAVX512 = wide }()
	for _, on := range []bool{false, true} {
		if on && !wide {
			continue
		}
		haveAVX512 = on
		t.Run(map[bool]string{false: "avx2", true: "avx512"}[on], test)
	}
}

func BenchmarkExpShifted(b *testing.B) {
	scores := make([]float32, 2048)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range scores {
		scores[i] = float32(rng.NormFloat64())
	}
	buf := make([]float32, len(scores))
	b.SetBytes(int64(4 * len(scores)))
	for b.Loop() {
		copy(buf, scores)
		ExpShifted(buf, 4)
	}
}

// TestSigmoidAccuracy: sigmoid32 within 2.5 ulp of float64 1/(1+e^-x)
// where that is a normal float32, and below 1.2e-38 where it is not.
func TestSigmoidAccuracy(t *testing.T) {
	worst, at := 0.0, float32(0)
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 1 << 21 {
		x := float32(rng.NormFloat64() * 8)
		if i%4 == 0 {
			x = (rng.Float32() - 0.5) * 200
		}
		got, want := Sigmoid(x), 1/(1+math.Exp(-float64(x)))
		if want < 1.2e-38 {
			if got > 1.2e-38 {
				t.Errorf("sigmoid(%g) = %g, want %g", x, got, want)
			}
			continue
		}
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		if d := math.Abs(float64(got)-want) / ulp; d > worst {
			worst, at = d, x
		}
	}
	t.Logf("worst error %.3f ulp at sigmoid(%g)", worst, at)
	if worst > 2.5 {
		t.Errorf("error %.3f ulp at sigmoid(%g)", worst, at)
	}
}

// TestSigmoidMulBitIdentical: the vector loops give sigmoidMulGo's bits,
// with d apart from x and d = x (SiLU in place).
func TestSigmoidMulBitIdentical(t *testing.T) { forEachWidth(t, testSigmoidMulBitIdentical) }

func testSigmoidMulBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 33, 100, 3072} {
		x := make([]float32, n)
		d := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 10)
			d[i] = float32(rng.NormFloat64())
		}
		x[n/2] = -150
		want, got := append([]float32(nil), d...), append([]float32(nil), d...)
		sigmoidMulGo(want, x)
		SigmoidMul(got, x)
		wantIn, gotIn := append([]float32(nil), x...), append([]float32(nil), x...)
		sigmoidMulGo(wantIn, wantIn)
		SigmoidMul(gotIn, gotIn)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(gotIn[i]) != math.Float32bits(wantIn[i]) {
				t.Fatalf("n=%d, %d: %g and in place %g, portable %g and %g (x %g)", n, i, got[i], gotIn[i], want[i], wantIn[i], x[i])
			}
		}
	}
}

// TestSoftmaxHelpers: maxF32, scaleF32 and mulAdd's vector loops against
// plain loops, at lengths around their steps.
func TestSoftmaxHelpers(t *testing.T) { forEachWidth(t, testSoftmaxHelpers) }

func testSoftmaxHelpers(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	if m := Max(nil); !math.IsInf(float64(m), -1) {
		t.Errorf("max of none %g", m)
	}
	for _, n := range []int{1, 7, 8, 9, 16, 17, 31, 64, 100} {
		for at := range n {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64()) - 10
			}
			x[at] = 3
			if m := Max(x); m != 3 {
				t.Fatalf("n=%d: max %g with 3 at %d", n, m, at)
			}
		}
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		want := make([]float32, n)
		for i, v := range x {
			want[i] = v * 0.3
		}
		Scale(x, 0.3)
		for i := range x {
			if x[i] != want[i] {
				t.Fatalf("n=%d: scaled [%d] %g, want %g", n, i, x[i], want[i])
			}
		}
		a, bv := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], bv[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		got := append([]float32(nil), x...)
		mulAddGo(x, a, bv)
		MulAdd(got, a, bv)
		for i := range x {
			if math.Float32bits(got[i]) != math.Float32bits(x[i]) {
				t.Fatalf("n=%d: mulAdd [%d] %g, portable %g", n, i, got[i], x[i])
			}
		}
	}
}
