//go:build cuda

package main

import (
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
	"github.com/pocketllm/pocketllm/kernels/quant"
)

// quant checks the GGUF block-format kernels against the CPU backend (whose
// DotRow and dequantizers are the bit-exact reference): GEMV with 1..32
// activation rows (fp32 sums: near-exact), the prefill path with more rows
// beyond 32 rows (weights dequantized to bf16 and activations rounded to bf16 for the
// GEMM: bf16 tolerance), the chunked prefill path, and Embed (exact).
func (c *conf) quant() {
	var dts []kernels.DType
	for d := kernels.DType(0); d.Valid(); d++ {
		if kernels.Executes("cuda", d) && d.BlockElems() > 1 {
			dts = append(dts, d)
		}
	}
	type mm struct{ rows, out, in int }
	for _, dt := range dts {
		be := dt.BlockElems()
		shapes := []mm{{1, 300, 2 * 256}, {3, 130, 256}, {8, 64, 4 * 256}, {5, 33, be}, {40, 200, 2 * 256}, {9, 72, 256},
			{24, 100, 512}, {33, 64, 256}}
		if dt == kernels.Q4_K || dt == kernels.Q6_K || dt == kernels.Q8_0 {
			shapes = append(shapes, mm{1, 4096, 4096}, mm{1, 1024, 12288}, mm{2, 4096, 4096}, mm{130, 1024, 4096})
			// qmv (quant_mmv.cuh): row counts off its 4 rows per warp and
			// 16/wpr rows per block, block counts off its steps of 4.
			shapes = append(shapes, mm{1, 7, 256}, mm{1, 33, 1280}, mm{1, 4099, 4096}, mm{1, 513, 12288}, mm{1, 130, 768})
		}
		if _, _, lattice := quant.Lattice(dt); lattice {
			// Wider rows take 2 and 4 warps per output row; a MoE-expert
			// shape with a ragged row pass (7 = 4 + 2 + 1).
			shapes = append(shapes, mm{1, 1024, 12288}, mm{7, 256, 2048}, mm{2, 300, 16384}, mm{64, 512, 4096})
		}
		for _, s := range shapes {
			c.quantMatMul(dt, s.rows, s.out, s.in)
		}
		// Embed: exact decode of whole rows.
		w := &kernels.Weight{Name: "embd", DType: dt, Shape: []int{1000, 512}, Data: randomBlocks(c.rng, dt, 1000, 512, 1e-3)}
		tg, th := c.load(w)
		ids := make([]int32, 13)
		for i := range ids {
			ids[i] = int32(c.rng.IntN(1000))
		}
		yg, yh := c.outPair(13 * 512)
		c.g.Embed(yg, tg, ids)
		c.c.Embed(yh, th, ids)
		c.check("QEmbed", fmt.Sprintf("%s ids=13 dim=512", dt), yg, yh, 13*512, tolExact)
	}
	// The chunked prefill path (scratch smaller than the matrix): chunks of
	// 64 rows, the last one ragged.
	old := cuda.QuantScratchBytes
	cuda.QuantScratchBytes = 64 * 512 * 2
	c.quantMatMul(kernels.Q4_K, 40, 200, 512)
	c.quantMatMul(kernels.Q6_K, 40, 200, 512)
	c.quantMatMul(kernels.IQ2_XXS, 40, 200, 512)
	c.quantMatMul(kernels.IQ1_M, 40, 200, 512)
	cuda.QuantScratchBytes = old
	c.quantFused()
}

