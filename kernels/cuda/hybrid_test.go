package cuda

// A CPU emulation of the chunked delta rule (hybrid.cu: delta_chunk_kq,
// delta_chunk) with the kernels' index mapping: shared arrays as flat
// slices, each phase between two barriers a loop over the 256 threads, the
// forward substitution per warp with the 8-lane butterfly. It checks the
// tiling (partial last chunk, dk not a multiple of the 32-wide slices, dv
// not a multiple of the 32-column tiles, GQA) against a float64
// recurrence, no GPU needed.

import (
	"math"
	"math/rand/v2"
	"testing"
)

const emuDC, emuDKC, emuDSL = 64, 128, 32

// emuStageSlice is hybrid_chunk.cu's stageSlice (rows emuDSL apart).
func emuStageSlice(kc, qc, qkv []float32, cd, t0, n, kh, dk, kd, d0 int, fq, fk []float32) {
	for e := 0; e < emuDC*emuDSL; e++ {
		t, i := e/emuDSL, e%emuDSL
		kc[e], qc[e] = 0, 0
		if t < n && d0+i < dk {
			row := qkv[(t0+t)*cd:]
			qc[e] = row[kh*dk+d0+i] * fq[t]
			kc[e] = row[kd+kh*dk+d0+i] * fk[t]
		}
	}
}

func emuSigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// emuChunkKQ is delta_chunk_kq for all blocks.
func emuChunkKQ(kq, inv, qkv []float32, rows, kheads, vheads, dk, dv int) {
	chunks := (rows + emuDC - 1) / emuDC
	kd, cd := kheads*dk, 2*kheads*dk+vheads*dv
	qscale := float32(1 / math.Sqrt(float64(dk)))
	for kh := 0; kh < kheads; kh++ {
		for c := 0; c < chunks; c++ {
			t0, n := c*emuDC, min(emuDC, rows-c*emuDC)
			fq, fk := make([]float32, emuDC), make([]float32, emuDC)
			for t := 0; t < n; t++ {
				var pq, pk float64
				row := qkv[(t0+t)*cd:]
				for i := 0; i < dk; i++ {
					pq += float64(row[kh*dk+i]) * float64(row[kh*dk+i])
					pk += float64(row[kd+kh*dk+i]) * float64(row[kd+kh*dk+i])
				}
				fq[t] = float32(1/math.Sqrt(pq+1e-6)) * qscale
				fk[t] = float32(1 / math.Sqrt(pk+1e-6))
				inv[((t0+t)*kheads+kh)*2], inv[((t0+t)*kheads+kh)*2+1] = fq[t], fk[t]
			}
			var akk, aqk [256][4][4]float32
			kc, qc := make([]float32, emuDC*emuDSL), make([]float32, emuDC*emuDSL)
			for d0 := 0; d0 < dk; d0 += emuDSL {
				emuStageSlice(kc, qc, qkv, cd, t0, n, kh, dk, kd, d0, fq, fk)
				for tid := 0; tid < 256; tid++ {
					tx, ty := tid&15, tid>>4
					for i := 0; i < emuDSL; i++ {
						for x := 0; x < 4; x++ {
							for y := 0; y < 4; y++ {
								akk[tid][x][y] += kc[(ty+16*x)*emuDSL+i] * kc[(tx+16*y)*emuDSL+i]
								aqk[tid][x][y] += qc[(ty+16*x)*emuDSL+i] * kc[(tx+16*y)*emuDSL+i]
							}
						}
					}
				}
			}
			base := kq[(kh*chunks+c)*2*emuDC*emuDC:]
			for tid := 0; tid < 256; tid++ {
				tx, ty := tid&15, tid>>4
				for x := 0; x < 4; x++ {
					for y := 0; y < 4; y++ {
						t, s := ty+16*x, tx+16*y
						base[t*emuDC+s] = akk[tid][x][y]
						base[emuDC*emuDC+t*emuDC+s] = aqk[tid][x][y]
					}
				}
			}
		}
	}
}

