//go:build cuda

package main

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// fused checks the CUDA backend's kernels.FusedOps against the CPU running
// the unfused sequence each op stands for, at real decode shapes (Llama-3-8B,
// Qwen3-30B-A3B, ragged small ones).
func (c *conf) fused() {
	// NormMatMul: q, k, v (or one matrix) from the un-normed residual.
	for _, s := range []struct {
		dt       kernels.DType
		in, outs []int
	}{
		{kernels.BF16, []int{4096}, []int{4096, 1024, 1024}}, {kernels.BF16, []int{2048}, []int{4096, 512, 512}},
		{kernels.BF16, []int{72}, []int{1000}}, {kernels.BF16, []int{64}, []int{40, 8, 8, 24}},
		{kernels.BF16, []int{5120}, []int{6144}},
		// One TP2 rank's q/k/v of Llama-3-8B, and ragged row groups.
		{kernels.BF16, []int{4096}, []int{2048, 512, 512}}, {kernels.BF16, []int{256}, []int{40, 8, 24}},
		{kernels.BF16, []int{1344}, []int{1000, 17}},
		{kernels.F8E4M3, []int{5120}, []int{12288, 1024, 1024}}, {kernels.F8E4M3, []int{64}, []int{40, 8, 8, 24}},
		{kernels.F8E4M3, []int{2048}, []int{130}},
		// The tensor-core FP8 kernels (fp8mma.cu): Qwen3.5-27B's q/k/v,
		// inputs with a 64-column tail (in % 128 == 64), past the small
		// kernels' 8192 columns, and ragged row tiles.
		{kernels.F8E4M3, []int{5120}, []int{6144, 1024, 1024}}, {kernels.F8E4M3, []int{192}, []int{40, 8, 24}},
		{kernels.F8E4M3, []int{8256}, []int{72, 200}}, {kernels.F8E4M3, []int{17408}, []int{100}},
	} {
		in := s.in[0]
		x := c.randn(in)
		xg, xh := c.pair(x)
		ng, nh := c.weight(kernels.F32, []int{in}, [2]int{})
		normed := c.c.NewBuf(in)
		c.c.RMSNorm(normed, xh, nh, 1, in, 1e-6)
		var dg, dh []kernels.Buf
		var wg []kernels.Tensor
		for _, out := range s.outs {
			g, h := c.weight(s.dt, []int{out, in}, fusedBlock(s.dt, in))
			yg, yh := c.outPair(out)
			c.c.MatMul(yh, normed, h, 1)
			wg, dg, dh = append(wg, g), append(dg, yg), append(dh, yh)
		}
		if !c.g.NormMatMul(dg, xg, ng, 1e-6, wg, 1) {
			c.declined("NormMatMul", fmt.Sprint(s))
			continue
		}
		for i, out := range s.outs {
			c.check("NormMatMul", fmt.Sprintf("%s in=%d out=%v #%d", s.dt, in, s.outs, i), dg[i], dh[i], out, tolGEMV(s.dt))
		}
		if c.tile(wg...) {
			tg := make([]kernels.Buf, len(s.outs))
			for i, out := range s.outs {
				tg[i], _ = c.outPair(out)
			}
			c.g.NormMatMul(tg, xg, ng, 1e-6, wg, 1)
			for i, out := range s.outs {
				c.same("NormMatMul", fmt.Sprintf("tiled in=%d out=%v #%d", in, s.outs, i), tg[i], dg[i], out)
			}
		}
	}
	// NormSwiGLU: gate, up and the activation.
	for _, s := range []struct {
		dt      kernels.DType
		out, in int
	}{{kernels.BF16, 14336, 4096}, {kernels.BF16, 768, 2048}, {kernels.BF16, 12288, 4096}, {kernels.BF16, 100, 64},
		{kernels.BF16, 3, 8}, {kernels.BF16, 7168, 4096}, {kernels.BF16, 13, 320},
		{kernels.F8E4M3, 17408, 5120}, {kernels.F8E4M3, 100, 64}, {kernels.F8E4M3, 3, 32},
		{kernels.F8E4M3, 100, 192}, {kernels.F8E4M3, 3, 128}, {kernels.F8E4M3, 6144, 4096}, {kernels.F8E4M3, 77, 8256},
		{kernels.F8E4M3, 1000, 2048}} {
		xg, xh := c.pair(c.randn(s.in))
		ng, nh := c.weight(kernels.F32, []int{s.in}, [2]int{})
		gg, gh := c.weight(s.dt, []int{s.out, s.in}, fusedBlock(s.dt, s.in))
		ug, uh := c.weight(s.dt, []int{s.out, s.in}, fusedBlock(s.dt, s.in))
		ag, ah := c.outPair(s.out)
		normed, u := c.c.NewBuf(s.in), c.c.NewBuf(s.out)
		c.c.RMSNorm(normed, xh, nh, 1, s.in, 1e-5)
		c.c.MatMul(ah, normed, gh, 1)
		c.c.MatMul(u, normed, uh, 1)
		c.c.SwiGLU(ah, ah, u, s.out)
		if !c.g.NormSwiGLU(ag, xg, ng, 1e-5, gg, ug, 1) {
			c.declined("NormSwiGLU", fmt.Sprint(s))
			continue
		}
		c.check("NormSwiGLU", fmt.Sprintf("%s out=%d in=%d", s.dt, s.out, s.in), ag, ah, s.out, tolGEMV(s.dt))
		if c.tile(gg, ug) {
			tg, _ := c.outPair(s.out)
			c.g.NormSwiGLU(tg, xg, ng, 1e-5, gg, ug, 1)
			c.same("NormSwiGLU", fmt.Sprintf("tiled out=%d in=%d", s.out, s.in), tg, ag, s.out)
		}
	}
	// MatMulAdd: the output projections and the residual add.
	for _, s := range []struct {
		dt      kernels.DType
		out, in int
	}{{kernels.BF16, 4096, 14336}, {kernels.BF16, 4096, 4096}, {kernels.BF16, 2048, 768}, {kernels.BF16, 130, 64},
		{kernels.BF16, 5, 8}, {kernels.BF16, 4096, 7168}, {kernels.BF16, 4096, 2048}, {kernels.BF16, 37, 448},
		{kernels.F8E4M3, 5120, 17408}, {kernels.F8E4M3, 130, 64}, {kernels.F8E4M3, 5120, 6144},
		{kernels.F8E4M3, 1000, 320}, {kernels.F8E4M3, 130, 8256}, {kernels.F8E4M3, 24, 24064},
		{kernels.F8E4M3, 2200, 960}, {kernels.F8E4M3, 2117, 2112}, {kernels.F8E4M3, 2117, 2048}} {
		acc := c.randn(s.out)
		ag, ah := c.pair(acc)
		xg, xh := c.pair(c.randn(s.in))
		wg, wh := c.weight(s.dt, []int{s.out, s.in}, fusedBlock(s.dt, s.in))
		y := c.c.NewBuf(s.out)
		c.c.MatMul(y, xh, wh, 1)
		c.c.Add(ah, ah, y, s.out)
		if !c.g.MatMulAdd(ag, xg, wg, 1) {
			c.declined("MatMulAdd", fmt.Sprint(s))
			continue
		}
		c.check("MatMulAdd", fmt.Sprintf("%s out=%d in=%d", s.dt, s.out, s.in), ag, ah, s.out, tolGEMV(s.dt))
		if c.tile(wg) {
			tg, _ := c.pair(acc)
			c.g.MatMulAdd(tg, xg, wg, 1)
			c.same("MatMulAdd", fmt.Sprintf("tiled out=%d in=%d", s.out, s.in), tg, ag, s.out)
		}
	}
	c.ropeStore()
	c.ropeAttention()
}

