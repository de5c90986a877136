package cuda

import "testing"

// TestF8MMAMapping emulates one piece (64 columns of a 16-row tile) of
// fp8mma.cu on the host: each lane builds its A and B registers from its 16
// weight bytes per row and 16 activations as piece() does, the registers
// are placed in the m16n8k16 matrices by the PTX ISA fragment layout (a0:
// row g, k 2t..2t+1; a1: row g+8; a2/a3: k 2t+8..2t+9; b0: k 2t..2t+1 at n
// g; b1: k 2t+8..2t+9), and c0/c2 of every lane (D[g][2t], D[g+8][2t]) must
// be the row sums over the piece's columns.
func TestF8MMAMapping(t *testing.T) {
	var w [16][64]float64
	var x [64]float64
	for r := range w {
		for c := range w[r] {
			w[r][c] = float64((r*131+c*17)%23 - 11)
		}
	}
	for c := range x {
		x[c] = float64((c*29)%13 - 6)
	}
	var a [16][16]float64 // per k-step, rebuilt
	var bm [16][8]float64
	got := [16]float64{}
	for j := range 4 { // k-steps of the piece
		for lane := range 32 {
			g, tt := lane>>2, lane&3
			col := 16*tt + 4*j // lane's word j: columns col..col+3
			// a0/a2 = lo/hi byte pairs of row g's word j; a1/a3 of row g+8.
			a0 := [2]float64{w[g][col], w[g][col+1]}
			a2 := [2]float64{w[g][col+2], w[g][col+3]}
			a1 := [2]float64{w[g+8][col], w[g+8][col+1]}
			a3 := [2]float64{w[g+8][col+2], w[g+8][col+3]}
			b0 := [2]float64{x[col], x[col+1]}
			b1 := [2]float64{x[col+2], x[col+3]}
			for i := range 2 {
				a[g][2*tt+i], a[g+8][2*tt+i] = a0[i], a1[i]
				a[g][2*tt+8+i], a[g+8][2*tt+8+i] = a2[i], a3[i]
				bm[2*tt+i][g], bm[2*tt+8+i][g] = b0[i], b1[i]
			}
		}
		for lane := range 32 {
			g, tt := lane>>2, lane&3
			var c0, c2 float64
			for k := range 16 {
				c0 += a[g][k] * bm[k][2*tt]
				c2 += a[g+8][k] * bm[k][2*tt]
			}
			if tt == 0 {
				got[g] += c0
				got[g+8] += c2
			} else if c0 != a0Sum(a, bm, g) || c2 != a0Sum(a, bm, g+8) {
				t.Fatalf("lane %d: n columns differ", lane)
			}
		}
	}
	for r := range 16 {
		want := 0.0
		for c := range 64 {
			want += w[r][c] * x[c]
		}
		if got[r] != want {
			t.Errorf("row %d: %v, want %v", r, got[r], want)
		}
	}
}

// a0Sum is D[m][0] of the emulated step.
func a0Sum(a [16][16]float64, b [16][8]float64, m int) float64 {
	s := 0.0
	for k := range 16 {
		s += a[m][k] * b[k][0]
	}
	return s
}
