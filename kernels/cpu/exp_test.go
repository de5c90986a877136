package cpu

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
		got := expNeg(x)
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
	for _, x := range []float32{-0.0, -1e-30, -0.34657359, -0.34657360, expMin, math.Nextafter32(expMin, 0), -87.4, -1000, float32(math.Inf(-1))} {
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
		gotSum := expShifted(got, maxS)
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
		expShifted(buf, 4)
	}
}