// emuChunk is delta_chunk for all blocks.
func emuChunk(out, qkv, a, b, state, aLog, dtBias, kq, inv []float32, rows, kheads, vheads, dk, dv int) {
	tiles := (dv + 31) / 32
	kd, cd := kheads*dk, 2*kheads*dk+vheads*dv
	chunks := (rows + emuDC - 1) / emuDC
	for blk := 0; blk < vheads*tiles; blk++ {
		h, tile := blk/tiles, blk%tiles
		kh := h / (vheads / kheads)
		S := state[h*dk*dv:]
		ss := make([]float32, emuDKC*32)
		r := make([]float32, emuDC*emuDC)
		ws := make([]float32, emuDC*32)
		gs := make([]float64, emuDC)
		eg, dn, be, fq, fk := make([]float32, emuDC), make([]float32, emuDC), make([]float32, emuDC), make([]float32, emuDC), make([]float32, emuDC)
		kc, qc := r[:emuDC*emuDSL], r[emuDC*emuDSL:]
		for i := 0; i < dk; i++ {
			for l := 0; l < 32; l++ {
				if j := tile*32 + l; j < dv {
					ss[i*32+l] = S[i*dv+j]
				}
			}
		}
		negA := -math.Exp(float64(aLog[h]))
		for c := 0; c < chunks; c++ {
			t0, n := c*emuDC, min(emuDC, rows-c*emuDC)
			kk := kq[(kh*chunks+c)*2*emuDC*emuDC:]
			qk := kk[emuDC*emuDC:]
			for t := 0; t < emuDC; t++ {
				gs[t], be[t], fq[t], fk[t] = 0, 0, 0, 0
				if t < n {
					x := float64(a[(t0+t)*vheads+h] + dtBias[h])
					sp := x
					if x <= 20 {
						sp = math.Log1p(math.Exp(x))
					}
					gs[t] = negA * sp
					be[t] = emuSigmoid(b[(t0+t)*vheads+h])
					fq[t], fk[t] = inv[((t0+t)*kheads+kh)*2], inv[((t0+t)*kheads+kh)*2+1]
				}
			}
			var g float64
			for t := range gs {
				g += gs[t]
				gs[t] = g
			}
			for t := 0; t < emuDC; t++ {
				eg[t], dn[t] = 0, 0
				if t < n {
					eg[t] = float32(math.Exp(gs[t]))
					dn[t] = float32(math.Exp(gs[n-1] - gs[t]))
				}
			}
			var aks, aqs, o [256][8]float32
			for d0 := 0; d0 < dk; d0 += emuDSL {
				emuStageSlice(kc, qc, qkv, cd, t0, n, kh, dk, kd, d0, fq, fk)
				for tid := 0; tid < 256; tid++ {
					warp, lane := tid>>5, tid&31
					for i := 0; i < emuDSL; i++ {
						sv := ss[(d0+i)*32+lane]
						for x := 0; x < 8; x++ {
							aks[tid][x] += kc[(warp+8*x)*emuDSL+i] * sv
							aqs[tid][x] += qc[(warp+8*x)*emuDSL+i] * sv
						}
					}
				}
			}
			for tid := 0; tid < 256; tid++ {
				warp, lane := tid>>5, tid&31
				jg := tile*32 + lane
				for x := 0; x < 8; x++ {
					t := warp + 8*x
					var v float32
					if t < n && jg < dv {
						v = qkv[(t0+t)*cd+2*kd+h*dv+jg]
					}
					ws[t*32+lane] = be[t] * (v - eg[t]*aks[tid][x])
					o[tid][x] = eg[t] * aqs[tid][x]
				}
			}
			for e := range r {
				t, s := e/emuDC, e%emuDC
				r[e] = 0
				if s < t && t < n {
					r[e] = be[t] * float32(math.Exp(gs[t]-gs[s])) * kk[e]
				}
			}
			for warp := 0; warp < 8; warp++ {
				var u [32][8]float32
				for t := 0; t < emuDC; t++ {
					var part [32]float32
					for lane := 0; lane < 32; lane++ {
						p := lane & 7
						for m := 0; m < (t+7)/8; m++ {
							part[lane] += r[t*emuDC+p+8*m] * u[lane][m]
						}
					}
					for _, x := range []int{1, 2, 4} {
						var nx [32]float32
						for lane := range nx {
							nx[lane] = part[lane] + part[lane^x]
						}
						part = nx
					}
					for lane := 0; lane < 32; lane++ {
						jc, p := warp*4+lane>>3, lane&7
						if p == t&7 {
							u[lane][t>>3] = ws[t*32+jc] - part[lane]
						}
					}
				}
				for lane := 0; lane < 32; lane++ {
					jc, p := warp*4+lane>>3, lane&7
					for m := 0; m < 8; m++ {
						ws[(p+8*m)*32+jc] = u[lane][m]
					}
				}
			}
			for e := range r {
				t, s := e/emuDC, e%emuDC
				r[e] = 0
				if s <= t && t < n {
					r[e] = float32(math.Exp(gs[t]-gs[s])) * qk[e]
				}
			}
			for tid := 0; tid < 256; tid++ {
				warp, lane := tid>>5, tid&31
				jg := tile*32 + lane
				for x := 0; x < 8; x++ {
					t := warp + 8*x
					var acc float32
					for s := 0; s < emuDC; s++ {
						acc += r[t*emuDC+s] * ws[s*32+lane]
					}
					if t < n && jg < dv {
						out[((t0+t)*vheads+h)*dv+jg] = o[tid][x] + acc
					}
				}
			}
			en := eg[n-1]
			for d0 := 0; d0 < dk; d0 += emuDSL {
				for e := 0; e < emuDC*emuDSL; e++ {
					s, i := e/emuDSL, e%emuDSL
					r[e] = 0
					if s < n && d0+i < dk {
						r[e] = dn[s] * (qkv[(t0+s)*cd+kd+kh*dk+d0+i] * fk[s])
					}
				}
				for tid := 0; tid < 256; tid++ {
					warp, lane := tid>>5, tid&31
					var acc [4]float32
					for s := 0; s < emuDC; s++ {
						for m := 0; m < 4; m++ {
							acc[m] += r[s*emuDSL+4*warp+m] * ws[s*32+lane]
						}
					}
					for m := 0; m < 4; m++ {
						i := d0 + 4*warp + m
						ss[i*32+lane] = en*ss[i*32+lane] + acc[m]
					}
				}
			}
		}
		for i := 0; i < dk; i++ {
			for l := 0; l < 32; l++ {
				if j := tile*32 + l; j < dv {
					S[i*dv+j] = ss[i*32+l]
				}
			}
		}
	}
}

