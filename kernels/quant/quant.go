// Package quant owns the CPU side of the GGUF weight formats: bit-exact
// dequantization of every block format in kernels.DType (ggml's definitions:
// legacy Q4_0..Q8_0, the K-quants Q2_K..Q6_K, the lattice IQ1..IQ3 formats,
// the non-linear IQ4 formats and MXFP4) plus F32/F16/BF16 rows, and DotRow,
// the fused row·vector product the CPU GEMV runs on, which reads the blocks
// in place without materialising a float32 copy of the row.
//
// Rows are stored along the last (input) dimension; a row of n elements is
// n/BlockElems consecutive blocks of BlockBytes bytes (kernels.DType.RowBytes).
// FP8 E4M3 with block scales is not a GGUF format and lives in the CPU
// backend, not here.
package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

type formatImpl struct {
	// deq decodes a whole row exactly as ggml's dequantize_row_*.
	deq func(src []byte, dst []float32)
	// dot computes Σ row[i]*x[i]; len(x) is a whole number of blocks.
	dot func(row []byte, x []float32) float32
}

var formats [64]formatImpl

func init() {
	formats[kernels.F32] = formatImpl{deqF32, dotF32}
	formats[kernels.F16] = formatImpl{deqF16, dotF16}
	formats[kernels.BF16] = formatImpl{deqBF16, dotBF16}
	formats[kernels.Q8_0] = formatImpl{rowDeq(decodeQ8_0, 32, 34), fastOr(kernels.Q8_0, dotQ8_0)}
	formats[kernels.Q4_0] = formatImpl{rowDeq(decodeQ4_0, 32, 18), fastOr(kernels.Q4_0, dotQ4_0)}
	formats[kernels.Q4_1] = formatImpl{rowDeq(decodeQ4_1, 32, 20), fastOr(kernels.Q4_1, blockDot(decodeQ4_1, 32, 20))}
	formats[kernels.Q5_0] = formatImpl{rowDeq(decodeQ5_0, 32, 22), fastOr(kernels.Q5_0, blockDot(decodeQ5_0, 32, 22))}
	formats[kernels.Q5_1] = formatImpl{rowDeq(decodeQ5_1, 32, 24), fastOr(kernels.Q5_1, blockDot(decodeQ5_1, 32, 24))}
	formats[kernels.IQ4_NL] = formatImpl{rowDeq(decodeIQ4NL, 32, 18), fastOr(kernels.IQ4_NL, dotIQ4NL)}
	formats[kernels.MXFP4] = formatImpl{rowDeq(decodeMXFP4, 32, 17), fastOr(kernels.MXFP4, blockDot(decodeMXFP4, 32, 17))}
	formats[kernels.Q2_K] = formatImpl{rowDeq(decodeQ2K, 256, 84), fastOr(kernels.Q2_K, dotQ2K)}
	formats[kernels.Q3_K] = formatImpl{rowDeq(decodeQ3K, 256, 110), fastOr(kernels.Q3_K, blockDot(decodeQ3K, 256, 110))}
	formats[kernels.Q4_K] = formatImpl{rowDeq(decodeQ4K, 256, 144), fastOr(kernels.Q4_K, dotQ4K)}
	formats[kernels.Q5_K] = formatImpl{rowDeq(decodeQ5K, 256, 176), fastOr(kernels.Q5_K, dotQ5K)}
	formats[kernels.Q6_K] = formatImpl{rowDeq(decodeQ6K, 256, 210), fastOr(kernels.Q6_K, dotQ6K)}
	formats[kernels.IQ1_S] = formatImpl{rowDeq(decodeIQ1S, 256, 50), fastOr(kernels.IQ1_S, blockDot(decodeIQ1S, 256, 50))}
	formats[kernels.IQ1_M] = formatImpl{rowDeq(decodeIQ1M, 256, 56), fastOr(kernels.IQ1_M, blockDot(decodeIQ1M, 256, 56))}
	formats[kernels.IQ2_XXS] = formatImpl{rowDeq(decodeIQ2XXS, 256, 66), fastOr(kernels.IQ2_XXS, dotIQ2XXS)}
	formats[kernels.IQ2_XS] = formatImpl{rowDeq(decodeIQ2XS, 256, 74), fastOr(kernels.IQ2_XS, blockDot(decodeIQ2XS, 256, 74))}
	formats[kernels.IQ2_S] = formatImpl{rowDeq(decodeIQ2S, 256, 82), fastOr(kernels.IQ2_S, blockDot(decodeIQ2S, 256, 82))}
	formats[kernels.IQ3_XXS] = formatImpl{rowDeq(decodeIQ3XXS, 256, 98), fastOr(kernels.IQ3_XXS, blockDot(decodeIQ3XXS, 256, 98))}
	formats[kernels.IQ3_S] = formatImpl{rowDeq(decodeIQ3S, 256, 110), fastOr(kernels.IQ3_S, blockDot(decodeIQ3S, 256, 110))}
	formats[kernels.IQ4_XS] = formatImpl{rowDeq(decodeIQ4XS, 256, 136), fastOr(kernels.IQ4_XS, dotIQ4XS)}
}

