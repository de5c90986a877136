package quant

// The "i-quants": 256-element super-blocks whose groups of 8 (or 4) values
// are points of a lattice codebook (grids.go) with separately stored signs,
// plus the non-linear IQ4_XS.

func decodeIQ2XXS(blk []byte, y []float32) {
	d := f16at(blk)
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		p := blk[2+8*ib : 10+8*ib : 10+8*ib]
		a1 := le32(p[4:])
		db := d * (0.5 + float32(a1>>28)) * 0.25
		for l := 0; l < 4; l++ {
			g := &iq2xxsGrid[p[l]]
			s := &signTab[ksigns[(a1>>(7*l))&127]]
			yy := y[32*ib+8*l : 32*ib+8*l+8 : 32*ib+8*l+8]
			for j := 0; j < 8; j++ {
				yy[j] = db * g[j] * s[j]
			}
		}
	}
}

func dotIQ2XXS(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+66, b+256 {
		blk := row[o : o+66 : o+66]
		d := f16at(blk)
		var acc float32
		for ib := 0; ib < 8; ib++ {
			p := blk[2+8*ib : 10+8*ib : 10+8*ib]
			a1 := le32(p[4:])
			var sb float32
			for l := 0; l < 4; l++ {
				g := &iq2xxsGrid[p[l]]
				s := &signTab[ksigns[(a1>>(7*l))&127]]
				xx := x[b+32*ib+8*l : b+32*ib+8*l+8 : b+32*ib+8*l+8]
				sb += (g[0]*s[0]*xx[0] + g[1]*s[1]*xx[1]) + (g[2]*s[2]*xx[2] + g[3]*s[3]*xx[3]) +
					(g[4]*s[4]*xx[4] + g[5]*s[5]*xx[5]) + (g[6]*s[6]*xx[6] + g[7]*s[7]*xx[7])
			}
			acc += (0.5 + float32(a1>>28)) * sb
		}
		total += d * 0.25 * acc
	}
	return total
}

func decodeIQ2XS(blk []byte, y []float32) {
	d := f16at(blk)
	scales := blk[66:74:74]
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		db := [2]float32{
			d * (0.5 + float32(scales[ib]&15)) * 0.25,
			d * (0.5 + float32(scales[ib]>>4)) * 0.25,
		}
		for l := 0; l < 4; l++ {
			q := le16(blk[2+2*(4*ib+l):])
			g := &iq2xsGrid[q&511]
			s := &signTab[ksigns[q>>9]]
			dl := db[l/2]
			yy := y[32*ib+8*l : 32*ib+8*l+8 : 32*ib+8*l+8]
			for j := 0; j < 8; j++ {
				yy[j] = dl * g[j] * s[j]
			}
		}
	}
}

func decodeIQ2S(blk []byte, y []float32) {
	d := f16at(blk)
	qs := blk[2:34:34]
	signs := blk[34:66:66]
	qh := blk[66:74:74]
	scales := blk[74:82:82]
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		db := [2]float32{
			d * (0.5 + float32(scales[ib]&15)) * 0.25,
			d * (0.5 + float32(scales[ib]>>4)) * 0.25,
		}
		for l := 0; l < 4; l++ {
			idx := int(qs[4*ib+l]) | int(qh[ib])<<(8-2*l)&0x300
			g := &iq2sGrid[idx]
			s := &signTab[signs[4*ib+l]]
			dl := db[l/2]
			yy := y[32*ib+8*l : 32*ib+8*l+8 : 32*ib+8*l+8]
			for j := 0; j < 8; j++ {
				yy[j] = dl * g[j] * s[j]
			}
		}
	}
}

func decodeIQ3XXS(blk []byte, y []float32) {
	d := f16at(blk)
	qs := blk[2:66:66]
	ss := blk[66:98:98]
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		aux := le32(ss[4*ib:])
		db := d * (0.5 + float32(aux>>28)) * 0.5
		for l := 0; l < 4; l++ {
			s := &signTab[ksigns[(aux>>(7*l))&127]]
			g1 := &iq3xxsGrid[qs[8*ib+2*l]]
			g2 := &iq3xxsGrid[qs[8*ib+2*l+1]]
			yy := y[32*ib+8*l : 32*ib+8*l+8 : 32*ib+8*l+8]
			for j := 0; j < 4; j++ {
				yy[j] = db * g1[j] * s[j]
				yy[j+4] = db * g2[j] * s[j+4]
			}
		}
	}
}

