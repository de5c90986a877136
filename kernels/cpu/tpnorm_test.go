package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSplitRMSNorm: a row split into column blocks, each block's sum of
// squares written at an offset, summed (as the group's all-reduce does)
// and applied per block, equals RMSNorm over the whole row.
func TestSplitRMSNorm(t *testing.T) {
	b := New(1)
	r := rand.New(rand.NewPCG(3, 5))
	const rows, dim, parts = 3, 48, 4
	per := dim / parts
	x, w := randVec(r, rows*dim, 1), randVec(r, dim, 1)
	want := b.NewBuf(rows * dim)
	b.RMSNorm(want, &Buf{D: x}, f32Tensor(t, b, []int{dim}, w), rows, dim, 1e-6)
	total := make([]float32, rows)
	blocks := make([][]float32, parts)
	for p := range parts {
		blocks[p] = make([]float32, rows*per)
		for i := range rows {
			copy(blocks[p][i*per:(i+1)*per], x[i*dim+p*per:i*dim+(p+1)*per])
		}
		ss := &Buf{D: make([]float32, 2*rows)}
		b.SumSquares(ss, rows, &Buf{D: blocks[p]}, rows, per) // at an offset
		for i := range rows {
			total[i] += ss.D[rows+i]
		}
	}
	sum := &Buf{D: append(make([]float32, 1), total...)}
	for p := range parts {
		blk := &Buf{D: blocks[p]}
		b.RMSNormSum(blk, blk, sum, 1, f32Tensor(t, b, []int{per}, w[p*per:(p+1)*per]), rows, per, 1/float32(dim), 1e-6)
		for i := range rows {
			for j := range per {
				got, ref := blk.D[i*per+j], f32(want)[i*dim+p*per+j]
				if math.Abs(float64(got-ref)) > 1e-6*math.Abs(float64(ref))+1e-7 {
					t.Fatalf("row %d col %d: split %v, whole %v", i, p*per+j, got, ref)
				}
			}
		}
	}
}
