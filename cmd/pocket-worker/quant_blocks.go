package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/pocketllm/pocketllm/kernels"
)

// f16Fields lists the byte offsets of the fp16 scale fields of a block, so
// that random block bytes can be made valid (finite, sized scales).
var f16Fields = map[kernels.DType][]int{
	kernels.Q8_0: {0}, kernels.Q4_0: {0}, kernels.Q4_1: {0, 2}, kernels.Q5_0: {0}, kernels.Q5_1: {0, 2},
	kernels.Q2_K: {80, 82}, kernels.Q3_K: {108}, kernels.Q4_K: {0, 2}, kernels.Q5_K: {0, 2}, kernels.Q6_K: {208},
	kernels.IQ4_NL: {0}, kernels.IQ4_XS: {0},
	kernels.IQ1_S: {0}, kernels.IQ2_XXS: {0}, kernels.IQ2_XS: {0}, kernels.IQ2_S: {0}, kernels.IQ3_XXS: {0},
	kernels.IQ3_S: {0},
}

// randomBlocks returns rows×cols elements of dt as random but valid blocks:
// random quant bits and sub-block scales, fp16 scales of magnitude about
// scale (MXFP4: an E8M0 exponent near 2^-6). Every bit pattern of the
// other fields is a valid block, lattice indices and signs included.
func randomBlocks(rng *rand.Rand, dt kernels.DType, rows, cols int, scale float64) []byte {
	rb, err := dt.RowBytes(cols)
	if err != nil {
		panic(err)
	}
	b := make([]byte, rows*rb)
	var t [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(t[:], rng.Uint64())
		copy(b[i:], t[:])
	}
	bb := dt.BlockBytes()
	for o := 0; o < len(b); o += bb {
		blk := b[o : o+bb]
		switch dt {
		case kernels.MXFP4:
			blk[0] = byte(118 + rng.IntN(6))
			continue
		case kernels.IQ1_M:
			// d is spread over the top nibbles of the four 16-bit
			// sub-scale words at byte 48.
			h := f32ToF16bits(float32(scale * (0.5 + rng.Float64())))
			for i := 0; i < 4; i++ {
				w := binary.LittleEndian.Uint16(blk[48+2*i:])
				binary.LittleEndian.PutUint16(blk[48+2*i:], w&0x0fff|(h>>(4*i)&15)<<12)
			}
			continue
		}
		for _, off := range f16Fields[dt] {
			binary.LittleEndian.PutUint16(blk[off:], f32ToF16bits(float32(scale*(0.5+rng.Float64()))))
		}
	}
	return b
}

// f32ToF16bits rounds to the nearest fp16 (normal range; tiny values flush).
func f32ToF16bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00
	}
	h := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}
