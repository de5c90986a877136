package models

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// fp8At is element (r, c) of an FP8 weight, dequantized.
func fp8At(w *kernels.Weight, r, c int) float32 {
	nsc := ceilDiv(w.Cols(), w.ScaleBlock[1])
	return kernels.FP8E4M3ToF32(w.Data[r*w.Cols()+c]) * w.Scale[r/w.ScaleBlock[0]*nsc+c/w.ScaleBlock[1]]
}

// randomFP8 is a valid block-scaled FP8 matrix of random finite values.
func randomFP8(t *testing.T, rng *rand.Rand, name string, rows, cols int, block [2]int) *kernels.Weight {
	t.Helper()
	w := &kernels.Weight{Name: name, DType: kernels.F8E4M3, Shape: []int{rows, cols}, Data: make([]byte, rows*cols),
		ScaleBlock: block}
	for i := range w.Data {
		w.Data[i] = byte(rng.IntN(0x7f)) | byte(rng.IntN(2))<<7
	}
	for range ceilDiv(rows, block[0]) * ceilDiv(cols, block[1]) {
		w.Scale = append(w.Scale, rng.Float32()+0.5)
	}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestSliceFP8 checks that row selections and column slices of a
// block-scaled FP8 matrix, on and off the scale-block edges, dequantize to
// exactly the elements they cut out.
func TestSliceFP8(t *testing.T) {
	const rows, cols = 70, 52 // partial last blocks both ways
	w := randomFP8(t, rand.New(rand.NewPCG(1, 2)), "w", rows, cols, [2]int{16, 16})
	for _, rs := range [][]rowRange{{{0, 16}}, {{16, 70}}, {{8, 24}}, {{36, 42}}, {{0, 8}, {32, 40}, {64, 70}}, {{4, 6}, {16, 19}}} {
		s, err := selectRows(w, rs...)
		if err != nil {
			t.Fatalf("rows %v: %v", rs, err)
		}
		i := 0
		for _, r := range rs {
			for row := r.lo; row < r.hi; row++ {
				for c := range cols {
					if got, want := fp8At(s, i, c), fp8At(w, row, c); got != want {
						t.Fatalf("rows %v: (%d,%d) = %v, want row %d's %v", rs, i, c, got, row, want)
					}
				}
				i++
			}
		}
	}
	for _, cr := range [][2]int{{0, 26}, {26, 52}, {16, 32}, {8, 20}, {48, 52}} {
		s, err := sliceCols(w, cr[0], cr[1])
		if err != nil {
			t.Fatalf("cols %v: %v", cr, err)
		}
		for r := range rows {
			for c := cr[0]; c < cr[1]; c++ {
				if got, want := fp8At(s, r, c-cr[0]), fp8At(w, r, c); got != want {
					t.Fatalf("cols %v: (%d,%d) = %v, want %v", cr, r, c, got, want)
				}
			}
		}
	}
	if _, err := selectRows(w, rowRange{10, 5}); !errors.Is(err, ErrTP) {
		t.Errorf("empty range: %v, want ErrTP", err)
	}
}

// TestSplitGatedQuery checks the load-time split of a gated q_proj
// ([query, gate] rows per head) on block-scaled FP8 with a head narrower
// than a scale block, and on its float32 bias.
func TestSplitGatedQuery(t *testing.T) {
	const hd, heads, cols = 8, 3, 40
	rows := 2 * hd * heads
	w := randomFP8(t, rand.New(rand.NewPCG(3, 4)), "q_proj.weight", rows, cols, [2]int{32, 16})
	parts, err := splitGatedQuery(hd)(w)
	if err != nil {
		t.Fatal(err)
	}
	for h := range heads {
		for r := range hd {
			for c := range cols {
				if got, want := fp8At(parts[0], h*hd+r, c), fp8At(w, 2*h*hd+r, c); got != want {
					t.Fatalf("query head %d row %d col %d: %v, want %v", h, r, c, got, want)
				}
				if got, want := fp8At(parts[1], h*hd+r, c), fp8At(w, 2*h*hd+hd+r, c); got != want {
					t.Fatalf("gate head %d row %d col %d: %v, want %v", h, r, c, got, want)
				}
			}
		}
	}
	b := &kernels.Weight{Name: "q_proj.bias", DType: kernels.F32, Shape: []int{rows}, Data: make([]byte, 4*rows)}
	for i := range rows {
		b.Data[4*i] = byte(i)
	}
	bp, err := splitGatedQuery(hd)(b)
	if err != nil {
		t.Fatal(err)
	}
	for h := range heads {
		for r := range hd {
			if q, g := bp[0].Data[4*(h*hd+r)], bp[1].Data[4*(h*hd+r)]; int(q) != 2*h*hd+r || int(g) != 2*h*hd+hd+r {
				t.Fatalf("bias head %d row %d: %d, %d", h, r, q, g)
			}
		}
	}
	if _, err := splitGatedQuery(hd)(&kernels.Weight{Name: "odd", DType: kernels.F32, Shape: []int{rows + 8, 4},
		Data: make([]byte, 4*4*(rows+8))}); !errors.Is(err, ErrShape) {
		t.Errorf("rows not whole heads: %v", err)
	}
}
