package cpu

import (
	"math"
	"math/bits"
	"slices"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

var _ kernels.MLAOps = (*Backend)(nil)

// MLAttention implements kernels.MLAOps: exact softmax attention over the
// shared latent rows. With DSA, each row's positions are chosen first
// (one task per row), then attended.
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
				sel[r] = b.dsaSelect(p, layer, seq, rows, r, dsa, slot)
			}
		})
	}
	// A task is a row and a run of up to mlaTileHeads heads (fewer where
	// the tasks would be fewer than the workers): all heads read the same
	// latent rows, so the task walks them a block of positions at a time
	// and applies each block to all its heads while it is in cache. Each
	// head's arithmetic is what it was alone, in the same order.
	parts := max((heads+mlaTileHeads-1)/mlaTileHeads, min(heads, (b.workers+rows-1)/rows))
	per := (heads + parts - 1) / parts
	parts = (heads + per - 1) / per
	b.parallel(rows*parts, 1, func(lo, hi int) {
		scores := make([]float32, per*(seq.Start+rows))
		var all []int32
		for task := lo; task < hi; task++ {
			r, h0 := task/parts, (task%parts)*per
			h1 := min(heads, h0+per)
			positions := sel[r]
			if positions == nil {
				all = firstPositions(all, seq.Start+r+1)
				positions = all
			}
			np := len(positions)
			sc := func(h int) []float32 { return scores[(h-h0)*np : (h-h0+1)*np] }
			for b0 := 0; b0 < np; b0 += mlaBlock {
				blk := positions[b0:min(np, b0+mlaBlock)]
				for h := h0; h < h1; h++ {
					qv, hs := qs[(r*heads+h)*dk:(r*heads+h+1)*dk], sc(h)[b0:]
					for i, pos := range blk {
						sl := slot(int(pos))
						hs[i] = dotF32(qv, kl[sl*dk:(sl+1)*dk]) * scale
					}
				}
			}
			for h := h0; h < h1; h++ {
				hs := sc(h)
				vmath.Scale(hs, 1/vmath.ExpShifted(hs, vmath.Max(hs))) // the weights, as axpy takes them
				clear(out[(r*heads+h)*dv : (r*heads+h+1)*dv])
			}
			for b0 := 0; b0 < np; b0 += mlaBlock {
				blk := positions[b0:min(np, b0+mlaBlock)]
				for h := h0; h < h1; h++ {
					o, hs := out[(r*heads+h)*dv:(r*heads+h+1)*dv], sc(h)[b0:]
					for i, pos := range blk {
						sl := slot(int(pos))
						axpy(o, kl[sl*dk:sl*dk+dv], hs[i])
					}
				}
			}
		}
	})
}

// mlaTileHeads and mlaBlock size MLAttention's tasks: the scores of 32
// heads at 4K positions are 512 KB; 16 latent rows of 576 floats, 36 KB,
// stay in L1 while every head of the task takes them.
const (
	mlaTileHeads = 32
	mlaBlock     = 16
)

// firstPositions is 0..n-1 in buf's storage: a row's attended positions
// when it attends to every visible one.
func firstPositions(buf []int32, n int) []int32 {
	buf = buf[:0]
	for t := range n {
		buf = append(buf, int32(t))
	}
	return buf
}

// dsaSelect returns the positions query row r attends to under DeepSeek
// sparse attention, in ascending order, or nil when every visible
// position is selected.
func (b *Backend) dsaSelect(p *kvPool, layer int, seq kernels.AttnSeq, rows, r int, d *kernels.DSA, slot func(int) int) []int32 {
	n := seq.Start + r + 1
	if n <= d.TopK {
		return nil
	}
	qs, ws, keys := f32(d.Q), f32(d.W), p.v[layer]
	dim := d.Dim
	q := qs[r*d.Heads*dim : (r+1)*d.Heads*dim]
	w := ws[r*d.Heads : (r+1)*d.Heads]
	// Positions after the row's own, up to the pass's last, take part
	// masked, as they do in the reference's [rows, context] score matrix.
	cands := make([]scored, seq.Start+rows)
	for t := range cands {
		cands[t] = scored{float32(math.Inf(-1)), int32(t)}
		if t >= n {
			continue
		}
		sl := slot(t)
		k := keys[sl*dim : (sl+1)*dim]
		var sc float32
		for h := range d.Heads {
			if x := dotF32(q[h*dim:(h+1)*dim], k) * d.Scale; x > 0 {
				sc += w[h] * x
			}
		}
		cands[t].v = sc
	}
	topK(cands, d.TopK)
	out := make([]int32, d.TopK)
	for i := range out {
		out[i] = cands[i].i
	}
	slices.Sort(out)
	return out
}

