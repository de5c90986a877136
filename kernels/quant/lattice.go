package quant

import "github.com/pocketllm/pocketllm/kernels"

// Lattice returns the codebook of an IQ1/IQ2/IQ3 format as the integer
// value of every coordinate, dim (8 or 4) per point, points in index order,
// and whether t has one. The values are those of the expanded grids the
// dequantizers here read, so a GPU backend that uploads them decodes with
// the same table instead of a second transcription of it.
func Lattice(t kernels.DType) (vals []int8, dim int, ok bool) {
	switch t {
	case kernels.IQ1_S, kernels.IQ1_M:
		return flat8(iq1sGrid[:]), 8, true
	case kernels.IQ2_XXS:
		return flat8(iq2xxsGrid[:]), 8, true
	case kernels.IQ2_XS:
		return flat8(iq2xsGrid[:]), 8, true
	case kernels.IQ2_S:
		return flat8(iq2sGrid[:]), 8, true
	case kernels.IQ3_XXS:
		return flat4(iq3xxsGrid[:]), 4, true
	case kernels.IQ3_S:
		return flat4(iq3sGrid[:]), 4, true
	}
	return nil, 0, false
}

// Every grid value is a small integer (-1..62), so int8 holds it exactly.
func flat8(g [][8]float32) []int8 {
	out := make([]int8, 0, 8*len(g))
	for _, p := range g {
		for _, v := range p {
			out = append(out, int8(v))
		}
	}
	return out
}

func flat4(g [][4]float32) []int8 {
	out := make([]int8, 0, 4*len(g))
	for _, p := range g {
		for _, v := range p {
			out = append(out, int8(v))
		}
	}
	return out
}
