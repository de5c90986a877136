package cpu

import (
	"math"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

var _ kernels.MLAPrefillOps = (*Backend)(nil)

// ReadKV implements kernels.MLAPrefillOps.
func (b *Backend) ReadKV(dst kernels.Buf, kp kernels.KVPool, layer int, table []int32, n, lo, width int) {
	p := kp.(*kvPool)
	s := p.spec
	kw := s.KVHeads * s.HeadDimK
	out, kl := f32(dst), p.k[layer]
	for pos := range n {
		slot := int(table[pos/s.BlockSize])*s.BlockSize + pos%s.BlockSize
		copy(out[pos*width:(pos+1)*width], kl[slot*kw+lo:slot*kw+lo+width])
	}
}

// MLAExpandedAttention implements kernels.MLAPrefillOps: exact softmax
// attention, the query and key dot products taken in two parts (nope,
// rope) as they are stored; under DSA over each row's selected positions
// (MLAttention's selection).
func (b *Backend) MLAExpandedAttention(dst, q, qpe, kv, kpe kernels.Buf, a kernels.MLAExpanded) bool {
	dn, dr, dv := a.Dn, a.Dr, a.Dv
	qk, kvw := dn+dr, a.HN*(dn+dv)
	qs, qps, kvs, kps, out := f32(q), f32(qpe), f32(kv), f32(kpe), f32(dst)
	// sel[r] lists the positions row r attends to; nil means all visible.
	sel := make([][]int32, a.Rows)
	if a.Mask != nil {
		words, mask := kernels.MaskWords(a.Start+a.Rows), f32(a.Mask)
		for r := range sel {
			sel[r] = []int32{}
			for t := range a.Start + r + 1 {
				if math.Float32bits(mask[r*words+t/32])>>(t%32)&1 != 0 {
					sel[r] = append(sel[r], int32(t))
				}
			}
		}
	}
	// A task is a head and a tile of up to mlaPrefillTile rows. Rows that
	// see every position take the head's keys and values a block of
	// positions at a time for the whole tile (dotRows, axpyRows: a
	// block's rows stay in cache for all of the tile's rows); rows with
	// selected positions take them one by one. Either way each row's
	// arithmetic is that of a dotF32 for each part of a score, their sum
	// scaled, vmath.ExpShifted and an axpy a position, in position order.
	tiles := (a.Rows + mlaPrefillTile - 1) / mlaPrefillTile
	b.parallel(tiles*a.HN, 1, func(lo, hi int) {
		ctxMax := a.Start + a.Rows
		scores := make([]float32, min(mlaPrefillTile, a.Rows)*ctxMax)
		rope := make([]float32, mlaBlock*4)
		for task := lo; task < hi; task++ {
			j, tile := task%a.HN, task/a.HN
			h := a.H0 + j
			r0, r1 := tile*mlaPrefillTile, min(a.Rows, (tile+1)*mlaPrefillTile)
			qn := func(r int) []float32 { return qs[(r*a.Heads+h)*qk : (r*a.Heads+h)*qk+dn] }
			qr := func(r int) []float32 { return qps[(r*a.Heads+h)*dr : (r*a.Heads+h+1)*dr] }
			o := func(r int) []float32 { return out[(r*a.Heads+h)*dv : (r*a.Heads+h+1)*dv] }
			sc := func(r, n int) []float32 { return scores[(r-r0)*ctxMax : (r-r0)*ctxMax+n] }
			kBase, vBase := j*(dn+dv), j*(dn+dv)+dn
			// Dense rows: the scores a block of positions at a time.
			ctx := a.Start + r1
			const bs = mlaBlock * 4
			for p0 := 0; p0 < ctx; p0 += bs {
				for r := r0; r < r1; r++ {
					n := a.Start + r + 1
					if sel[r] != nil || p0 >= n {
						continue
					}
					m := min(bs, n-p0)
					blk, rp := sc(r, n)[p0:p0+m], rope[:m]
					dotRows(qn(r), kvs[p0*kvw+kBase:], kvw, blk, 1)
					dotRows(qr(r), kps[p0*dr:], dr, rp, 1)
					for i := range blk {
						blk[i] = (blk[i] + rp[i]) * a.Scale
					}
				}
			}
			for r := r0; r < r1; r++ {
				positions := sel[r]
				if positions == nil {
					hs := sc(r, a.Start+r+1)
					vmath.Scale(hs, 1/vmath.ExpShifted(hs, vmath.Max(hs))) // the weights, as axpy takes them
					clear(o(r))
					continue
				}
				// Selected positions (DSA), one at a time.
				hs := sc(r, len(positions))
				for i, t := range positions {
					k := kvs[int(t)*kvw+kBase:]
					hs[i] = (dotF32(qn(r), k[:dn]) + dotF32(qr(r), kps[int(t)*dr:(int(t)+1)*dr])) * a.Scale
				}
				vmath.Scale(hs, 1/vmath.ExpShifted(hs, vmath.Max(hs)))
				or := o(r)
				clear(or)
				for i, t := range positions {
					axpy(or, kvs[int(t)*kvw+vBase:int(t)*kvw+vBase+dv], hs[i])
				}
			}
			for p0 := 0; p0 < ctx; p0 += bs {
				for r := r0; r < r1; r++ {
					n := a.Start + r + 1
					if sel[r] != nil || p0 >= n {
						continue
					}
					axpyRows(o(r), kvs[p0*kvw+vBase:], kvw, sc(r, n)[p0:min(n, p0+bs)])
				}
			}
		}
	})
	return true
}

// mlaPrefillTile is how many rows an expanded-attention task takes: at
// 4K positions their scores are 256 KB.
const mlaPrefillTile = 16

// DSAMask implements kernels.MLAPrefillOps with MLAttention's selection.
func (b *Backend) DSAMask(mask kernels.Buf, d *kernels.DSA, kp kernels.KVPool, layer int, seq kernels.AttnSeq, rows int) bool {
	p := kp.(*kvPool)
	s := p.spec
	words, out := kernels.MaskWords(seq.Start+rows), f32(mask)
	slot := func(pos int) int { return int(seq.Table[pos/s.BlockSize])*s.BlockSize + pos%s.BlockSize }
	b.parallel(rows, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			bits := make([]uint32, words)
			positions := b.dsaSelect(p, layer, seq, rows, r, d, slot)
			if positions == nil {
				for t := range seq.Start + r + 1 {
					bits[t/32] |= 1 << (t % 32)
				}
			}
			for _, t := range positions {
				bits[t/32] |= 1 << (t % 32)
			}
			for w, v := range bits {
				out[r*words+w] = math.Float32frombits(v)
			}
		}
	})
	return true
}

