package cpu

import (
	"math"
	"testing"
)

// TestArgmaxPair: the slice's first largest value and its index plus the
// offset at the slot, zeros in the other slots; (NaN, offset) where
// nothing wins.
func TestArgmaxPair(t *testing.T) {
	nan := float32(math.NaN())
	b := New(1)
	for _, c := range []struct {
		x          []float32
		offset     int
		slot       int
		wantV      float32
		wantI      float32
		wantNaNVal bool
	}{
		{[]float32{1, 3, 3, 2}, 100, 1, 3, 101, false},
		{[]float32{nan, -1, 5}, 7, 0, 5, 9, false},
		{[]float32{nan, nan}, 7, 2, 0, 7, true},
		{[]float32{float32(math.Inf(-1))}, 0, 0, float32(math.Inf(-1)), 0, false},
	} {
		dst := &Buf{D: []float32{9, 9, 9, 9, 9, 9}}
		b.ArgmaxPair(dst, &Buf{D: c.x}, len(c.x), c.offset, c.slot, 3)
		for s := range 3 {
			v, i := dst.D[2*s], dst.D[2*s+1]
			switch {
			case s != c.slot && (v != 0 || i != 0):
				t.Errorf("%v: slot %d holds (%v, %v), want zeros", c.x, s, v, i)
			case s == c.slot && c.wantNaNVal && (v == v || i != c.wantI):
				t.Errorf("%v: pair (%v, %v), want (NaN, %v)", c.x, v, i, c.wantI)
			case s == c.slot && !c.wantNaNVal && (v != c.wantV || i != c.wantI):
				t.Errorf("%v: pair (%v, %v), want (%v, %v)", c.x, v, i, c.wantV, c.wantI)
			}
		}
	}
}