// Supported reports whether t has a CPU implementation here (every GGUF
// format of kernels.DType; not F8E4M3).
func Supported(t kernels.DType) bool {
	return t.Valid() && int(t) < len(formats) && formats[t].deq != nil
}

// DequantizeRow decodes one row of len(dst) elements stored as t. src must
// hold exactly the row's bytes (t.RowBytes(len(dst))). The values are
// bit-identical to ggml's dequantize_row_* for the same bytes.
func DequantizeRow(t kernels.DType, src []byte, dst []float32) error {
	if !Supported(t) {
		return fmt.Errorf("dequantize %s: %w", t, kernels.ErrUnsupported)
	}
	rb, err := t.RowBytes(len(dst))
	if err != nil {
		return fmt.Errorf("dequantize: %w", err)
	}
	if len(src) != rb {
		return fmt.Errorf("dequantize %s: %d bytes for a row of %d elements, need %d", t, len(src), len(dst), rb)
	}
	formats[t].deq(src, dst)
	return nil
}

// DotRow returns Σ w[i]*x[i] for the row w stored as t, with len(x)
// elements. It is the CPU GEMV inner loop: it decodes block by block on the
// stack and allocates nothing. The caller guarantees the shape (weights are
// validated at load time with kernels.Weight.Validate): row must hold
// exactly t.RowBytes(len(x)) bytes; otherwise DotRow panics, since that is
// a programming error, not bad input.
func DotRow(t kernels.DType, row []byte, x []float32) float32 {
	if !Supported(t) {
		panic(fmt.Sprintf("quant.DotRow: unsupported dtype %s", t))
	}
	rb, err := t.RowBytes(len(x))
	if err != nil || len(row) != rb {
		panic(fmt.Sprintf("quant.DotRow: %s row of %d bytes for %d elements", t, len(row), len(x)))
	}
	return formats[t].dot(row, x)
}

// DotRows writes dst[i] = DotRow(t, rows[i·rb:(i+1)·rb], x), rb =
// t.RowBytes(len(x)), for the len(dst) consecutive rows in rows: DotRow's
// checks and its way to the format's assembly loop once for the run, not a
// row at a time (they took ~8 ns of a 1024-column Q4_K row's ~66 on an
// AVX-512 core). The same sums bit for bit. Panics as DotRow does.
func DotRows(t kernels.DType, rows []byte, x, dst []float32) {
	if !Supported(t) {
		panic(fmt.Sprintf("quant.DotRows: unsupported dtype %s", t))
	}
	rb, err := t.RowBytes(len(x))
	if err != nil || len(rows) != rb*len(dst) {
		panic(fmt.Sprintf("quant.DotRows: %s rows of %d bytes for %d rows of %d elements", t, len(rows), len(dst), len(x)))
	}
	if l := rowLoopOf(t); l.f != nil && rb >= l.size {
		nb := rb / l.size
		for i := range dst {
			dst[i] = l.f(&rows[i*rb], &x[0], nb)
		}
		return
	}
	dot := formats[t].dot
	for i := range dst {
		dst[i] = dot(rows[i*rb:(i+1)*rb], x)
	}
}

