//go:build cuda

package main

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// deltaSegments checks kernels.DeltaSegmenter on the CUDA backend against
// what it stands for there: GatedDeltaRule a segment (on views of the
// pass's rows) with the state copied after each, bit for bit (nmse 0),
// outputs, final state and every snapshot. The cases join chunk-aligned
// runs into one launch, break a run at a segment off the chunk grid, and
// leave short segments (the recurrent kernel) and unchunked shapes alone.
func (c *conf) deltaSegments() {
	q35 := kernels.DeltaShape{KHeads: 16, VHeads: 48, DK: 128, DV: 128, ConvKernel: 4}
	wide := kernels.DeltaShape{KHeads: 1, VHeads: 2, DK: 256, DV: 40, ConvKernel: 2}
	for _, s := range []struct {
		s    kernels.DeltaShape
		rows int
		ends []int
	}{
		{q35, 1024, []int{256, 512, 768}},
		{q35, 1024, []int{100, 356, 612}},
		{q35, 1024, []int{256, 512, 1020}},
		{q35, 600, []int{8, 264}},
		{q35, 300, []int{64, 128, 192, 256}},
		{wide, 200, []int{64, 128}},
	} {
		c.deltaSegmentsOne(s.s, s.rows, s.ends)
	}
}

func (c *conf) deltaSegmentsOne(sh kernels.DeltaShape, rows int, ends []int) {
	name := fmt.Sprintf("dk=%d rows=%d ends=%v", sh.DK, rows, ends)
	x := c.randn(rows * sh.ConvDim())
	for i, v := range x {
		x[i] = v / (1 + float32(math.Exp(float64(-v))))
	}
	xg, _ := c.pair(x)
	d := c.newDeltaRun(sh, rows, name, xg, nil)
	vd, cd, vh, rl := sh.VHeads*sh.DV, sh.ConvDim(), sh.VHeads, sh.RecStateLen()
	g := c.g
	run := func(joined bool) (out, state kernels.Buf, snaps []kernels.Buf) {
		out, state = g.NewBuf(rows*vd), g.NewBuf(rl)
		g.Write(state, 0, d.state)
		for range ends {
			snaps = append(snaps, g.NewBuf(rl))
		}
		if joined {
			g.GatedDeltaRuleSegments(out, d.xg, d.ag, d.bg, state, d.alg, d.dtg, rows, sh, ends, snaps)
			return
		}
		kernels.Segments(ends, rows, func(i, r0, r1 int) {
			r := r1 - r0
			g.GatedDeltaRule(g.ViewBuf(out, r0*vd, r*vd), g.ViewBuf(d.xg, r0*cd, r*cd), g.ViewBuf(d.ag, r0*vh, r*vh),
				g.ViewBuf(d.bg, r0*vh, r*vh), state, d.alg, d.dtg, r, sh)
			if i < len(ends) {
				g.CopyBuf(snaps[i], state, rl)
			}
		})
		return
	}
	oj, sj, pj := run(true)
	os, ss, ps := run(false)
	read := func(b kernels.Buf, n int) []float32 {
		v := make([]float32, n)
		g.Read(b, 0, v)
		return v
	}
	c.compare("DeltaSegs", name, read(oj, rows*vd), read(os, rows*vd), 0)
	c.compare("DeltaSegs", name+" state", read(sj, rl), read(ss, rl), 0)
	for i := range ends {
		c.compare("DeltaSegs", fmt.Sprintf("%s snap %d", name, ends[i]), read(pj[i], rl), read(ps[i], rl), 0)
	}
}

// mixStep checks kernels.DeltaMixStepper (delta_mix_step: the one-token
// mix in one launch) against the CPU's three ops of one row: the gated
// norm's output and both states, over a few steps (each step's states are
// the next one's), on the fixtures' shape, Qwen3-Next's and Qwen3.5-27B's,
// a value-head group of one, and narrower heads. Layer 0 and 7 use
// different counters. A head dim over 128 must be declined.
func (c *conf) mixStep() {
	for _, sh := range []kernels.DeltaShape{
		{KHeads: 2, VHeads: 4, DK: 16, DV: 16, ConvKernel: 4},
		{KHeads: 16, VHeads: 32, DK: 128, DV: 128, ConvKernel: 4},
		{KHeads: 16, VHeads: 48, DK: 128, DV: 128, ConvKernel: 4},
		{KHeads: 3, VHeads: 3, DK: 100, DV: 70, ConvKernel: 1},
		{KHeads: 2, VHeads: 6, DK: 8, DV: 12, ConvKernel: 8},
	} {
		name := fmt.Sprintf("k=%d v=%d dk=%d dv=%d conv=%d", sh.KHeads, sh.VHeads, sh.DK, sh.DV, sh.ConvKernel)
		cd, vd := sh.ConvDim(), sh.VHeads*sh.DV
		wg, wh := c.weight(kernels.BF16, []int{cd, 1, sh.ConvKernel}, [2]int{})
		nwg, nwh := c.weight(kernels.BF16, []int{sh.DV}, [2]int{})
		cg, ch := c.pair(c.randn(sh.ConvStateLen()))
		d := c.newDeltaRun(sh, 1, name, nil, nil)
		rg, rh := c.pair(d.state)
		for step := range 3 {
			xg, xh := c.pair(c.randn(cd))
			zg, zh := c.pair(c.randn(vd))
			ag, ah := c.pair(c.randn(sh.VHeads))
			bg, bh := c.pair(c.randn(sh.VHeads))
			og, oh := c.outPair(vd)
			if !c.g.DeltaMixStep(og, xg, zg, ag, bg, cg, rg, wg, d.alg, d.dtg, nwg, 1e-6, sh, 7*step%8) {
				c.setupFailed("MixStep", name, fmt.Errorf("declined"))
				return
			}
			yh := c.c.NewBuf(cd)
			c.c.CausalConv1D(yh, xh, ch, wh, 1, sh)
			c.c.GatedDeltaRule(oh, yh, ah, bh, rh, d.alh, d.dth, 1, sh)
			c.c.RMSNormGated(oh, oh, zh, nwh, sh.VHeads, sh.DV, 1e-6)
			step := fmt.Sprintf("%s step %d", name, step)
			c.check("MixStep", step, og, oh, vd, tolExact)
			c.check("MixStep", step+" conv state", cg, ch, sh.ConvStateLen(), tolExact)
			c.check("MixStep", step+" state", rg, rh, sh.RecStateLen(), tolExact)
		}
	}
	wide := kernels.DeltaShape{KHeads: 1, VHeads: 2, DK: 256, DV: 40, ConvKernel: 2}
	wg, _ := c.weight(kernels.BF16, []int{wide.ConvDim(), 1, 2}, [2]int{})
	nwg, _ := c.weight(kernels.BF16, []int{wide.DV}, [2]int{})
	d := c.newDeltaRun(wide, 1, "wide", nil, nil)
	buf := func(n int) kernels.Buf { return c.g.NewBuf(n) }
	c.n++
	status := "ok"
	if c.g.DeltaMixStep(buf(wide.VHeads*wide.DV), buf(wide.ConvDim()), buf(wide.VHeads*wide.DV), buf(2), buf(2),
		buf(wide.ConvStateLen()), buf(wide.RecStateLen()), wg, d.alg, d.dtg, nwg, 1e-6, wide, 0) {
		status = "FAIL (took a key head dim of 256)"
		c.failed++
	}
	fmt.Printf("%-12s %-40s %s\n", "MixStep", "dk=256 declined", status)
}
