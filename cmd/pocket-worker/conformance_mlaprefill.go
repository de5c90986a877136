//go:build cuda

package main

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// mlaPrefill checks kernels.MLAPrefillOps against the CPU: ReadKV's
// column reads through a shuffled block table (exact), and the expanded
// latent attention of prompt passes on DeepSeek-V3's head dims and the
// fixtures', a head group inside more heads, fresh and appended (the flash
// kernel: bf16 operands).
func (c *conf) mlaPrefill() {
	gx, cx := c.g, c.c
	for _, s := range []struct{ r, dr, bs, n, lo, width int }{
		{512, 64, 16, 300, 0, 512}, {512, 64, 16, 300, 512, 64}, {32, 8, 4, 37, 0, 32}, {32, 8, 4, 37, 32, 8},
	} {
		dk := s.r + s.dr
		blocks := (s.n+s.bs-1)/s.bs + 2
		spec := kernels.KVSpec{Layers: 2, Blocks: blocks, BlockSize: s.bs, KVHeads: 1, HeadDimK: dk}
		name := fmt.Sprintf("row=%d cols=[%d,%d) n=%d bs=%d", dk, s.lo, s.lo+s.width, s.n, s.bs)
		pg, err := c.g.NewKVPool(spec)
		if err != nil {
			c.setupFailed("ReadKV", name, err)
			continue
		}
		ph, err := c.c.NewKVPool(spec)
		if err != nil {
			c.setupFailed("ReadKV", name, err)
			continue
		}
		perm := c.rng.Perm(blocks)
		table := make([]int32, (s.n+s.bs-1)/s.bs)
		slots := make([]int32, s.n)
		for i := range table {
			table[i] = int32(perm[i])
		}
		for p := range slots {
			slots[p] = table[p/s.bs]*int32(s.bs) + int32(p%s.bs)
		}
		kg, kh := c.pair(c.randn(s.n * dk))
		c.g.StoreKV(pg, 1, kg, nil, slots)
		c.c.StoreKV(ph, 1, kh, nil, slots)
		yg, yh := c.outPair(s.n * s.width)
		gx.ReadKV(yg, pg, 1, table, s.n, s.lo, s.width)
		cx.ReadKV(yh, ph, 1, table, s.n, s.lo, s.width)
		c.check("ReadKV", name, yg, yh, s.n*s.width, tolExact)
	}
	for _, s := range []kernels.MLAExpanded{
		{Rows: 100, Start: 0, Heads: 32, H0: 16, HN: 16, Dn: 128, Dr: 64, Dv: 128},
		{Rows: 130, Start: 70, Heads: 16, H0: 0, HN: 16, Dn: 128, Dr: 64, Dv: 128},
		{Rows: 16, Start: 0, Heads: 8, H0: 0, HN: 8, Dn: 128, Dr: 64, Dv: 128},
		{Rows: 20, Start: 0, Heads: 4, H0: 0, HN: 4, Dn: 16, Dr: 8, Dv: 16},
		{Rows: 17, Start: 40, Heads: 6, H0: 2, HN: 4, Dn: 16, Dr: 8, Dv: 16},
	} {
		ctx := s.Start + s.Rows
		s.Scale = float32(1 / math.Sqrt(float64(s.Dn+s.Dr)))
		name := fmt.Sprintf("heads=%d+%d of %d dk=%d+%d dv=%d start=%d rows=%d", s.H0, s.HN, s.Heads, s.Dn, s.Dr, s.Dv, s.Start, s.Rows)
		qg, qh := c.pair(c.randn(s.Rows * s.Heads * (s.Dn + s.Dr)))
		qpg, qph := c.pair(c.randn(s.Rows * s.Heads * s.Dr))
		kvg, kvh := c.pair(c.randn(ctx * s.HN * (s.Dn + s.Dv)))
		kpg, kph := c.pair(c.randn(ctx * s.Dr))
		// Zeros, not outPair's NaNs: the heads outside the group are not
		// written, on either backend.
		n := s.Rows * s.Heads * s.Dv
		yg, yh := c.pair(make([]float32, n))
		okG := gx.MLAExpandedAttention(yg, qg, qpg, kvg, kpg, s)
		okC := cx.MLAExpandedAttention(yh, qh, qph, kvh, kph, s)
		if !okG || !okC {
			c.setupFailed("MLAExpanded", name, fmt.Errorf("declined (gpu %v, cpu %v)", okG, okC))
			continue
		}
		c.check("MLAExpanded", name, yg, yh, n, tolBF16)
	}
}