// refDeltaRule is the recurrence in float64.
func refDeltaRule(out []float64, qkv, a, b []float32, state []float64, aLog, dtBias []float32, rows, kheads, vheads, dk, dv int) {
	kd, cd := kheads*dk, 2*kheads*dk+vheads*dv
	for h := 0; h < vheads; h++ {
		kh := h / (vheads / kheads)
		S := state[h*dk*dv:]
		q, k := make([]float64, dk), make([]float64, dk)
		for t := 0; t < rows; t++ {
			row := qkv[t*cd:]
			var pq, pk float64
			for i := 0; i < dk; i++ {
				q[i], k[i] = float64(row[kh*dk+i]), float64(row[kd+kh*dk+i])
				pq += q[i] * q[i]
				pk += k[i] * k[i]
			}
			for i := range q {
				q[i] /= math.Sqrt(pq+1e-6) * math.Sqrt(float64(dk))
				k[i] /= math.Sqrt(pk + 1e-6)
			}
			x := float64(a[t*vheads+h] + dtBias[h])
			sp := x
			if x <= 20 {
				sp = math.Log1p(math.Exp(x))
			}
			decay := math.Exp(-math.Exp(float64(aLog[h])) * sp)
			beta := 1 / (1 + math.Exp(-float64(b[t*vheads+h])))
			for j := 0; j < dv; j++ {
				var sk float64
				for i := 0; i < dk; i++ {
					S[i*dv+j] *= decay
					sk += S[i*dv+j] * k[i]
				}
				delta := beta * (float64(row[2*kd+h*dv+j]) - sk)
				var o float64
				for i := 0; i < dk; i++ {
					S[i*dv+j] += k[i] * delta
					o += S[i*dv+j] * q[i]
				}
				out[(t*vheads+h)*dv+j] = o
			}
		}
	}
}

func nmse(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	return num / den
}

func TestDeltaChunkEmulation(t *testing.T) {
	for _, c := range []struct{ kheads, vheads, dk, dv, rows int }{
		{2, 6, 40, 48, 150},
		{1, 2, 128, 20, 65},
		{2, 2, 16, 33, 128},
	} {
		rng := rand.New(rand.NewPCG(uint64(c.rows), 7))
		randn := func(n int, scale float64) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(scale * rng.NormFloat64())
			}
			return v
		}
		cd := 2*c.kheads*c.dk + c.vheads*c.dv
		qkv := randn(c.rows*cd, 1)
		a, b := randn(c.rows*c.vheads, 1), randn(c.rows*c.vheads, 1)
		st := randn(c.vheads*c.dk*c.dv, 0.5)
		aLog := randn(c.vheads, 0.3)
		for i := range aLog {
			aLog[i] -= 2
		}
		dt := randn(c.vheads, 1)
		chunks := (c.rows + emuDC - 1) / emuDC
		kq, inv := make([]float32, c.kheads*chunks*2*emuDC*emuDC), make([]float32, c.rows*c.kheads*2)
		out := make([]float32, c.rows*c.vheads*c.dv)
		for i := range out {
			out[i] = float32(math.NaN())
		}
		emuChunkKQ(kq, inv, qkv, c.rows, c.kheads, c.vheads, c.dk, c.dv)
		gst := append([]float32(nil), st...)
		emuChunk(out, qkv, a, b, gst, aLog, dt, kq, inv, c.rows, c.kheads, c.vheads, c.dk, c.dv)
		want := make([]float64, len(out))
		wst := make([]float64, len(st))
		for i, v := range st {
			wst[i] = float64(v)
		}
		refDeltaRule(want, qkv, a, b, wst, aLog, dt, c.rows, c.kheads, c.vheads, c.dk, c.dv)
		eo, es := nmse(out, want), nmse(gst, wst)
		t.Logf("%+v: nmse out %.2e state %.2e", c, eo, es)
		if !(eo < 1e-10) || !(es < 1e-10) {
			t.Errorf("%+v: nmse out %.2e state %.2e", c, eo, es)
		}
	}
}
