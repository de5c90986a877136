//go:build cuda

package main

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// mlaPrefill checks kernels.MLAPrefillOps and kernels.HeadMatMul against
// the CPU: ReadKV's column reads through a shuffled block table (exact),
// the expanded latent attention of prompt passes on DeepSeek-V3's head
// dims and the fixtures', a head group inside more heads, fresh and
// appended (the flash kernel: bf16 operands), and the per-head products of
// the absorbed form in MLA's layouts, bf16 and FP8.
func (c *conf) mlaPrefill() {
	c.dsaMask()
	for _, s := range []struct{ r, dr, bs, n, lo, width int }{
		{512, 64, 16, 300, 0, 512}, {512, 64, 16, 300, 512, 64}, {32, 8, 4, 37, 0, 32}, {32, 8, 4, 37, 32, 8},
	} {
		dk := s.r + s.dr
		name := fmt.Sprintf("row=%d cols=[%d,%d) n=%d bs=%d", dk, s.lo, s.lo+s.width, s.n, s.bs)
		lc, ok := c.latentCache(mlaCase{r: s.r, dr: s.dr, bs: s.bs, rows: s.n}, "ReadKV", name)
		if !ok {
			continue
		}
		yg, yh := c.outPair(s.n * s.width)
		c.g.ReadKV(yg, lc.g, 1, lc.table, s.n, s.lo, s.width)
		c.c.ReadKV(yh, lc.h, 1, lc.table, s.n, s.lo, s.width)
		c.check("ReadKV", name, yg, yh, s.n*s.width, tolExact)
	}
	for _, s := range []struct {
		kernels.MLAExpanded
		density float64 // > 0: a random DSA-style mask selecting this share of positions
	}{
		{kernels.MLAExpanded{Rows: 100, Start: 0, Heads: 32, H0: 16, HN: 16, Dn: 128, Dr: 64, Dv: 128}, 0},
		{kernels.MLAExpanded{Rows: 130, Start: 70, Heads: 16, H0: 0, HN: 16, Dn: 128, Dr: 64, Dv: 128}, 0},
		{kernels.MLAExpanded{Rows: 16, Start: 0, Heads: 8, H0: 0, HN: 8, Dn: 128, Dr: 64, Dv: 128}, 0},
		{kernels.MLAExpanded{Rows: 20, Start: 0, Heads: 4, H0: 0, HN: 4, Dn: 16, Dr: 8, Dv: 16}, 0},
		{kernels.MLAExpanded{Rows: 17, Start: 40, Heads: 6, H0: 2, HN: 4, Dn: 16, Dr: 8, Dv: 16}, 0},
		{kernels.MLAExpanded{Rows: 150, Start: 300, Heads: 16, H0: 0, HN: 16, Dn: 128, Dr: 64, Dv: 128}, 0.3},
		{kernels.MLAExpanded{Rows: 40, Start: 10, Heads: 4, H0: 0, HN: 4, Dn: 16, Dr: 8, Dv: 16}, 0.2},
	} {
		ctx := s.Start + s.Rows
		s.Scale = float32(1 / math.Sqrt(float64(s.Dn+s.Dr)))
		name := fmt.Sprintf("heads=%d+%d of %d dk=%d+%d dv=%d start=%d rows=%d", s.H0, s.HN, s.Heads, s.Dn, s.Dr, s.Dv, s.Start, s.Rows)
		var maskG, maskH kernels.Buf
		if s.density > 0 {
			// Each row keeps its own position (a selection is never empty)
			// and a random share of the others; bits past a row's position
			// must be ignored.
			words := kernels.MaskWords(ctx)
			m := make([]float32, s.Rows*words)
			for r := range s.Rows {
				bits := make([]uint32, words)
				for t := range ctx {
					if t == s.Start+r || c.rng.Float64() < s.density {
						bits[t/32] |= 1 << (t % 32)
					}
				}
				for w, v := range bits {
					m[r*words+w] = math.Float32frombits(v)
				}
			}
			maskG, maskH = c.pair(m)
			name += fmt.Sprintf(" masked=%.0f%%", 100*s.density)
		}
		qg, qh := c.pair(c.randn(s.Rows * s.Heads * (s.Dn + s.Dr)))
		qpg, qph := c.pair(c.randn(s.Rows * s.Heads * s.Dr))
		kvg, kvh := c.pair(c.randn(ctx * s.HN * (s.Dn + s.Dv)))
		kpg, kph := c.pair(c.randn(ctx * s.Dr))
		// Zeros, not outPair's NaNs: the heads outside the group are not
		// written, on either backend.
		n := s.Rows * s.Heads * s.Dv
		yg, yh := c.pair(make([]float32, n))
		ag, ah := s.MLAExpanded, s.MLAExpanded
		ag.Mask, ah.Mask = maskG, maskH
		okG := c.g.MLAExpandedAttention(yg, qg, qpg, kvg, kpg, ag)
		okC := c.c.MLAExpandedAttention(yh, qh, qph, kvh, kph, ah)
		if !okG || !okC {
			c.setupFailed("MLAExpanded", name, fmt.Errorf("declined (gpu %v, cpu %v)", okG, okC))
			continue
		}
		c.check("MLAExpanded", name, yg, yh, n, tolBF16)
	}
	for _, s := range []struct {
		dt           kernels.DType
		block        [2]int
		heads, q, kw int // the heads and the x and dst head widths
		out, in      int
		rows         int
	}{
		{kernels.BF16, [2]int{}, 16, 192, 576, 512, 128, 1}, // W_UK_hᵀ of DeepSeek-V3 (a TP8 rank's heads)
		{kernels.BF16, [2]int{}, 16, 512, 128, 128, 512, 3}, // W_UV_h
		{kernels.F8E4M3, [2]int{128, 128}, 128, 192, 576, 512, 128, 1},
		{kernels.F8E4M3, [2]int{128, 128}, 16, 512, 128, 128, 512, 2},
		{kernels.F8E4M3, [2]int{16, 16}, 4, 24, 40, 32, 16, 1}, // the FP8 fixture's
		{kernels.BF16, [2]int{}, 4, 32, 16, 16, 32, 5},
	} {
		name := fmt.Sprintf("%s heads=%d [%d,%d] rows=%d", s.dt, s.heads, s.out, s.in, s.rows)
		wg, wh := c.weight(s.dt, []int{s.heads * s.out, s.in}, s.block)
		if !c.g.HeadMatMulTakes(wg.Weight()) {
			c.setupFailed("MatMulHeads", name, fmt.Errorf("declined"))
			continue
		}
		a := kernels.HeadProduct{Rows: s.rows, Heads: s.heads, Out: s.out, In: s.in,
			XRow: s.heads * s.q, XHead: s.q, DstRow: s.heads * s.kw, DstHead: s.kw}
		xg, xh := c.pair(c.randn(s.rows * s.heads * s.q))
		n := s.rows * s.heads * s.kw
		yg, yh := c.pair(make([]float32, n))
		c.g.MatMulHeads(yg, xg, wg, a)
		c.c.MatMulHeads(yh, xh, wh, a)
		c.check("MatMulHeads", name, yg, yh, n, tolExact)
	}
}

