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