func decodeIQ3S(blk []byte, y []float32) {
	d := f16at(blk)
	qs := blk[2:66:66]
	qh := blk[66:74:74]
	signs := blk[74:106:106]
	scales := blk[106:110:110]
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		sc := scales[ib/2] & 15
		if ib%2 == 1 {
			sc = scales[ib/2] >> 4
		}
		db := d * float32(1+2*int(sc))
		h := int(qh[ib])
		for l := 0; l < 4; l++ {
			g1 := &iq3sGrid[int(qs[8*ib+2*l])|(h<<(8-2*l))&256]
			g2 := &iq3sGrid[int(qs[8*ib+2*l+1])|(h<<(7-2*l))&256]
			s := &signTab[signs[4*ib+l]]
			yy := y[32*ib+8*l : 32*ib+8*l+8 : 32*ib+8*l+8]
			for j := 0; j < 4; j++ {
				yy[j] = db * g1[j] * s[j]
				yy[j+4] = db * g2[j] * s[j+4]
			}
		}
	}
}

const iq1Delta = 0.125

func decodeIQ1S(blk []byte, y []float32) {
	d := f16at(blk)
	qs := blk[2:34:34]
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		qh := le16(blk[34+2*ib:])
		dl := d * float32(2*int(qh>>12&7)+1)
		delta := float32(iq1Delta)
		if qh&0x8000 != 0 {
			delta = -iq1Delta
		}
		for l := 0; l < 4; l++ {
			g := &iq1sGrid[int(qs[4*ib+l])|int(qh>>(3*l)&7)<<8]
			yy := y[32*ib+8*l : 32*ib+8*l+8 : 32*ib+8*l+8]
			for j := 0; j < 8; j++ {
				yy[j] = dl * (g[j] + delta)
			}
		}
	}
}

func decodeIQ1M(blk []byte, y []float32) {
	qs := blk[0:32:32]
	qh := blk[32:48:48]
	sc := [4]uint16{le16(blk[48:]), le16(blk[50:]), le16(blk[52:]), le16(blk[54:])}
	d := F16ToF32(sc[0]>>12 | (sc[1]>>8)&0x00f0 | (sc[2]>>4)&0x0f00 | sc[3]&0xf000)
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		s := sc[ib/2] >> (6 * (ib % 2))
		dl1 := d * float32(2*int(s&7)+1)
		dl2 := d * float32(2*int(s>>3&7)+1)
		h0, h1 := int(qh[2*ib]), int(qh[2*ib+1])
		idx := [4]int{
			int(qs[4*ib]) | (h0<<8)&0x700,
			int(qs[4*ib+1]) | (h0<<4)&0x700,
			int(qs[4*ib+2]) | (h1<<8)&0x700,
			int(qs[4*ib+3]) | (h1<<4)&0x700,
		}
		hb := [4]int{h0 & 0x08, h0 & 0x80, h1 & 0x08, h1 & 0x80}
		for l := 0; l < 4; l++ {
			delta := float32(iq1Delta)
			if hb[l] != 0 {
				delta = -iq1Delta
			}
			dl := dl1
			if l >= 2 {
				dl = dl2
			}
			g := &iq1sGrid[idx[l]]
			yy := y[32*ib+8*l : 32*ib+8*l+8 : 32*ib+8*l+8]
			for j := 0; j < 8; j++ {
				yy[j] = dl * (g[j] + delta)
			}
		}
	}
}

func iq4xsScale(blk []byte, ib int) int {
	sh := le16(blk[2:])
	return int(blk[4+ib/2]>>(4*(ib%2))&0xf) | int(sh>>(2*ib)&3)<<4
}

func decodeIQ4XS(blk []byte, y []float32) {
	d := f16at(blk)
	y = y[:256:256]
	for ib := 0; ib < 8; ib++ {
		dl := d * float32(iq4xsScale(blk, ib)-32)
		q := blk[8+16*ib : 24+16*ib : 24+16*ib]
		yy := y[32*ib : 32*ib+32 : 32*ib+32]
		for j := 0; j < 16; j++ {
			yy[j] = dl * kvaluesIQ4NL[q[j]&15]
			yy[j+16] = dl * kvaluesIQ4NL[q[j]>>4]
		}
	}
}

func dotIQ4XS(row []byte, x []float32) float32 {
	var total float32
	for o, b := 0, 0; o < len(row); o, b = o+136, b+256 {
		blk := row[o : o+136 : o+136]
		var acc float32
		for ib := 0; ib < 8; ib++ {
			q := blk[8+16*ib : 24+16*ib : 24+16*ib]
			xx := x[b+32*ib : b+32*ib+32 : b+32*ib+32]
			var s0, s1, s2, s3 float32
			for j := 0; j < 16; j += 2 {
				s0 += kvaluesIQ4NL[q[j]&15] * xx[j]
				s1 += kvaluesIQ4NL[q[j]>>4] * xx[j+16]
				s2 += kvaluesIQ4NL[q[j+1]&15] * xx[j+1]
				s3 += kvaluesIQ4NL[q[j+1]>>4] * xx[j+17]
			}
			acc += float32(iq4xsScale(blk, ib)-32) * ((s0 + s1) + (s2 + s3))
		}
		total += f16at(blk) * acc
	}
	return total
}
