package cuda

// A CPU emulation of fp8pipe.cuh's pipeStageBy, no GPU needed: the power of
// two each 128-column unit is scaled by (its largest magnitude's exponent
// bits, as the kernel reads them), the f16 rounding of the scaled values
// and the inverse factor the unit's products are multiplied by, against
// xPrologueBy's one power for the whole activation, which pipeStageBy
// replaced in the ring GEMVs.

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// emuStagePower is the kernel's sh for a largest magnitude m: m < 2^e for
// e = m's biased exponent - 126, sh = 14 - e clamped to [-100, 100].
func emuStagePower(m float32) int {
	e := int(math.Float32bits(m)>>23&0xff) - 126
	return min(max(14-e, -100), 100)
}

// emuStage stages x as pipeStageBy does with units of width unit (128), or
// as xPrologueBy did with one unit as wide as x: f16 values and, per
// unit, the factor 2^-sh.
func emuStage(x []float32, unit int) (xs []uint16, fac []float32) {
	xs = make([]uint16, len(x))
	for u := 0; u < len(x); u += unit {
		end := min(u+unit, len(x))
		var m float32
		for _, v := range x[u:end] {
			m = max(m, float32(math.Abs(float64(v))))
		}
		sh := emuStagePower(m)
		sc := float32(math.Ldexp(1, sh))
		for i := u; i < end; i++ {
			xs[i] = kernels.F32ToF16(x[i] * sc)
		}
		fac = append(fac, float32(math.Ldexp(1, -sh)))
	}
	return xs, fac
}

// emuStagedDot is Σ w·x over the staged x, each unit's sum times its
// factor, in float64 (the mma's accumulation is not what is tested here).
func emuStagedDot(w []float32, xs []uint16, fac []float32, unit int) float64 {
	var sum float64
	for u := 0; u*unit < len(xs); u++ {
		var part float64
		for i := u * unit; i < min((u+1)*unit, len(xs)); i++ {
			part += float64(w[i]) * float64(kernels.F16ToF32(xs[i]))
		}
		sum += part * float64(fac[u])
	}
	return sum
}

// TestPipeStageRange: every unit's largest staged magnitude lies in
// [2^13, 2^14) — f16's top octaves, never past its largest finite value —
// whatever the unit's magnitude, exact powers of two included; an all-zero
// unit stages zeros.
func TestPipeStageRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	const unit = 128
	x := make([]float32, 40*unit)
	for u := 0; u < 40; u++ {
		scale := math.Ldexp(1, rng.IntN(60)-40)
		for i := range unit {
			x[u*unit+i] = float32(rng.NormFloat64() * scale)
		}
		if u%7 == 3 { // an exact power of two as the largest
			x[u*unit+5] = float32(math.Ldexp(1, rng.IntN(40)-20))
			for i := range unit {
				if i != 5 {
					x[u*unit+i] = x[u*unit+5] / 2 * float32(rng.Float64())
				}
			}
		}
	}
	for i := 0; i < unit; i++ {
		x[39*unit+i] = 0
	}
	xs, fac := emuStage(x, unit)
	for u := range 40 {
		var m float32
		for _, h := range xs[u*unit : (u+1)*unit] {
			m = max(m, float32(math.Abs(float64(kernels.F16ToF32(h)))))
		}
		if u == 39 {
			if m != 0 || fac[u] != float32(math.Ldexp(1, -100)) {
				t.Errorf("zero unit: largest %g, factor %g", m, fac[u])
			}
			continue
		}
		if m < 1<<13 || m >= 1<<14 {
			t.Errorf("unit %d: largest staged magnitude %g outside [2^13, 2^14)", u, m)
		}
	}
}

// TestPipeStagePrecision: over activations whose units differ by many
// octaves (as a residual stream's massive dimensions make them), the
// per-unit staging's dot products are at least as close to the exact
// ones as the one-power staging's; and a unit's own part of a dot (what a
// row weighting only those columns gets) keeps f16's relative precision,
// where under the block's power its small elements fall into f16's
// subnormals.
func TestPipeStagePrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	const unit, in = 128, 5120
	var errUnit, errBlock, worstUnit, worstBlock float64
	for trial := range 50 {
		x, w := make([]float32, in), make([]float32, in)
		for i := range x {
			oct := (i / unit) % 12 * 3 // units 0..33 octaves apart
			x[i] = float32(rng.NormFloat64() * math.Ldexp(1, -oct))
			w[i] = kernels.FP8E4M3ToF32(byte(rng.IntN(256) &^ 0x80 % 0x7e)) // finite E4M3 values
			if rng.IntN(2) == 0 {
				w[i] = -w[i]
			}
		}
		if trial%2 == 0 {
			x[rng.IntN(in)] = 3000 // one massive activation
		}
		var exact float64
		for i := range x {
			exact += float64(w[i]) * float64(x[i])
		}
		xsU, facU := emuStage(x, unit)
		xsB, facB := emuStage(x, in)
		errUnit += math.Abs(emuStagedDot(w, xsU, facU, unit) - exact)
		errBlock += math.Abs(emuStagedDot(w, xsB, facB, in) - exact)
		for u := 0; u < in; u += unit { // each unit's own part
			var part, mag, pu, pb float64
			for i := u; i < u+unit; i++ {
				part += float64(w[i]) * float64(x[i])
				mag += math.Abs(float64(w[i]) * float64(x[i]))
				pu += float64(w[i]) * float64(kernels.F16ToF32(xsU[i]))
				pb += float64(w[i]) * float64(kernels.F16ToF32(xsB[i]))
			}
			if mag == 0 {
				continue
			}
			worstUnit = max(worstUnit, math.Abs(pu*float64(facU[u/unit])-part)/mag)
			worstBlock = max(worstBlock, math.Abs(pb*float64(facB[0])-part)/mag)
		}
	}
	if errUnit > errBlock {
		t.Fatalf("per-unit staging error %g above the block's %g", errUnit, errBlock)
	}
	// f16 rounds each element to within 2^-11 of itself: a unit's part is
	// within that of Σ|w·x| over the unit.
	if worstUnit > math.Ldexp(1, -11) {
		t.Errorf("a unit's part off by %.3g of its magnitude with its own power", worstUnit)
	}
	if worstBlock < 10*worstUnit {
		t.Errorf("the test's activations do not separate the stagings: %.3g vs %.3g", worstBlock, worstUnit)
	}
	t.Logf("summed |error| over 50 dots: per unit %.3g, one power %.3g; worst unit part %.3g vs %.3g",
		errUnit, errBlock, worstUnit, worstBlock)
}
