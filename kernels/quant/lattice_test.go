package quant

import (
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// The exported codebooks must be the dequantizers' own, value for value:
// the CUDA kernels decode with them and conformance compares against these
// dequantizers.
func TestLatticeMatchesGrids(t *testing.T) {
	for _, c := range []struct {
		dt   kernels.DType
		dim  int
		vals func(k, i int) float32
		n    int
	}{
		{kernels.IQ1_S, 8, func(k, i int) float32 { return iq1sGrid[k][i] }, 2048},
		{kernels.IQ1_M, 8, func(k, i int) float32 { return iq1sGrid[k][i] }, 2048},
		{kernels.IQ2_XXS, 8, func(k, i int) float32 { return iq2xxsGrid[k][i] }, 256},
		{kernels.IQ2_XS, 8, func(k, i int) float32 { return iq2xsGrid[k][i] }, 512},
		{kernels.IQ2_S, 8, func(k, i int) float32 { return iq2sGrid[k][i] }, 1024},
		{kernels.IQ3_XXS, 4, func(k, i int) float32 { return iq3xxsGrid[k][i] }, 256},
		{kernels.IQ3_S, 4, func(k, i int) float32 { return iq3sGrid[k][i] }, 512},
	} {
		vals, dim, ok := Lattice(c.dt)
		if !ok || dim != c.dim || len(vals) != c.n*c.dim {
			t.Fatalf("%s: ok=%v dim=%d len=%d, want dim %d len %d", c.dt, ok, dim, len(vals), c.dim, c.n*c.dim)
		}
		for k := 0; k < c.n; k++ {
			for i := 0; i < dim; i++ {
				if got, want := float32(vals[k*dim+i]), c.vals(k, i); got != want {
					t.Fatalf("%s point %d coordinate %d: %v, want %v", c.dt, k, i, got, want)
				}
			}
		}
	}
	if _, _, ok := Lattice(kernels.Q4_K); ok {
		t.Error("Q4_K has no lattice")
	}
}