// quantFused checks kernels.FusedOps with Q4_K/Q6_K/Q8_0 weights (qmv,
// int8 activations: bf16 tolerance) against the CPU's unfused ops.
func (c *conf) quantFused() {
	declined := func(op, shape string) {
		if cuda.QuantFused() {
			c.declined(op, shape)
		}
	}
	qw := func(dt kernels.DType, out, in int) (g, h kernels.Tensor) {
		return c.load(&kernels.Weight{Name: "w", DType: dt, Shape: []int{out, in}, Data: randomBlocks(c.rng, dt, out, in, 1e-3)})
	}
	// NormMatMul: Qwen3-8B's q, k, v (v in Q6_K as Q4_K_M files have it in
	// half the layers), ragged ones, one matrix.
	for _, s := range []struct {
		in   int
		dts  []kernels.DType
		outs []int
	}{
		{4096, []kernels.DType{kernels.Q4_K, kernels.Q4_K, kernels.Q6_K}, []int{4096, 1024, 1024}},
		{4096, []kernels.DType{kernels.Q4_K, kernels.Q4_K, kernels.Q4_K}, []int{4096, 1024, 1024}},
		{768, []kernels.DType{kernels.Q8_0, kernels.Q6_K, kernels.Q4_K, kernels.Q4_K}, []int{37, 5, 130, 8}},
		{1280, []kernels.DType{kernels.Q6_K}, []int{999}},
	} {
		in := s.in
		xg, xh := c.pair(c.randn(in))
		ng, nh := c.weight(kernels.F32, []int{in}, [2]int{})
		normed := c.c.NewBuf(in)
		c.c.RMSNorm(normed, xh, nh, 1, in, 1e-6)
		var dg, dh []kernels.Buf
		var wg []kernels.Tensor
		for i, out := range s.outs {
			g, h := qw(s.dts[i], out, in)
			yg, yh := c.outPair(out)
			c.c.MatMul(yh, normed, h, 1)
			wg, dg, dh = append(wg, g), append(dg, yg), append(dh, yh)
		}
		shape := fmt.Sprintf("%v in=%d out=%v", s.dts, in, s.outs)
		if !c.g.NormMatMul(dg, xg, ng, 1e-6, wg, 1) {
			declined("NormMatMul", shape)
			continue
		}
		for i, out := range s.outs {
			c.check("NormMatMul", fmt.Sprintf("%s #%d", shape, i), dg[i], dh[i], out, tolBF16)
		}
	}
	// NormSwiGLU: Qwen3-8B's gate/up, ragged ones.
	for _, s := range []struct {
		dt      kernels.DType
		out, in int
	}{{kernels.Q4_K, 12288, 4096}, {kernels.Q6_K, 101, 512}, {kernels.Q8_0, 37, 768}, {kernels.Q4_K, 3, 1280}} {
		xg, xh := c.pair(c.randn(s.in))
		ng, nh := c.weight(kernels.F32, []int{s.in}, [2]int{})
		gg, gh := qw(s.dt, s.out, s.in)
		ug, uh := qw(s.dt, s.out, s.in)
		ag, ah := c.outPair(s.out)
		normed, u := c.c.NewBuf(s.in), c.c.NewBuf(s.out)
		c.c.RMSNorm(normed, xh, nh, 1, s.in, 1e-5)
		c.c.MatMul(ah, normed, gh, 1)
		c.c.MatMul(u, normed, uh, 1)
		c.c.SwiGLU(ah, ah, u, s.out)
		shape := fmt.Sprintf("%s out=%d in=%d", s.dt, s.out, s.in)
		if !c.g.NormSwiGLU(ag, xg, ng, 1e-5, gg, ug, 1) {
			declined("NormSwiGLU", shape)
			continue
		}
		c.check("NormSwiGLU", shape, ag, ah, s.out, tolBF16)
	}
	// MatMulAdd: o_proj and both ffn_down formats of Qwen3-8B, ragged ones.
	for _, s := range []struct {
		dt      kernels.DType
		out, in int
	}{{kernels.Q4_K, 4096, 4096}, {kernels.Q4_K, 4096, 12288}, {kernels.Q6_K, 4096, 12288}, {kernels.Q6_K, 130, 512},
		{kernels.Q8_0, 33, 256}, {kernels.Q4_K, 6, 2304}} {
		ag, ah := c.pair(c.randn(s.out))
		xg, xh := c.pair(c.randn(s.in))
		wg, wh := qw(s.dt, s.out, s.in)
		y := c.c.NewBuf(s.out)
		c.c.MatMul(y, xh, wh, 1)
		c.c.Add(ah, ah, y, s.out)
		shape := fmt.Sprintf("%s out=%d in=%d", s.dt, s.out, s.in)
		if !c.g.MatMulAdd(ag, xg, wg, 1) {
			declined("MatMulAdd", shape)
			continue
		}
		c.check("MatMulAdd", shape, ag, ah, s.out, tolBF16)
	}
}

func (c *conf) load(w *kernels.Weight) (g, h kernels.Tensor) {
	var err error
	if g, err = c.g.LoadWeight(w); err != nil {
		panic(err)
	}
	if h, err = c.c.LoadWeight(w); err != nil {
		panic(err)
	}
	return g, h
}

func (c *conf) quantMatMul(dt kernels.DType, rows, out, in int) {
	w := &kernels.Weight{Name: "w", DType: dt, Shape: []int{out, in}, Data: randomBlocks(c.rng, dt, out, in, 1e-3)}
	wg, wh := c.load(w)
	xg, xh := c.pair(c.randn(rows * in))
	yg, yh := c.outPair(rows * out)
	c.g.MatMul(yg, xg, wg, rows)
	c.c.MatMul(yh, xh, wh, rows)
	tol := tolExact * 10
	if rows > 32 { // the bf16 prefill GEMM
		tol = tolBF16
	}
	if rows == 1 && cuda.QuantInt8Act(dt) { // int8-rounded activations (dp4a GEMV)
		tol = tolBF16
	}
	c.check("QMatMul", fmt.Sprintf("%s rows=%d out=%d in=%d", dt, rows, out, in), yg, yh, rows*out, tol)
}
