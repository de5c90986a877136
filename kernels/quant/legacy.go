package quant

import "math"

// The 32-element formats: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4.
// Each block starts with its scale(s); nibble formats store element j in the
// low nibble of byte j and element j+16 in the high nibble.

// kvaluesIQ4NL is the non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
var kvaluesIQ4NL = [16]float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// kvaluesMXFP4 holds the FP4 E2M1 values doubled (the block scale is
// halved to compensate, as ggml does).
var kvaluesMXFP4 = [16]float32{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// nib4 maps a nibble to its value minus 8 (Q4_0).
var nib4 = [16]float32{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}

// mulAdd returns a*b+c rounded after each operation, as ggml's C does
// (an explicit conversion forbids fusing into an FMA).
func mulAdd(a, b, c float32) float32 { return float32(a*b) + c }

// mulSub returns a*b-c without fusion.
func mulSub(a, b, c float32) float32 { return float32(a*b) - c }

func decodeQ8_0(blk []byte, y []float32) {
	d := f16at(blk)
	q := blk[2:34:34]
	y = y[:32:32]
	for j := range 32 {
		y[j] = float32(int8(q[j])) * d
	}
}

func dotQ8_0(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+34, b+32 {
		blk := row[o : o+34 : o+34]
		q := blk[2:34:34]
		xs := x[b : b+32 : b+32]
		var s0, s1, s2, s3 float32
		for j := 0; j < 32; j += 4 {
			s0 += float32(int8(q[j])) * xs[j]
			s1 += float32(int8(q[j+1])) * xs[j+1]
			s2 += float32(int8(q[j+2])) * xs[j+2]
			s3 += float32(int8(q[j+3])) * xs[j+3]
		}
		total += f16at(blk) * ((s0 + s1) + (s2 + s3))
	}
	return total
}

func decodeQ4_0(blk []byte, y []float32) {
	d := f16at(blk)
	q := blk[2:18:18]
	y = y[:32:32]
	for j := range 16 {
		y[j] = float32(int(q[j]&15)-8) * d
		y[j+16] = float32(int(q[j]>>4)-8) * d
	}
}

func dotQ4_0(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+18, b+32 {
		blk := row[o : o+18 : o+18]
		q := blk[2:18:18]
		xs := x[b : b+32 : b+32]
		var s0, s1, s2, s3 float32
		for j := 0; j < 16; j += 2 {
			s0 += nib4[q[j]&15] * xs[j]
			s1 += nib4[q[j]>>4] * xs[j+16]
			s2 += nib4[q[j+1]&15] * xs[j+1]
			s3 += nib4[q[j+1]>>4] * xs[j+17]
		}
		total += f16at(blk) * ((s0 + s1) + (s2 + s3))
	}
	return total
}

func decodeQ4_1(blk []byte, y []float32) {
	d, m := f16at(blk), f16at(blk[2:])
	q := blk[4:20:20]
	y = y[:32:32]
	for j := range 16 {
		y[j] = mulAdd(float32(q[j]&15), d, m)
		y[j+16] = mulAdd(float32(q[j]>>4), d, m)
	}
}

func decodeQ5_0(blk []byte, y []float32) {
	d := f16at(blk)
	qh := le32(blk[2:])
	q := blk[6:22:22]
	y = y[:32:32]
	for j := range 16 {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(int(q[j]&15|h0)-16) * d
		y[j+16] = float32(int(q[j]>>4|h1)-16) * d
	}
}

func decodeQ5_1(blk []byte, y []float32) {
	d, m := f16at(blk), f16at(blk[2:])
	qh := le32(blk[4:])
	q := blk[8:24:24]
	y = y[:32:32]
	for j := range 16 {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = mulAdd(float32(q[j]&15|h0), d, m)
		y[j+16] = mulAdd(float32(q[j]>>4|h1), d, m)
	}
}

func decodeIQ4NL(blk []byte, y []float32) {
	d := f16at(blk)
	q := blk[2:18:18]
	y = y[:32:32]
	for j := range 16 {
		y[j] = d * kvaluesIQ4NL[q[j]&15]
		y[j+16] = d * kvaluesIQ4NL[q[j]>>4]
	}
}

func dotIQ4NL(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+18, b+32 {
		blk := row[o : o+18 : o+18]
		q := blk[2:18:18]
		xs := x[b : b+32 : b+32]
		var s0, s1, s2, s3 float32
		for j := 0; j < 16; j += 2 {
			s0 += kvaluesIQ4NL[q[j]&15] * xs[j]
			s1 += kvaluesIQ4NL[q[j]>>4] * xs[j+16]
			s2 += kvaluesIQ4NL[q[j+1]&15] * xs[j+1]
			s3 += kvaluesIQ4NL[q[j+1]>>4] * xs[j+17]
		}
		total += f16at(blk) * ((s0 + s1) + (s2 + s3))
	}
	return total
}

// e8m0Half returns 2^(e-128): half the E8M0 scale, matching the doubled
// FP4 codebook.
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

func decodeMXFP4(blk []byte, y []float32) {
	d := e8m0Half(blk[0])
	q := blk[1:17:17]
	y = y[:32:32]
	for j := range 16 {
		y[j] = kvaluesMXFP4[q[j]&15] * d
		y[j+16] = kvaluesMXFP4[q[j]>>4] * d
	}
}
