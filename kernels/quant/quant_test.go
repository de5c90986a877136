package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// allTypes lists every format this package implements.
var allTypes = []kernels.DType{
	kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0, kernels.Q4_0, kernels.Q4_1, kernels.Q5_0,
	kernels.Q5_1, kernels.Q2_K, kernels.Q3_K, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K, kernels.IQ1_S,
	kernels.IQ1_M, kernels.IQ2_XXS, kernels.IQ2_XS, kernels.IQ2_S, kernels.IQ3_XXS, kernels.IQ3_S,
	kernels.IQ4_NL, kernels.IQ4_XS, kernels.MXFP4,
}

// halfOffsets are the fp16 scale fields of each block, which random bytes
// must keep finite.
var halfOffsets = map[kernels.DType][]int{
	kernels.Q8_0: {0}, kernels.Q4_0: {0}, kernels.Q4_1: {0, 2}, kernels.Q5_0: {0}, kernels.Q5_1: {0, 2},
	kernels.IQ4_NL: {0}, kernels.Q2_K: {80, 82}, kernels.Q3_K: {108}, kernels.Q4_K: {0, 2},
	kernels.Q5_K: {0, 2}, kernels.Q6_K: {208}, kernels.IQ1_S: {0}, kernels.IQ2_XXS: {0},
	kernels.IQ2_XS: {0}, kernels.IQ2_S: {0}, kernels.IQ3_XXS: {0}, kernels.IQ3_S: {0}, kernels.IQ4_XS: {0},
}

// randomHalf returns a finite fp16 of moderate magnitude (2^-10..2^5).
func randomHalf(r *rand.Rand) uint16 {
	return uint16(r.IntN(2))<<15 | uint16(5+r.IntN(16))<<10 | uint16(r.IntN(1024))
}

// randomRow makes the bytes of a row of n elements: random quants, finite
// scales.
func randomRow(r *rand.Rand, t kernels.DType, n int) []byte {
	rb, err := t.RowBytes(n)
	if err != nil {
		panic(err)
	}
	b := make([]byte, rb)
	switch t {
	case kernels.F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
		return b
	case kernels.F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(b[2*i:], randomHalf(r))
		}
		return b
	case kernels.BF16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(r.NormFloat64()))>>16))
		}
		return b
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	bb := t.BlockBytes()
	for o := 0; o < len(b); o += bb {
		blk := b[o : o+bb]
		for _, off := range halfOffsets[t] {
			binary.LittleEndian.PutUint16(blk[off:], randomHalf(r))
		}
		switch t {
		case kernels.IQ1_M:
			blk[55] &^= 0x40 // the scattered fp16 scale: keep its exponent below 16
		case kernels.MXFP4:
			blk[0] = byte(100 + r.IntN(50))
		}
	}
	return b
}

func TestDequantizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			n := 4 * max(typ.BlockElems(), 32)
			for iter := 0; iter < 50; iter++ {
				src := randomRow(r, typ, n)
				got := make([]float32, n)
				if err := DequantizeRow(typ, src, got); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					want := refElem(typ, src, i)
					if math.Float32bits(got[i]) != math.Float32bits(want) {
						t.Fatalf("iter %d element %d: got %v, reference %v", iter, i, got[i], want)
					}
				}
			}
		})
	}
}

func TestDotRowMatchesDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			for _, blocks := range []int{1, 3, 16} {
				n := blocks * typ.BlockElems()
				if typ.BlockElems() == 1 {
					n = blocks*32 + 3
				}
				for iter := 0; iter < 20; iter++ {
					src := randomRow(r, typ, n)
					x := make([]float32, n)
					for i := range x {
						x[i] = float32(r.NormFloat64())
					}
					w := make([]float32, n)
					if err := DequantizeRow(typ, src, w); err != nil {
						t.Fatal(err)
					}
					var ref, mag float64
					for i := range w {
						ref += float64(w[i]) * float64(x[i])
						mag += math.Abs(float64(w[i]) * float64(x[i]))
					}
					got := float64(DotRow(typ, src, x))
					if d := math.Abs(got - ref); d > 1e-5*mag+1e-30 {
						t.Fatalf("n=%d: DotRow %v, reference %v (diff %.3g of magnitude %.3g)", n, got, ref, d, mag)
					}
				}
			}
		})
	}
}

func TestDequantizeRowErrors(t *testing.T) {
	dst := make([]float32, 256)
	if err := DequantizeRow(kernels.Q4_K, make([]byte, 143), dst); err == nil {
		t.Error("short row accepted")
	}
	if err := DequantizeRow(kernels.Q4_K, make([]byte, 144), dst[:255]); err == nil {
		t.Error("partial block accepted")
	}
	if err := DequantizeRow(kernels.F8E4M3, make([]byte, 256), dst); err == nil {
		t.Error("F8E4M3 accepted")
	}
	if err := DequantizeRow(kernels.DType(200), nil, nil); err == nil {
		t.Error("unknown dtype accepted")
	}
}

func TestHalfConversions(t *testing.T) {
	for h, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x7bff: 65504, 0x0001: 5.9604645e-08,
		0x8400: -6.1035156e-05, 0x3555: 0.33325195, 0x0000: 0} {
		if got := F16ToF32(h); got != want {
			t.Errorf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
	if !math.IsInf(float64(F16ToF32(0x7c00)), 1) || !math.IsNaN(float64(F16ToF32(0x7e00))) {
		t.Error("fp16 inf/nan")
	}
	if BF16ToF32(0x3f80) != 1 || BF16ToF32(0xc040) != -3 {
		t.Error("bf16")
	}
}

func benchDot(b *testing.B, typ kernels.DType) {
	const n = 4096
	r := rand.New(rand.NewPCG(5, 6))
	row := randomRow(r, typ, n)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	b.SetBytes(int64(len(row)))
	b.ReportAllocs()
	var s float32
	for b.Loop() {
		s += DotRow(typ, row, x)
	}
	_ = s
}

func BenchmarkDotRow(b *testing.B) {
	for _, typ := range allTypes {
		b.Run(typ.String(), func(b *testing.B) { benchDot(b, typ) })
	}
}

// TestDotRows: a run of rows through DotRows gives each row's DotRow bit
// for bit, for every format (the assembly loops where this CPU has them).
func TestDotRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, typ := range allTypes {
		const n, rows = 512, 5
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		var data []byte
		for range rows {
			data = append(data, randomRow(r, typ, n)...)
		}
		rb, err := typ.RowBytes(n)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, rows)
		DotRows(typ, data, x, got)
		for i := range rows {
			if want := DotRow(typ, data[i*rb:(i+1)*rb], x); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("%s row %d: DotRows %v, DotRow %v", typ, i, got[i], want)
			}
		}
	}
}
