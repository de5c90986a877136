package quant

import (
	"encoding/binary"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// refElem is a deliberately naive reference dequantizer: it computes the
// single element i of a row from the format's definition (ggml-common.h
// layouts, ggml-quants.c formulas), addressing bits element by element
// instead of the loop structure the package uses. Float operations are in
// ggml's order, so the results must agree bit for bit.
func refElem(t kernels.DType, row []byte, i int) float32 {
	u16 := func(b []byte, off int) uint16 { return binary.LittleEndian.Uint16(b[off:]) }
	h := func(b []byte, off int) float32 { return refHalf(u16(b, off)) }
	switch t {
	case kernels.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
	case kernels.F16:
		return refHalf(u16(row, 2*i))
	case kernels.BF16:
		return math.Float32frombits(uint32(u16(row, 2*i)) << 16)
	}
	be, bb := t.BlockElems(), t.BlockBytes()
	b := row[i/be*bb : (i/be+1)*bb]
	i %= be
	// nibble of element i in a 32-element nibble array at off: low nibbles
	// hold elements 0..15, high nibbles 16..31.
	nib := func(off, i int) int {
		v := b[off+i%16]
		if i >= 16 {
			return int(v >> 4)
		}
		return int(v & 15)
	}
	bit := func(off, k int) int { return int(b[off+k/8]>>(k%8)) & 1 }
	switch t {
	case kernels.Q8_0:
		return float32(int8(b[2+i])) * h(b, 0)
	case kernels.Q4_0:
		return float32(nib(2, i)-8) * h(b, 0)
	case kernels.Q4_1:
		return float32(float32(nib(4, i))*h(b, 0)) + h(b, 2)
	case kernels.Q5_0:
		return float32(nib(6, i)|bit(2, i)<<4-16) * h(b, 0)
	case kernels.Q5_1:
		return float32(float32(nib(8, i)|bit(4, i)<<4)*h(b, 0)) + h(b, 2)
	case kernels.IQ4_NL:
		return h(b, 0) * refIQ4[nib(2, i)]
	case kernels.MXFP4:
		return refFP4[nib(1, i)] * float32(math.Ldexp(1, int(b[0])-128))
	case kernels.Q2_K:
		n, r := i/128, i%128
		j, l := r/32, r%32
		q := int(b[16+32*n+l]>>(2*j)) & 3
		sc := b[8*n+2*j+l/16]
		return float32(h(b, 80)*float32(sc&15)*float32(q)) - h(b, 82)*float32(sc>>4)
	case kernels.Q3_K:
		n, r := i/128, i%128
		j, l := r/32, r%32
		q := int(b[32+32*n+l]>>(2*j)) & 3
		if bit(0, 8*l+4*n+j) == 0 {
			q -= 4
		}
		k := 8*n + 2*j + l/16
		lo := int(b[96+k%8] & 15)
		if k >= 8 {
			lo = int(b[96+k%8] >> 4)
		}
		hi := int(b[96+8+k%4]>>(2*(k/4))) & 3
		return h(b, 108) * float32(lo|hi<<4-32) * float32(q)
	case kernels.Q4_K, kernels.Q5_K:
		j, r := i/64, i%64
		l, hi := r%32, r/32
		sub := 2*j + hi
		sc, m := refScaleMin(b[4:16], sub)
		qoff := 16
		if t == kernels.Q5_K {
			qoff = 48
		}
		q := int(b[qoff+32*j+l] & 15)
		if hi == 1 {
			q = int(b[qoff+32*j+l] >> 4)
		}
		if t == kernels.Q5_K {
			q |= bit(16, 8*l+sub) << 4
		}
		return float32(h(b, 0)*float32(sc)*float32(q)) - h(b, 2)*float32(m)
	case kernels.Q6_K:
		n, r := i/128, i%128
		quarter, l := r/32, r%32
		lb := b[64*n+l+32*(quarter%2)]
		q := int(lb & 15)
		if quarter >= 2 {
			q = int(lb >> 4)
		}
		q |= int(b[128+32*n+l]>>(2*quarter)) & 3 << 4
		sc := int8(b[192+8*n+l/16+2*quarter])
		return h(b, 208) * float32(sc) * float32(q-32)
	case kernels.IQ2_XXS:
		ib, l, j := i/32, i%32/8, i%8
		a1 := binary.LittleEndian.Uint32(b[2+8*ib+4:])
		db := h(b, 0) * (0.5 + float32(a1>>28)) * 0.25
		g := refLevel2(kgrid2bit256[b[2+8*ib+l]], j, &iq2Levels)
		return db * g * refSign7(int(a1>>(7*l))&127, j)
	case kernels.IQ2_XS:
		ib, l, j := i/32, i%32/8, i%8
		q := u16(b, 2+2*(4*ib+l))
		s := int(b[66+ib]>>(4*(l/2))) & 15
		db := h(b, 0) * (0.5 + float32(s)) * 0.25
		return db * refLevel2(kgrid2bit512[q&511], j, &iq2Levels) * refSign7(int(q>>9), j)
	case kernels.IQ2_S:
		ib, l, j := i/32, i%32/8, i%8
		idx := int(b[2+4*ib+l]) | (int(b[66+ib])>>(2*l)&3)<<8
		s := int(b[74+ib]>>(4*(l/2))) & 15
		db := h(b, 0) * (0.5 + float32(s)) * 0.25
		return db * refLevel2(kgrid2bit1024[idx], j, &iq2Levels) * refSignBit(b[34+4*ib+l], j)
	case kernels.IQ3_XXS:
		ib, l, j := i/32, i%32/8, i%8
		aux := binary.LittleEndian.Uint32(b[66+4*ib:])
		db := h(b, 0) * (0.5 + float32(aux>>28)) * 0.5
		g := refLevel3(kgrid3bit256[b[2+8*ib+2*l+j/4]], j%4, &iq3xxsLvls)
		return db * g * refSign7(int(aux>>(7*l))&127, j)
	case kernels.IQ3_S:
		ib, l, j := i/32, i%32/8, i%8
		k := 2*l + j/4 // which of the 8 grid bytes of this 32-group
		idx := int(b[2+8*ib+k]) | bit(66+ib, k)<<8
		s := int(b[106+ib/2]>>(4*(ib%2))) & 15
		db := h(b, 0) * float32(1+2*s)
		return db * refLevel3(kgrid3bit512[idx], j%4, &iq3sLevels) * refSignBit(b[74+4*ib+l], j)
	case kernels.IQ1_S:
		ib, l, j := i/32, i%32/8, i%8
		qh := u16(b, 34+2*ib)
		idx := int(b[2+4*ib+l]) | int(qh>>(3*l)&7)<<8
		dl := h(b, 0) * float32(2*int(qh>>12&7)+1)
		delta := float32(0.125)
		if qh&0x8000 != 0 {
			delta = -0.125
		}
		return dl * (refLevel2(kgrid1bit2048[idx], j, &iq1Levels) + delta)
	case kernels.IQ1_M:
		ib, l, j := i/32, i%32/8, i%8
		var hb uint16
		for k := 0; k < 4; k++ {
			hb |= (u16(b, 48+2*k) >> 12) << (4 * k)
		}
		d := refHalf(hb)
		qh := int(b[32+2*ib+l/2]) >> (4 * (l % 2)) // this group's nibble
		idx := int(b[4*ib+l]) | (qh&7)<<8
		scw := u16(b, 48+2*(ib/2))
		s := int(scw>>(6*(ib%2)+3*(l/2))) & 7
		delta := float32(0.125)
		if qh&8 != 0 {
			delta = -0.125
		}
		return d * float32(2*s+1) * (refLevel2(kgrid1bit2048[idx], j, &iq1Levels) + delta)
	case kernels.IQ4_XS:
		ib, r := i/32, i%32
		ls := int(b[4+ib/2]>>(4*(ib%2)))&15 | int(u16(b, 2)>>(2*ib)&3)<<4
		q := b[8+16*ib+r%16]
		v := q & 15
		if r >= 16 {
			v = q >> 4
		}
		return h(b, 0) * float32(ls-32) * refIQ4[v]
	}
	panic("refElem: no reference for " + t.String())
}

var (
	refIQ4 = [16]float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	refFP4 = [16]float32{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
)

// refHalf converts fp16 through float64 arithmetic.
func refHalf(x uint16) float32 {
	e := int(x>>10) & 31
	m := float64(x & 1023)
	var v float64
	switch e {
	case 31:
		v = math.Inf(1)
		if m != 0 {
			v = math.NaN()
		}
	case 0:
		v = math.Ldexp(m, -24)
	default:
		v = math.Ldexp(1+m/1024, e-15)
	}
	if x&0x8000 != 0 {
		v = -v
	}
	return float32(v)
}

func refScaleMin(s []byte, j int) (sc, m int) {
	if j < 4 {
		return int(s[j] & 63), int(s[j+4] & 63)
	}
	return int(s[j+4]&15) | int(s[j-4]>>6)<<4, int(s[j+4]>>4) | int(s[j]>>6)<<4
}

func refLevel2(g uint16, k int, lv *[4]float32) float32 { return lv[g>>(2*k)&3] }
func refLevel3(g uint16, k int, lv *[8]float32) float32 { return lv[g>>(3*k)&7] }

func refSignBit(s byte, j int) float32 {
	if s>>j&1 != 0 {
		return -1
	}
	return 1
}

// refSign7 expands 7 stored sign bits: the 8th makes the parity even.
func refSign7(s, j int) float32 {
	if j == 7 {
		p := 0
		for k := 0; k < 7; k++ {
			p ^= s >> k & 1
		}
		if p == 1 {
			return -1
		}
		return 1
	}
	return refSignBit(byte(s), j)
}
