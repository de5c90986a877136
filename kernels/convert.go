package kernels

import (
	"fmt"
	"math"
)

// Scalar conversions of the stored number formats, shared by every backend
// (the CPU kernels, host-side preparation for CUDA, GGUF block decoding) so
// that there is one definition of each format.

// F16ToF32 converts an IEEE half-precision value exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	f := float32(mant) * (1.0 / (1 << 24)) // subnormal: mant·2⁻²⁴, exact
	if sign != 0 {
		return -f
	}
	return f
}

// F32ToF16 rounds x to the nearest float16, ties to even, as F16C's
// VCVTPS2PH does: overflow to infinity, subnormals kept, NaN quiet.
func F32ToF16(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	if b&0x7fffffff > 0x7f800000 {
		return sign | 0x7e00
	}
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0: // a float16 subnormal, or zero
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - exp)
		r, rem, half := man>>shift, man&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | man>>13
	if rem := man & 0x1fff; rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is right, up to infinity
	}
	return sign | uint16(r)
}

// BF16ToF32 converts a bfloat16 value exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16, ties to even (a NaN
// stays a quiet NaN).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// ToBF16 is w (F32, F16 or BF16) rounded to bfloat16 as a new weight.
func (w *Weight) ToBF16(name string) (*Weight, error) {
	n := w.Elems()
	out := &Weight{Name: name, DType: BF16, Shape: w.Shape, Data: make([]byte, 2*n)}
	for i := range n {
		var f float32
		switch w.DType {
		case F32:
			f = math.Float32frombits(uint32(w.Data[4*i]) | uint32(w.Data[4*i+1])<<8 | uint32(w.Data[4*i+2])<<16 | uint32(w.Data[4*i+3])<<24)
		case F16:
			f = F16ToF32(uint16(w.Data[2*i]) | uint16(w.Data[2*i+1])<<8)
		case BF16:
			f = BF16ToF32(uint16(w.Data[2*i]) | uint16(w.Data[2*i+1])<<8)
		default:
			return nil, fmt.Errorf("%s: %s to bf16: %w", w.Name, w.DType, ErrUnsupported)
		}
		h := F32ToBF16(f)
		out.Data[2*i], out.Data[2*i+1] = byte(h), byte(h>>8)
	}
	return out, out.Validate()
}

// FP8E4M3ToF32 converts an FP8 E4M3 byte (the "fn" variant: no infinities,
// 0x7f and 0xff are NaN) exactly.
func FP8E4M3ToF32(b byte) float32 { return fp8Table[b] }

// FP8E4M3Table is the full decode table, for kernels that index it directly.
func FP8E4M3Table() *[256]float32 { return &fp8Table }

var fp8Table = func() (t [256]float32) {
	for i := range t {
		sign := float32(1)
		if i&0x80 != 0 {
			sign = -1
		}
		e := (i >> 3) & 0xf
		m := i & 7
		switch {
		case e == 15 && m == 7:
			t[i] = float32(math.NaN())
		case e == 0:
			t[i] = sign * float32(m) / 8 * float32(math.Ldexp(1, -6))
		default:
			t[i] = sign * (1 + float32(m)/8) * float32(math.Ldexp(1, e-7))
		}
	}
	return t
}()