// MLAExpandSpeedup implements kernels.MLAPrefillOps: both forms are the
// same dot loops here.
func (b *Backend) MLAExpandSpeedup() float64 { return 1 }

var _ kernels.HeadMatMul = (*Backend)(nil)

// HeadMatMulTakes implements kernels.HeadMatMul: every format MatMul reads.
func (b *Backend) HeadMatMulTakes(w *kernels.Weight) bool { return len(w.Shape) == 2 }

// MatMulHeads implements kernels.HeadMatMul with MatMul's row arithmetic
// (one row: the fused dot, except FP8; more: the row decoded to float32),
// so a head's results equal a MatMul of that head's matrix.
func (b *Backend) MatMulHeads(dst, x kernels.Buf, w kernels.Tensor, a kernels.HeadProduct) {
	t := w.(*tensor)
	d, xs := f32(dst), f32(x)
	fused := a.Rows == 1 && t.w.DType != kernels.F8E4M3
	// An FP8 row of a one-row pass dotted as it widens, where the CPU
	// allows (fp8RowDot: the decoded row's dotF32 bit for bit).
	fp8 := a.Rows == 1 && t.fp8Fused()
	b.parallel(a.Heads*a.Out, 16, func(lo, hi int) {
		tmp := make([]float32, a.In)
		for j := lo; j < hi; j++ {
			h, o := j/a.Out, j%a.Out
			if fp8 {
				d[h*a.DstHead+o] = t.fp8RowDot(j, xs[h*a.XHead:][:a.In])
				continue
			}
			if !fused {
				t.rowTo(j, tmp)
			}
			for r := range a.Rows {
				xv := xs[r*a.XRow+h*a.XHead:][:a.In]
				if fused {
					d[r*a.DstRow+h*a.DstHead+o] = t.dot(j, xv)
				} else {
					d[r*a.DstRow+h*a.DstHead+o] = dotF32(tmp, xv)
				}
			}
		}
	})
}
