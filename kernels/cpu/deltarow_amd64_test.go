//go:build amd64

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDeltaRowPassesExact: the delta rule's two state passes
// (deltaDecay, deltaUpdate), vector bands and row-loop tails, give the
// bits of the scalar row loops with every product rounded before its sum,
// over widths with and without tails.
func TestDeltaRowPassesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, dk := range []int{1, 7, 128} {
		for _, dv := range []int{3, 8, 12, 40, 100, 128} {
			s := randVec(r, dk*dv, 1)
			k, q, delta := randVec(r, dk, 1), randVec(r, dk, 1), randVec(r, dv, 1)
			decay := float32(0.93)
			ws, wd := append([]float32(nil), s...), append([]float32(nil), delta...)
			for i := range dk {
				for j := range dv {
					ws[i*dv+j] = float32(ws[i*dv+j] * decay)
					wd[j] = wd[j] - float32(ws[i*dv+j]*k[i])
				}
			}
			deltaDecay(s, k, delta, decay)
			same(t, "decay state", dk, dv, s, ws)
			same(t, "decay delta", dk, dv, delta, wd)
			wo := make([]float32, dv)
			for i := range dk {
				for j := range dv {
					ws[i*dv+j] = ws[i*dv+j] + float32(k[i]*wd[j])
					wo[j] = wo[j] + float32(ws[i*dv+j]*q[i])
				}
			}
			o := randVec(r, dv, 1) // deltaUpdate starts from zero itself
			deltaUpdate(s, k, q, delta, o)
			same(t, "update state", dk, dv, s, ws)
			same(t, "update out", dk, dv, o, wo)
		}
	}
}

func same(t *testing.T, what string, dk, dv int, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("dk=%d dv=%d %s[%d]: %v, want %v", dk, dv, what, i, got[i], want[i])
		}
	}
}
