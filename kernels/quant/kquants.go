package quant

// The K-quants: 256-element super-blocks of 16 or 8 sub-blocks, each with
// its own small scale (and min) quantized against the fp16 super-block
// scale(s).

// nibF maps a nibble to its float value.
var nibF = [16]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j from the 12
// packed bytes of Q4_K/Q5_K.
func scaleMinK4(j int, q []byte) (d, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func decodeQ2K(blk []byte, y []float32) {
	sc := blk[0:16:16]
	qs := blk[16:80:80]
	d, min := f16at(blk[80:]), f16at(blk[82:])
	y = y[:256:256]
	is, yi := 0, 0
	for n := 0; n < 2; n++ {
		q := qs[32*n : 32*n+32 : 32*n+32]
		for shift := 0; shift < 8; shift += 2 {
			for half := 0; half < 32; half += 16 {
				s := sc[is]
				is++
				dl, ml := d*float32(s&15), min*float32(s>>4)
				for l := 0; l < 16; l++ {
					y[yi] = mulSub(dl, float32((q[l+half]>>shift)&3), ml)
					yi++
				}
			}
		}
	}
}

func dotQ2K(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+84, b+256 {
		blk := row[o : o+84 : o+84]
		sc := blk[0:16:16]
		qs := blk[16:80:80]
		d, min := f16at(blk[80:]), f16at(blk[82:])
		xs := x[b : b+256 : b+256]
		var acc, accMin float32
		is, xi := 0, 0
		for n := 0; n < 2; n++ {
			q := qs[32*n : 32*n+32 : 32*n+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 32; half += 16 {
					s := sc[is]
					is++
					qq := q[half : half+16 : half+16]
					xx := xs[xi : xi+16 : xi+16]
					xi += 16
					var s0, s1, sx float32
					for l := 0; l < 16; l += 2 {
						s0 += nibF[(qq[l]>>shift)&3] * xx[l]
						s1 += nibF[(qq[l+1]>>shift)&3] * xx[l+1]
						sx += xx[l] + xx[l+1]
					}
					acc += float32(s&15) * (s0 + s1)
					accMin += float32(s>>4) * sx
				}
			}
		}
		total += d*acc - min*accMin
	}
	return total
}

// q3Scales unpacks the 16 6-bit scales of a Q3_K block, minus 32.
func q3Scales(p []byte) (s [16]int8) {
	const kmask1, kmask2 = 0x03030303, 0x0f0f0f0f
	a0, a1, tmp := le32(p[0:]), le32(p[4:]), le32(p[8:])
	aux := [4]uint32{
		a0&kmask2 | (tmp>>0&kmask1)<<4,
		a1&kmask2 | (tmp>>2&kmask1)<<4,
		(a0>>4)&kmask2 | (tmp>>4&kmask1)<<4,
		(a1>>4)&kmask2 | (tmp>>6&kmask1)<<4,
	}
	for i, a := range aux {
		for k := 0; k < 4; k++ {
			s[4*i+k] = int8(byte(a>>(8*k))) - 32
		}
	}
	return s
}

func decodeQ3K(blk []byte, y []float32) {
	hm := blk[0:32:32]
	qs := blk[32:96:96]
	scales := q3Scales(blk[96:108])
	d := f16at(blk[108:])
	y = y[:256:256]
	is, yi := 0, 0
	m := byte(1)
	for n := 0; n < 2; n++ {
		q := qs[32*n : 32*n+32 : 32*n+32]
		for shift := 0; shift < 8; shift += 2 {
			for half := 0; half < 32; half += 16 {
				dl := d * float32(scales[is])
				is++
				for l := half; l < half+16; l++ {
					v := int((q[l] >> shift) & 3)
					if hm[l]&m == 0 {
						v -= 4
					}
					y[yi] = dl * float32(v)
					yi++
				}
			}
			m <<= 1
		}
	}
}

func decodeQ4K(blk []byte, y []float32) {
	d, min := f16at(blk), f16at(blk[2:])
	sc := blk[4:16:16]
	q := blk[16:144:144]
	y = y[:256:256]
	for j := 0; j < 4; j++ {
		s1, m1 := scaleMinK4(2*j, sc)
		s2, m2 := scaleMinK4(2*j+1, sc)
		d1, mm1 := d*float32(s1), min*float32(m1)
		d2, mm2 := d*float32(s2), min*float32(m2)
		qq := q[32*j : 32*j+32 : 32*j+32]
		yy := y[64*j : 64*j+64 : 64*j+64]
		for l := 0; l < 32; l++ {
			yy[l] = mulSub(d1, float32(qq[l]&15), mm1)
			yy[l+32] = mulSub(d2, float32(qq[l]>>4), mm2)
		}
	}
}

func dotQ4K(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+144, b+256 {
		blk := row[o : o+144 : o+144]
		d, min := f16at(blk), f16at(blk[2:])
		sc := blk[4:16:16]
		q := blk[16:144:144]
		xs := x[b : b+256 : b+256]
		var acc, accMin float32
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, sc)
			s2, m2 := scaleMinK4(2*j+1, sc)
			qq := q[32*j : 32*j+32 : 32*j+32]
			xl := xs[64*j : 64*j+32 : 64*j+32]
			xh := xs[64*j+32 : 64*j+64 : 64*j+64]
			var a0, a1, b0, b1, sl, sh float32
			for l := 0; l < 32; l += 2 {
				q0, q1 := qq[l], qq[l+1]
				a0 += nibF[q0&15] * xl[l]
				a1 += nibF[q1&15] * xl[l+1]
				b0 += nibF[q0>>4] * xh[l]
				b1 += nibF[q1>>4] * xh[l+1]
				sl += xl[l] + xl[l+1]
				sh += xh[l] + xh[l+1]
			}
			acc += float32(s1)*(a0+a1) + float32(s2)*(b0+b1)
			accMin += float32(m1)*sl + float32(m2)*sh
		}
		total += d*acc - min*accMin
	}
	return total
}