// scored is one candidate of a top-k selection.
type scored struct {
	v float32
	i int32
}

// topK moves the k largest of c to its front. Exact ties (ReLU makes
// many scores exactly 0) are resolved as torch.topk on the CPU resolves
// them: libstdc++'s nth_element (introselect) over the candidates in
// position order, or its partial_sort when k*64 <= len(c). Matching it
// is what makes the selection, and so the output, equal to the
// reference's; the order within the front is unspecified.
func topK(c []scored, k int) {
	gt := func(x, y scored) bool { return x.v > y.v }
	if k <= 0 || k >= len(c) {
		return
	}
	if k*64 <= len(c) {
		heapSelect(c, k, gt)
		return
	}
	first, last, nth := 0, len(c), k-1
	for depth := 2 * (bits.Len(uint(len(c))) - 1); last-first > 3; depth-- {
		if depth == 0 {
			heapSelect(c[first:last], nth-first+1, gt)
			c[first], c[nth] = c[nth], c[first]
			return
		}
		// __unguarded_partition_pivot: median of (first+1, mid, last-1) to first.
		mid := first + (last-first)/2
		a, m, z := first+1, mid, last-1
		switch {
		case gt(c[a], c[m]):
			switch {
			case gt(c[m], c[z]):
				c[first], c[m] = c[m], c[first]
			case gt(c[a], c[z]):
				c[first], c[z] = c[z], c[first]
			default:
				c[first], c[a] = c[a], c[first]
			}
		case gt(c[a], c[z]):
			c[first], c[a] = c[a], c[first]
		case gt(c[m], c[z]):
			c[first], c[z] = c[z], c[first]
		default:
			c[first], c[m] = c[m], c[first]
		}
		lo, hi := first+1, last
		for {
			for gt(c[lo], c[first]) {
				lo++
			}
			hi--
			for gt(c[first], c[hi]) {
				hi--
			}
			if lo >= hi {
				break
			}
			c[lo], c[hi] = c[hi], c[lo]
			lo++
		}
		if lo <= nth {
			first = lo
		} else {
			last = lo
		}
	}
	// __insertion_sort of what is left.
	for i := first + 1; i < last; i++ {
		v := c[i]
		if gt(v, c[first]) {
			copy(c[first+1:i+1], c[first:i])
			c[first] = v
			continue
		}
		j := i
		for gt(v, c[j-1]) {
			c[j] = c[j-1]
			j--
		}
		c[j] = v
	}
}

// heapSelect is libstdc++'s __heap_select: the k best of c end in c[:k].
func heapSelect(c []scored, k int, gt func(x, y scored) bool) {
	h := c[:k]
	if k >= 2 {
		for parent := (k - 2) / 2; ; parent-- {
			adjustHeap(h, parent, h[parent], gt)
			if parent == 0 {
				break
			}
		}
	}
	for i := k; i < len(c); i++ {
		if gt(c[i], h[0]) {
			v := c[i]
			c[i] = h[0]
			adjustHeap(h, 0, v, gt)
		}
	}
}

// adjustHeap is libstdc++'s __adjust_heap followed by __push_heap, for a
// heap whose top is the worst element under gt.
func adjustHeap(h []scored, hole int, v scored, gt func(x, y scored) bool) {
	n, top, child := len(h), hole, hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if gt(h[child], h[child-1]) {
			child--
		}
		h[hole] = h[child]
		hole = child
	}
	if n%2 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		h[hole] = h[child-1]
		hole = child - 1
	}
	for parent := (hole - 1) / 2; hole > top && gt(h[parent], v); parent = (hole - 1) / 2 {
		h[hole] = h[parent]
		hole = parent
	}
	h[hole] = v
}
