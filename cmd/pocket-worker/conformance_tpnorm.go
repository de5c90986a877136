//go:build cuda

package main

import (
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
)

// tpNorm checks kernels.TPNormOps (the q/k norm over all heads of a model
// split over a tensor-parallel group) against the CPU backend, on fixture
// shapes and MiniMax-M2's (48 q heads, 8 KV heads of 128 at TP4): the sums
// of squares written at an offset into a shared buffer, then the norm of
// each part by its sum, as the plan runs them with an all-reduce between.
func (c *conf) tpNorm() {
	for _, s := range []struct{ rows, qw, kw, world int }{
		{1, 32, 16, 2}, {9, 32, 16, 2}, {5, 16, 16, 4},
		{1, 12 * 128, 2 * 128, 4}, {64, 12 * 128, 2 * 128, 4}, {3, 1000, 70, 1},
	} {
		name := fmt.Sprintf("rows=%d q=%d k=%d", s.rows, s.qw, s.kw)
		qg, qh := c.pair(c.randn(s.rows * s.qw))
		kg, kh := c.pair(c.randn(s.rows * s.kw))
		sg, sh := c.outPair(2 * s.rows)
		c.g.SumSquares(sg, 0, qg, s.rows, s.qw)
		c.c.SumSquares(sh, 0, qh, s.rows, s.qw)
		c.g.SumSquares(sg, s.rows, kg, s.rows, s.kw)
		c.c.SumSquares(sh, s.rows, kh, s.rows, s.kw)
		c.check("SumSquares", name, sg, sh, 2*s.rows, tolExact)
		// The group's total stands in as world times the local sum.
		timesWorld := func(b kernels.Backend, buf kernels.Buf) {
			v := make([]float32, 2*s.rows)
			b.Read(buf, 0, v)
			for i := range v {
				v[i] *= float32(s.world)
			}
			b.Write(buf, 0, v)
		}
		timesWorld(c.g, sg)
		timesWorld(c.c, sh)
		wqg, wqh := c.weight(kernels.BF16, []int{s.qw}, [2]int{})
		wkg, wkh := c.weight(kernels.BF16, []int{s.kw}, [2]int{})
		yg, yh := c.outPair(s.rows * s.qw)
		c.g.RMSNormSum(yg, qg, sg, 0, wqg, s.rows, s.qw, 1/float32(s.qw*s.world), 1e-6)
		c.c.RMSNormSum(yh, qh, sh, 0, wqh, s.rows, s.qw, 1/float32(s.qw*s.world), 1e-6)
		c.check("RMSNormSum", name+" q", yg, yh, s.rows*s.qw, tolExact)
		// In place, as the model runs it.
		c.g.RMSNormSum(kg, kg, sg, s.rows, wkg, s.rows, s.kw, 1/float32(s.kw*s.world), 1e-6)
		c.c.RMSNormSum(kh, kh, sh, s.rows, wkh, s.rows, s.kw, 1/float32(s.kw*s.world), 1e-6)
		c.check("RMSNormSum", name+" k in place", kg, kh, s.rows*s.kw, tolExact)
	}
}