// fastOr is t's row dot: its assembly loop where this CPU has one
// (rowLoopOf, kdot_amd64.go), the portable slow one elsewhere.
func fastOr(t kernels.DType, slow func([]byte, []float32) float32) func([]byte, []float32) float32 {
	return func(row []byte, x []float32) float32 {
		if s, ok := kdot(t, row, x); ok {
			return s
		}
		return slow(row, x)
	}
}

// kdot runs t's assembly row dot over row's blocks, false where there is
// none (no AVX2, another architecture) or no whole block.
func kdot(t kernels.DType, row []byte, x []float32) (float32, bool) {
	l := rowLoopOf(t)
	if l.f == nil || len(row) < l.size {
		return 0, false
	}
	return l.f(&row[0], &x[0], len(row)/l.size), true
}

// rowDeq lifts a one-block decoder to a row decoder.
func rowDeq(dec func(blk []byte, y []float32), elems, bytes int) func([]byte, []float32) {
	return func(src []byte, dst []float32) {
		for b, o := 0, 0; o < len(src); b, o = b+elems, o+bytes {
			dec(src[o:o+bytes], dst[b:b+elems])
		}
	}
}

// blockDot is the generic DotRow: decode each block into a stack buffer
// and take the dot product with the matching slice of x.
func blockDot(dec func(blk []byte, y []float32), elems, bytes int) func([]byte, []float32) float32 {
	return func(row []byte, x []float32) float32 {
		var buf [256]float32
		y := buf[:elems]
		var sum float32
		for b, o := 0, 0; o < len(row); b, o = b+elems, o+bytes {
			dec(row[o:o+bytes], y)
			sum += dot(y, x[b:b+elems])
		}
		return sum
	}
}

// dot is a 4-way unrolled float32 dot product of equal-length slices whose
// length is a multiple of 4.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// F16ToF32 converts an IEEE half-precision value exactly (kernels.F16ToF32).
func F16ToF32(h uint16) float32 { return kernels.F16ToF32(h) }

// BF16ToF32 converts a bfloat16 value exactly (kernels.BF16ToF32).
func BF16ToF32(h uint16) float32 { return kernels.BF16ToF32(h) }

func le16(b []byte) uint16   { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32   { return binary.LittleEndian.Uint32(b) }
func f16at(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

func deqF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(le32(src[4*i:]))
	}
}

// littleEndian reports the host byte order: the F32 fast path views the
// little-endian stored bytes as float32s directly.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

func dotF32(row []byte, x []float32) float32 {
	if littleEndian && len(x) > 0 {
		return dot(unsafe.Slice((*float32)(unsafe.Pointer(&row[0])), len(x)), x)
	}
	var s float32
	for i := range x {
		s += math.Float32frombits(le32(row[4*i:])) * x[i]
	}
	return s
}

// f16Table holds every fp16 value as float32 (256 KiB), as ggml keeps one:
// the F16 dot product is a table lookup per element.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return &t
}()

func deqF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = F16ToF32(le16(src[2*i:]))
	}
}

func dotF16(row []byte, x []float32) float32 {
	tab := f16Table
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		r := row[2*i : 2*i+8 : 2*i+8]
		s0 += tab[le16(r[0:])] * x[i]
		s1 += tab[le16(r[2:])] * x[i+1]
		s2 += tab[le16(r[4:])] * x[i+2]
		s3 += tab[le16(r[6:])] * x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += tab[le16(row[2*i:])] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func deqBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = BF16ToF32(le16(src[2*i:]))
	}
}

func dotBF16(row []byte, x []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		r := row[2*i : 2*i+8 : 2*i+8]
		s0 += BF16ToF32(le16(r[0:])) * x[i]
		s1 += BF16ToF32(le16(r[2:])) * x[i+1]
		s2 += BF16ToF32(le16(r[4:])) * x[i+2]
		s3 += BF16ToF32(le16(r[6:])) * x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += BF16ToF32(le16(row[2*i:])) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}
