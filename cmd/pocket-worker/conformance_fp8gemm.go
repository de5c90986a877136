//go:build cuda

package main

import (
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
)

// tolF8GEMM is the tolerance of FP8 prefill GEMMs on E4M3 operands
// (fp8gemm.cu's mma.sync kernels and cuBLASLt's block-scaled FP8 GEMM),
// which round the activation to E4M3 (fp8_quant) with a scale per 128
// columns that maps the group's largest magnitude to 448. A normal E4M3
// value keeps 3 mantissa bits, so the rounding error of v = m·2^e (m in
// [1, 2)) is uniform in ±2^(e-4): the relative error δ is at most 2^-4,
// and E[δ²] = (2^-3)²/12 · E[1/m²]. With m log-uniform E[1/m²] = 0.54 and
// E[δ²] ≈ 7e-4 (2^-8/3 ≈ 1.3e-3 if δ were uniform in ±2^-4 itself).
// Subnormals (|v| < 2^-6, i.e. |x| under ~3e-5 of the group's maximum) are
// too rare to count. The errors are independent of the weights and of each
// other, so the dot products' NMSE, Σx²w²δ² / Σx²w² in expectation, is
// E[δ²] again: ~7e-4. The weight is exact (FP8 as stored) and the fp32
// accumulation adds ~1e-14. The Go emulation (kernels/cuda
// fp8gemm_emu_test.go) measures 6.4e-4 to 6.9e-4 on these inputs; 4e-3
// leaves 3x over the worst case and still fails any misplaced fragment
// (NMSE ≥ 0.5 there).
const tolF8GEMM = 4e-3

// minF8GEMM is the least NMSE the E4M3 rounding leaves (~7e-4 over
// thousands of outputs): below it the kernels declined and the bf16 path
// (~1e-6) ran instead, which must fail the case, not pass it.
const minF8GEMM = 1e-4

type fp8Shape struct {
	out, in int
	block   [2]int
}

// fp8Prefill checks MatMul of FP8 block-scaled weights at prefill row
// counts against the CPU on both E4M3 paths (SetFP8Prefill): mma.sync,
// DeepSeek's [128, 128] blocks on aligned and ragged shapes and [64, 256]
// blocks (b1 = 256 with a partial last block); cuBLASLt's FP8 GEMM,
// [128, 128] blocks with inputs of whole 512s (its
// scale rows are padded to 4 blocks), ragged outputs, from the fewest rows
// it takes (9: an MoE expert's group) and at row counts off a multiple of
// 8 (9, 130), which it runs padded. Shapes a path does not take must fall
// back to the bf16 chunks.
func (c *conf) fp8Prefill() {
	wasMMA, wasLt := c.g.SetFP8Prefill(true, false)
	c.fp8PrefillCases("FP8GEMM", []int{64, 200, 512}, []fp8Shape{{256, 512, [2]int{128, 128}}, {1024, 4096, [2]int{128, 128}},
		{384, 640, [2]int{128, 128}}, {1000, 640, [2]int{128, 128}}, {200, 768, [2]int{64, 256}}},
		// scale blocks 32 wide, an input not a multiple of 128
		[]fp8Shape{{256, 512, [2]int{32, 32}}, {256, 192, [2]int{128, 128}}})
	c.g.SetFP8Prefill(false, true)
	c.fp8PrefillCases("FP8LtGEMM", []int{9, 40, 130, 512}, []fp8Shape{{256, 512, [2]int{128, 128}}, {1024, 4096, [2]int{128, 128}},
		{1000, 1536, [2]int{128, 128}}, {2048, 5120, [2]int{128, 128}}},
		// blocks of [64, 256], an input of 5 scale blocks, an odd output
		[]fp8Shape{{200, 768, [2]int{64, 256}}, {384, 640, [2]int{128, 128}}, {258, 512, [2]int{128, 128}},
			// Qwen3.5-27B's in_proj_a/b on a TP4 and a TP2 rank (12 and 24
			// rows, re-blocked): bf16 chunks, 12 padded to 16 for cuBLASLt
			{12, 5120, [2]int{4, 128}}, {24, 5120, [2]int{8, 128}}})
	// The Qwen3.5-27B shape's projections as a TP2 and a TP4 rank holds
	// them (k/v of one KV head, gate/up 4352 wide, o_proj over 1536
	// columns), at a 128-row prompt chunk: a TP4 group once prefilled
	// wrong on cuBLASLt's FP8 GEMM where TP2 did not.
	c.fp8PrefillCases("FP8LtGEMM", []int{128}, []fp8Shape{{256, 5120, [2]int{128, 128}}, {512, 5120, [2]int{128, 128}},
		{4352, 5120, [2]int{128, 128}}, {8704, 5120, [2]int{128, 128}}, {2560, 5120, [2]int{128, 128}},
		{1536, 5120, [2]int{128, 128}}, {3072, 5120, [2]int{128, 128}}, {5120, 1536, [2]int{128, 128}},
		{5120, 3072, [2]int{128, 128}}}, nil)
	fmt.Printf("prefill GEMM after the FP8 cases: %s\n", c.g.GEMMLibrary())
	c.g.SetFP8Prefill(wasMMA, wasLt)
}

// fp8PrefillCases runs the taken shapes at each row count at the E4M3
// tolerance (and fails an error too small for the E4M3 rounding: the path
// declined and the bf16 chunks ran), and the declined ones at 64 rows at
// the bf16 chunks' tolerance, which the E4M3 rounding would fail.
func (c *conf) fp8PrefillCases(op string, rowCounts []int, taken, declined []fp8Shape) {
	for _, rows := range rowCounts {
		for _, s := range taken {
			name := fmt.Sprintf("rows=%d out=%d in=%d block=%v", rows, s.out, s.in, s.block)
			a, b := c.fp8MatMul(rows, s.out, s.in, s.block)
			c.compare(op, name, a, b, tolF8GEMM)
			if e := nmseOf(a, b); e < minF8GEMM {
				c.failed++
				fmt.Printf("%-12s %-40s nmse %.3e  FAIL (under %.0e: the E4M3 path declined, the bf16 path ran)\n",
					op, name, e, minF8GEMM)
			}
		}
	}
	for _, s := range declined {
		a, b := c.fp8MatMul(64, s.out, s.in, s.block)
		c.compare(op, fmt.Sprintf("declined rows=64 out=%d in=%d block=%v", s.out, s.in, s.block), a, b, tolBF16)
	}
}

// fp8MatMul runs one FP8 MatMul on both backends and returns the GPU's
// and the CPU's outputs.
func (c *conf) fp8MatMul(rows, out, in int, block [2]int) (a, b []float32) {
	wg, wh := c.weight(kernels.F8E4M3, []int{out, in}, block)
	xg, xh := c.pair(c.randn(rows * in))
	yg, yh := c.outPair(rows * out)
	c.g.MatMul(yg, xg, wg, rows)
	c.c.MatMul(yh, xh, wh, rows)
	a, b = make([]float32, rows*out), make([]float32, rows*out)
	c.g.Read(yg, 0, a)
	c.c.Read(yh, 0, b)
	return a, b
}

// nmseOf is compare's error measure: a from the GPU, b the reference.
func nmseOf(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return num / max(den, 1e-30)
}