// tile gives FP8 matrices their tiled copies for the ring GEMVs
// (kernels/cuda/fp8tiles.go), reporting whether all of them have one.
func (c *conf) tile(ws ...kernels.Tensor) bool {
	for _, w := range ws {
		if w.Weight().DType != kernels.F8E4M3 || !c.g.TileFP8(w) {
			return false
		}
	}
	return true
}

// same checks that the GPU output g equals the GPU output ref bit for bit
// (the same sums read from another layout).
func (c *conf) same(op, shape string, g, ref kernels.Buf, n int) {
	c.n++
	a, b := make([]float32, n), make([]float32, n)
	c.g.Read(g, 0, a)
	c.g.Read(ref, 0, b)
	diff := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			diff++
		}
	}
	status := "ok"
	if err := c.g.Err(); err != nil {
		status = "FAIL (" + err.Error() + ")"
	} else if diff > 0 {
		status = fmt.Sprintf("FAIL (%d of %d elements differ)", diff, n)
	}
	if status != "ok" {
		c.failed++
	}
	fmt.Printf("%-12s %-40s %-17s %s\n", op, shape, "bitwise", status)
}

// fusedBlock is the FP8 scale block of a fused-op case: DeepSeek/Qwen's
// [128, 128] for wide inputs, [16, 32] (rows of one group straddling scale
// rows) for small ones; none for bf16.
func fusedBlock(dt kernels.DType, in int) [2]int {
	switch {
	case dt != kernels.F8E4M3:
		return [2]int{}
	case in >= 128:
		return [2]int{128, 128}
	}
	return [2]int{2, 32}
}

// tolF8MMA is the tolerance of one-row FP8 products on the tensor-core
// kernels (fp8mma.cu), which round the activation to f16 (after an exact
// power-of-two scaling that puts its largest element near 2^14): a relative
// rounding error uniform in ±2^-11 has variance 2^-22/3 ≈ 8e-8, and summed
// with random signs the dot products' NMSE is about that; the weights
// (exact in f16) and the fp32 accumulation add nothing measurable. 1e-5
// leaves two orders of margin and still fails any misplaced fragment
// (NMSE ~ 1).
const tolF8MMA = 1e-5

// tolGEMV is the tolerance of a one-row product of dtype dt: FP8 may run
// on the tensor-core kernels (tolF8MMA), the rest in fp32.
func tolGEMV(dt kernels.DType) float64 {
	if dt == kernels.F8E4M3 {
		return tolF8MMA
	}
	return tolExact * 10
}

// uniqueSlots replaces repeated slots (two rows may not share one).
func uniqueSlots(slots []int32, n int) []int32 {
	seen := map[int32]bool{}
	for i, s := range slots {
		for seen[s] {
			s = (s + 1) % int32(n)
		}
		seen[s] = true
		slots[i] = s
	}
	return slots
}

// declined counts a fused op that refused a shape it should take.
func (c *conf) declined(op, shape string) {
	c.n++
	c.failed++
	fmt.Printf("%-12s %-40s declined  FAIL\n", op, shape)
}
