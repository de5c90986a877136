package cpu

import (
	"math"

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
// attention, one (query row, head) pair per task, the query and key dot
// products taken in two parts (nope, rope) as they are stored; under DSA
// over each row's selected positions (MLAttention's selection).
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
	b.parallel(a.Rows*a.HN, 1, func(lo, hi int) {
		scores := make([]float32, a.Start+a.Rows)
		var all []int32
		for task := lo; task < hi; task++ {
			r, j := task/a.HN, task%a.HN
			h := a.H0 + j
			qn := qs[(r*a.Heads+h)*qk : (r*a.Heads+h)*qk+dn]
			qr := qps[(r*a.Heads+h)*dr : (r*a.Heads+h+1)*dr]
			positions := sel[r]
			if positions == nil {
				all = firstPositions(all, a.Start+r+1)
				positions = all
			}
			maxS := float32(math.Inf(-1))
			for i, t := range positions {
				k := kvs[int(t)*kvw+j*(dn+dv):]
				sc := (dotF32(qn, k[:dn]) + dotF32(qr, kps[int(t)*dr:(int(t)+1)*dr])) * a.Scale
				scores[i] = sc
				maxS = max(maxS, sc)
			}
			sum := expShifted(scores[:len(positions)], maxS)
			o := out[(r*a.Heads+h)*dv : (r*a.Heads+h+1)*dv]
			clear(o)
			inv := 1 / sum
			for i, t := range positions {
				v := kvs[int(t)*kvw+j*(dn+dv)+dn : int(t)*kvw+j*(dn+dv)+dn+dv]
				axpy(o, v, scores[i]*inv)
			}
		}
	})
	return true
}

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
	b.parallel(a.Heads*a.Out, 16, func(lo, hi int) {
		tmp := make([]float32, a.In)
		for j := lo; j < hi; j++ {
			h, o := j/a.Out, j%a.Out
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
