//go:build cuda

package main

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
)

// deltaSide checks the decode graph's split delta rule
// (kernels/cuda/delta_side.go): one-token passes captured into a graph,
// whose state update runs on a side branch, replayed token after token,
// against the same tokens run eagerly through the in-place kernel, bit for
// bit (nmse 0): every token's output and the state after the last. The
// shapes are Qwen3.5-27B's, a key head dim of 256 with 40 columns, and 18
// columns (not a multiple of 4: the graph keeps the in-place kernel).
func (c *conf) deltaSide() {
	for _, sh := range []kernels.DeltaShape{
		{KHeads: 16, VHeads: 48, DK: 128, DV: 128, ConvKernel: 4},
		{KHeads: 1, VHeads: 2, DK: 256, DV: 40, ConvKernel: 2},
		{KHeads: 2, VHeads: 4, DK: 16, DV: 18, ConvKernel: 4},
	} {
		c.deltaSideOne(sh, 5)
	}
}

func (c *conf) deltaSideOne(sh kernels.DeltaShape, steps int) {
	name := fmt.Sprintf("vheads=%d dk=%d dv=%d, %d replays", sh.VHeads, sh.DK, sh.DV, steps)
	g := c.g
	cd, vh, vd, rl := sh.ConvDim(), sh.VHeads, sh.VHeads*sh.DV, sh.RecStateLen()
	type token struct{ x, a, b []float32 }
	toks := make([]token, steps)
	for t := range toks {
		x := c.randn(cd)
		for i, v := range x {
			x[i] = v / (1 + float32(math.Exp(float64(-v))))
		}
		toks[t] = token{x, c.randn(vh), c.randn(vh)}
	}
	d := c.newDeltaRun(sh, 1, name, nil, nil)
	x, a, b, out := g.NewBuf(cd), g.NewBuf(vh), g.NewBuf(vh), g.NewBuf(vd)
	load := func(t token) {
		g.Write(x, 0, t.x)
		g.Write(a, 0, t.a)
		g.Write(b, 0, t.b)
	}
	read := func(buf kernels.Buf, n int) []float32 {
		v := make([]float32, n)
		g.Read(buf, 0, v)
		return v
	}

	eager := g.NewBuf(rl)
	g.Write(eager, 0, d.state)
	var want [][]float32
	for _, t := range toks {
		load(t)
		g.GatedDeltaRule(out, x, a, b, eager, d.alg, d.dtg, 1, sh)
		want = append(want, read(out, vd))
	}

	state := g.NewBuf(rl)
	g.Write(state, 0, d.state)
	if err := g.BeginCapture(); err != nil {
		c.compare("DeltaSide", name+": capture: "+err.Error(), []float32{float32(math.NaN())}, []float32{0}, 0)
		return
	}
	g.GatedDeltaRule(out, x, a, b, state, d.alg, d.dtg, 1, sh)
	g.Read(out, 0, make([]float32, vd)) // the step's output, as a decode step reads its logits
	gr, err := g.EndCapture()
	if err != nil {
		c.compare("DeltaSide", name+": capture: "+err.Error(), []float32{float32(math.NaN())}, []float32{0}, 0)
		return
	}
	defer gr.Close()
	for i, t := range toks {
		load(t)
		if err := gr.Launch(cuda.Step{}); err != nil {
			c.compare("DeltaSide", name+": replay: "+err.Error(), []float32{float32(math.NaN())}, []float32{0}, 0)
			return
		}
		c.compare("DeltaSide", fmt.Sprintf("%s, token %d", name, i), read(out, vd), want[i], 0)
	}
	c.compare("DeltaSide", name+", state", read(state, rl), read(eager, rl), 0)
}
