package kernels

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func fp8Weight(name string, rows, cols int, block [2]int, fill byte) *Weight {
	w := &Weight{Name: name, DType: F8E4M3, Shape: []int{rows, cols}, Data: make([]byte, rows*cols), ScaleBlock: block}
	for i := range w.Data {
		w.Data[i] = fill + byte(i)
	}
	w.Scale = make([]float32, ceilDiv(rows, block[0])*ceilDiv(cols, block[1]))
	for i := range w.Scale {
		w.Scale[i] = float32(fill) + float32(i)/8
	}
	return w
}

// TestStackRows joins per-head matrices the way MLA's absorbed form
// stacks them: rows in order, FP8 scale rows with them, and refuses
// pieces that do not stack.
func TestStackRows(t *testing.T) {
	a, b := fp8Weight("a", 32, 16, [2]int{16, 16}, 1), fp8Weight("b", 16, 16, [2]int{16, 16}, 100)
	s, err := StackRows("ab", []*Weight{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shape, []int{48, 16}) || !slices.Equal(s.Data, append(slices.Clone(a.Data), b.Data...)) ||
		!slices.Equal(s.Scale, append(slices.Clone(a.Scale), b.Scale...)) || s.ScaleBlock != a.ScaleBlock {
		t.Fatalf("stacked %v: data or scales not a's then b's", s.Shape)
	}
	// Each piece's row i equals the stack's row (offset + i).
	for _, c := range []struct {
		w   *Weight
		off int
	}{{a, 0}, {b, 32}} {
		sl, err := s.RowSlice("part", c.off, c.off+c.w.Rows(), c.w.Shape)
		if err != nil || !slices.Equal(sl.Data, c.w.Data) || !slices.Equal(sl.Scale, c.w.Scale) {
			t.Fatalf("rows from %d: %v", c.off, err)
		}
	}
	bf := &Weight{Name: "bf", DType: BF16, Shape: []int{4, 16}, Data: make([]byte, 4*16*2)}
	for _, c := range []struct {
		ws   []*Weight
		want string
	}{
		{nil, "nothing to stack"},
		{[]*Weight{a, bf}, "does not stack"},
		{[]*Weight{a, fp8Weight("wide", 16, 32, [2]int{16, 16}, 3)}, "does not stack"},
		{[]*Weight{a, fp8Weight("blocks", 16, 16, [2]int{8, 16}, 3)}, "does not stack"},
		{[]*Weight{a, fp8Weight("ragged", 24, 16, [2]int{16, 16}, 3)}, "not whole 16-row scale blocks"},
	} {
		if _, err := StackRows("x", c.ws); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("StackRows(%d pieces): %v, want an error with %q", len(c.ws), err, c.want)
		}
	}
	if s, err := StackRows("bf2", []*Weight{bf, bf}); err != nil || s.Rows() != 8 || s.Scale != nil {
		t.Errorf("bf16 stack: %v %v", s, err)
	}
}

// TestF32ToBF16 checks the rounding against its definition: the nearest
// bf16, ties to the even one, exact values unchanged, NaN kept a NaN.
func TestF32ToBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1: exact
		{0x3f808000, 0x3f80}, // halfway, even below
		{0x3f818000, 0x3f82}, // halfway, even above
		{0x3f808001, 0x3f81}, // just above halfway
		{0xbf807fff, 0xbf80}, // just below halfway, negative
		{0x7f7fffff, 0x7f80}, // the largest float rounds to infinity
		{0xff800000, 0xff80}, // -inf
		{0x00000001, 0x0000}, // the smallest subnormal rounds to zero
	} {
		if got := F32ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := F32ToBF16(float32(math.NaN())); got&0x7f80 != 0x7f80 || got&0x7f == 0 {
		t.Errorf("NaN became %#04x", got)
	}
	for h := range uint32(1 << 16) { // every bf16 but NaNs survives the round trip
		if f := BF16ToF32(uint16(h)); f == f && F32ToBF16(f) != uint16(h) {
			t.Fatalf("%#04x → %g → %#04x", h, f, F32ToBF16(f))
		}
	}
	w := &Weight{Name: "w", DType: F16, Shape: []int{1, 2}, Data: []byte{0x00, 0x3c, 0x00, 0xc0}} // 1, -2
	b, err := w.ToBF16("b")
	if err != nil || !slices.Equal(b.Data, []byte{0x80, 0x3f, 0x00, 0xc0}) {
		t.Errorf("f16 [1 -2] to bf16: %v %v", b, err)
	}
	if _, err := (&Weight{Name: "q", DType: F8E4M3, Shape: []int{1, 16}, Data: make([]byte, 16)}).ToBF16("q"); err == nil {
		t.Error("FP8 to bf16 succeeded")
	}
}