// dsaMask checks kernels.DSAMask against the CPU bit for bit: the fixture's
// indexer (top 8, with boundary ties) and V3.2's 64 × 128 over longer
// contexts. The CUDA backend declines it under POCKET_MLA_DSA_EXPAND=0
// (SKIP).
func (c *conf) dsaMask() {
	for _, s := range []mlaCase{
		{heads: 4, r: 32, dr: 8, bs: 4, start: 0, rows: 40, idxHeads: 4, idxDim: 16, topk: 8, zeroKeys: 0.5},
		{heads: 4, r: 32, dr: 8, bs: 4, start: 30, rows: 17, idxHeads: 4, idxDim: 16, topk: 8},
		{heads: 16, r: 64, dr: 8, bs: 16, start: 0, rows: 600, idxHeads: 64, idxDim: 128, topk: 256},
		{heads: 16, r: 64, dr: 8, bs: 64, start: 2000, rows: 100, idxHeads: 64, idxDim: 128, topk: 2048, zeroKeys: 0.3},
	} {
		name := fmt.Sprintf("idx=%d×%d top=%d start=%d rows=%d", s.idxHeads, s.idxDim, s.topk, s.start, s.rows)
		ctx := s.start + s.rows
		lc, ok := c.latentCache(s, "DSAMask", name)
		if !ok {
			continue
		}
		n := s.rows * kernels.MaskWords(ctx)
		mg, mh := c.pair(make([]float32, n))
		seq := kernels.AttnSeq{Table: lc.table, Start: s.start}
		if !c.g.DSAMask(mg, lc.dsaG, lc.g, 1, seq, s.rows) {
			c.setupFailed("DSAMask", name, fmt.Errorf("declined (is POCKET_MLA_DSA_EXPAND=0 set?): %w", kernels.ErrUnsupported))
			continue
		}
		c.c.DSAMask(mh, lc.dsaH, lc.h, 1, seq, s.rows)
		a, b := make([]float32, n), make([]float32, n)
		c.g.Read(mg, 0, a)
		c.c.Read(mh, 0, b)
		// Compare bit by bit (the words are bit patterns, not numbers).
		ga, hb := make([]float32, 0, 32*n), make([]float32, 0, 32*n)
		for i := range a {
			wa, wb := math.Float32bits(a[i]), math.Float32bits(b[i])
			for j := range 32 {
				ga, hb = append(ga, float32(wa>>j&1)), append(hb, float32(wb>>j&1))
			}
		}
		c.compare("DSAMask", name, ga, hb, tolExact)
	}
}
