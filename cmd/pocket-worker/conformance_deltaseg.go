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
