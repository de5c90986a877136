package cpu

import (
	"math"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
)

var _ kernels.MLAOps = (*Backend)(nil)

// MLAttention implements kernels.MLAOps: exact softmax attention over the
// shared latent rows, one (query row, head) pair per task. With DSA, each
// row's positions are chosen first (one task per row), then attended.
func (b *Backend) MLAttention(dst, q kernels.Buf, kp kernels.KVPool, layer int, seq kernels.AttnSeq, rows, heads, dv int, scale float32, dsa *kernels.DSA) {
	p := kp.(*kvPool)
	s := p.spec
	dk := s.HeadDimK
	qs, out, kl := f32(q), f32(dst), p.k[layer]
	slot := func(pos int) int { return int(seq.Table[pos/s.BlockSize])*s.BlockSize + pos%s.BlockSize }
	// sel[r] lists the positions row r attends to; nil means all visible.
	sel := make([][]int32, rows)
	if dsa != nil {
		b.parallel(rows, 1, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				sel[r] = b.dsaSelect(p, layer, seq, r, dsa, slot)
			}
		})
	}
	b.parallel(rows*heads, 1, func(lo, hi int) {
		scores := make([]float32, seq.Start+rows)
		var all []int32
		for task := lo; task < hi; task++ {
			r, h := task/heads, task%heads
			positions := sel[r]
			if positions == nil {
				all = all[:0]
				for pos := range seq.Start + r + 1 {
					all = append(all, int32(pos))
				}
				positions = all
			}
			qv := qs[(r*heads+h)*dk : (r*heads+h+1)*dk]
			maxS := float32(math.Inf(-1))
			for i, pos := range positions {
				sl := slot(int(pos))
				sc := dotF32(qv, kl[sl*dk:(sl+1)*dk]) * scale
				scores[i] = sc
				maxS = max(maxS, sc)
			}
			var sum float32
			for i := range positions {
				e := float32(math.Exp(float64(scores[i] - maxS)))
				scores[i] = e
				sum += e
			}
			o := out[(r*heads+h)*dv : (r*heads+h+1)*dv]
			clear(o)
			inv := 1 / sum
			for i, pos := range positions {
				sl := slot(int(pos))
				vv := kl[sl*dk : sl*dk+dv]
				w := scores[i] * inv
				for j := range o {
					o[j] += w * vv[j]
				}
			}
		}
	})
}

// dsaSelect returns the positions query row r attends to under DeepSeek
// sparse attention, in ascending order, or nil when every visible
// position is selected.
func (b *Backend) dsaSelect(p *kvPool, layer int, seq kernels.AttnSeq, r int, d *kernels.DSA, slot func(int) int) []int32 {
	n := seq.Start + r + 1
	if n <= d.TopK {
		return nil
	}
	qs, ws, keys := f32(d.Q), f32(d.W), p.v[layer]
	dim := d.Dim
	q := qs[r*d.Heads*dim : (r+1)*d.Heads*dim]
	w := ws[r*d.Heads : (r+1)*d.Heads]
	type cand struct {
		pos   int32
		score float32
	}
	cands := make([]cand, n)
	for t := range n {
		sl := slot(t)
		k := keys[sl*dim : (sl+1)*dim]
		var sc float32
		for h := range d.Heads {
			if x := dotF32(q[h*dim:(h+1)*dim], k) * d.Scale; x > 0 {
				sc += w[h] * x
			}
		}
		cands[t] = cand{int32(t), sc}
	}
	// Stable: equal scores keep position order, so ties go to the earlier one.
	slices.SortStableFunc(cands, func(a, b cand) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	out := make([]int32, d.TopK)
	for i := range out {
		out[i] = cands[i].pos
	}
	slices.Sort(out)
	return out
}