func decodeQ5K(blk []byte, y []float32) {
	d, min := f16at(blk), f16at(blk[2:])
	sc := blk[4:16:16]
	qh := blk[16:48:48]
	ql := blk[48:176:176]
	y = y[:256:256]
	u1, u2 := byte(1), byte(2)
	for j := 0; j < 4; j++ {
		s1, m1 := scaleMinK4(2*j, sc)
		s2, m2 := scaleMinK4(2*j+1, sc)
		d1, mm1 := d*float32(s1), min*float32(m1)
		d2, mm2 := d*float32(s2), min*float32(m2)
		qq := ql[32*j : 32*j+32 : 32*j+32]
		yy := y[64*j : 64*j+64 : 64*j+64]
		for l := 0; l < 32; l++ {
			v1, v2 := qq[l]&15, qq[l]>>4
			if qh[l]&u1 != 0 {
				v1 += 16
			}
			if qh[l]&u2 != 0 {
				v2 += 16
			}
			yy[l] = mulSub(d1, float32(v1), mm1)
			yy[l+32] = mulSub(d2, float32(v2), mm2)
		}
		u1 <<= 2
		u2 <<= 2
	}
}

func dotQ5K(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+176, b+256 {
		blk := row[o : o+176 : o+176]
		d, min := f16at(blk), f16at(blk[2:])
		sc := blk[4:16:16]
		qh := blk[16:48:48]
		ql := blk[48:176:176]
		xs := x[b : b+256 : b+256]
		var acc, accMin float32
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, sc)
			s2, m2 := scaleMinK4(2*j+1, sc)
			qq := ql[32*j : 32*j+32 : 32*j+32]
			xl := xs[64*j : 64*j+32 : 64*j+32]
			xh := xs[64*j+32 : 64*j+64 : 64*j+64]
			sh1, sh2 := uint(2*j), uint(2*j+1)
			var a0, b0, sl, shx float32
			for l := 0; l < 32; l++ {
				h := qh[l]
				v1 := qq[l]&15 | (h>>sh1&1)<<4
				v2 := qq[l]>>4 | (h>>sh2&1)<<4
				a0 += float32(v1) * xl[l]
				b0 += float32(v2) * xh[l]
				sl += xl[l]
				shx += xh[l]
			}
			acc += float32(s1)*a0 + float32(s2)*b0
			accMin += float32(m1)*sl + float32(m2)*shx
		}
		total += d*acc - min*accMin
	}
	return total
}

func decodeQ6K(blk []byte, y []float32) {
	d := f16at(blk[208:])
	y = y[:256:256]
	for n := 0; n < 2; n++ {
		ql := blk[64*n : 64*n+64 : 64*n+64]
		qh := blk[128+32*n : 128+32*n+32 : 128+32*n+32]
		sc := blk[192+8*n : 192+8*n+8 : 192+8*n+8]
		yy := y[128*n : 128*n+128 : 128*n+128]
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(ql[l]&15|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			yy[l] = d * float32(int8(sc[is])) * float32(q1)
			yy[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
			yy[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
			yy[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
		}
	}
}

func dotQ6K(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+210, b+256 {
		blk := row[o : o+210 : o+210]
		d := f16at(blk[208:])
		var acc float32
		for n := 0; n < 2; n++ {
			ql := blk[64*n : 64*n+64 : 64*n+64]
			qh := blk[128+32*n : 128+32*n+32 : 128+32*n+32]
			sc := blk[192+8*n : 192+8*n+8 : 192+8*n+8]
			xx := x[b+128*n : b+128*n+128 : b+128*n+128]
			for h := 0; h < 2; h++ {
				var s1, s2, s3, s4 float32
				for l := 16 * h; l < 16*h+16; l++ {
					hb := qh[l]
					s1 += float32(int(ql[l]&15|(hb&3)<<4)-32) * xx[l]
					s2 += float32(int(ql[l+32]&15|(hb>>2&3)<<4)-32) * xx[l+32]
					s3 += float32(int(ql[l]>>4|(hb>>4&3)<<4)-32) * xx[l+64]
					s4 += float32(int(ql[l+32]>>4|(hb>>6&3)<<4)-32) * xx[l+96]
				}
				acc += float32(int8(sc[h]))*s1 + float32(int8(sc[h+2]))*s2 +
					float32(int8(sc[h+4]))*s3 + float32(int8(sc[h+6]))*s4
			}
		}
		total += d * acc
	}
	return total
}
