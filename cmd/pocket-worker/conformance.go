//go:build cuda

package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/kernels/cuda"
)

// runConformance runs every op of the CUDA backend against the CPU backend
// on fresh random inputs of several shapes (llama.cpp test-backend-ops
// style): it reports the normalised mean squared error per op and shape and
// checks that every output element was written (outputs are filled with
// NaN first).
func runConformance(args []string) error {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	dev := deviceFlag(fs)
	seed := fs.Uint64("seed", 7, "random seed")
	only := fs.String("only", "", `"draw" (with argmax), "fused" or "hybrid": only that section's cases`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	g, err := openDevice(*dev)
	if err != nil {
		return err
	}
	fmt.Printf("prefill GEMM: %s\n", g.GEMMLibrary())
	c := &conf{g: g, c: cpu.New(0), seed: *seed}
	c.rings()
	switch *only {
	case "draw": // the sampled-step draw alone (a quick check of sample.cu)
		c.section("draw")
		c.draw()
		c.drawCaptured()
		c.section("argmax")
		c.argmax()
	case "fused": // the fused decode ops alone (e.g. under POCKET_FP8_BULK=0)
		c.section("fused")
		c.fused()
	case "hybrid": // the DeltaNet and MLA ops alone
		c.section("hybrid")
		c.hybrid()
	case "kvhalf": // the attention over float16 KV pools alone
		c.kvHalfSections()
	case "":
		c.run()
	default:
		return fmt.Errorf("conformance: -only %q: only \"draw\", \"fused\", \"hybrid\" and \"kvhalf\" are sections of their own", *only)
	}
	fmt.Printf("conformance on %s: %d cases, %d failed\n", g.DeviceName(), c.n, c.failed)
	if c.failed > 0 {
		return fmt.Errorf("%d conformance cases failed", c.failed)
	}
	return nil
}

// rings is a case of its own: the FP8 ring GEMVs must have loaded unless
// switched off. Without them every FP8 product still computes, on
// fp8mma's kernels, and only the MoE cases (which have no fallback) would
// fail: the slower path would pass unseen.
func (c *conf) rings() {
	desc, ok := c.g.FP8Rings()
	c.n++
	status := "ok"
	if !ok {
		status = "FAIL"
		c.failed++
	}
	fmt.Printf("%-12s %-40s %-17s %s\n", "FP8Rings", desc, "loaded", status)
}

type conf struct {
	g         *cuda.Backend
	c         *cpu.Backend
	seed      uint64
	rng       *rand.Rand
	n, failed int
	// kvHalf makes every KV pool of the cases float16 on both backends
	// (kernels.KVSpec.Half): the attention sections run once each way.
	kvHalf bool
}

// section starts a group of cases on random data of its own (from the
// seed and the name), so that a case added to one group leaves every
// other group's data as it was: a few cases (e.g. three outputs of an
// f16-rounded product) sit within an order of their tolerance on some
// data, and a shifted stream once pushed one over.
func (c *conf) section(name string) {
	h := fnv.New64a()
	h.Write([]byte(name))
	c.rng = rand.New(rand.NewPCG(c.seed, h.Sum64()))
}

// Tolerances on NMSE: fp32 paths land near 1e-12; the tensor-core GEMM
// rounds activations to tf32 (~1e-7).
const (
	tolExact = 1e-9
	tolTF32  = 1e-5
	// tolBF16 is for paths with bf16 operands (cuBLASLt GEMM with the
	// activations rounded to bf16; the flash prefill attention): a 2^-9
	// relative rounding gives an NMSE near 1e-6.
	tolBF16 = 1e-4
)

func (c *conf) randn(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(c.rng.NormFloat64())
	}
	return v
}

// pair makes the same buffer on both backends.
func (c *conf) pair(v []float32) (g, h kernels.Buf) {
	g, h = c.g.NewBuf(len(v)), c.c.NewBuf(len(v))
	c.g.Write(g, 0, v)
	c.c.Write(h, 0, v)
	return g, h
}

// outPair makes an output buffer: NaN on the GPU (to catch unwritten
// elements), zero on the CPU.
func (c *conf) outPair(n int) (g, h kernels.Buf) {
	nan := make([]float32, n)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	g, h = c.g.NewBuf(n), c.c.NewBuf(n)
	c.g.Write(g, 0, nan)
	return g, h
}

func (c *conf) check(op, shape string, g, h kernels.Buf, n int, tol float64) {
	a, b := make([]float32, n), make([]float32, n)
	c.g.Read(g, 0, a)
	c.c.Read(h, 0, b)
	c.compare(op, shape, a, b, tol)
}

// compare is check of values already on the host: a from the GPU, b from
// the CPU.
func (c *conf) compare(op, shape string, a, b []float32, tol float64) {
	c.n++
	n := len(a)
	var num, den float64
	unwritten := 0
	for i := range a {
		if math.IsNaN(float64(a[i])) || math.IsInf(float64(a[i]), 0) {
			unwritten++
			continue
		}
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	nmse := num / max(den, 1e-30)
	status := "ok"
	if err := c.g.Err(); err != nil {
		status = "FAIL (" + err.Error() + ")"
	} else if unwritten > 0 {
		status = fmt.Sprintf("FAIL (%d of %d elements not finite)", unwritten, n)
	} else if nmse > tol || math.IsNaN(nmse) {
		status = fmt.Sprintf("FAIL (tolerance %.0e)", tol)
	}
	if status != "ok" {
		c.failed++
	}
	fmt.Printf("%-12s %-40s nmse %.3e  %s\n", op, shape, nmse, status)
	if c.g.Err() != nil {
		fmt.Fprintln(os.Stderr, "CUDA context is broken; stopping")
		os.Exit(1)
	}
}

// weight makes a random weight of the given format, loaded on both.
func (c *conf) weight(dt kernels.DType, shape []int, block [2]int) (g, h kernels.Tensor) {
	return c.load(randomWeight(c.rng, dt, shape, block))
}

// randomWeight is a weight of a float format (F32, F16, BF16, or F8E4M3
// with scale blocks of block) with values near N(0, 1/cols): conformance's
// cases and qbench's matrices.
func randomWeight(rng *rand.Rand, dt kernels.DType, shape []int, block [2]int) *kernels.Weight {
	w := &kernels.Weight{Name: fmt.Sprintf("w%v", shape), DType: dt, Shape: shape}
	rows, cols := w.Rows(), w.Cols()
	n := rows * cols
	std := 1 / math.Sqrt(float64(cols))
	switch dt {
	case kernels.F32:
		w.Data = make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(w.Data[4*i:], math.Float32bits(float32(rng.NormFloat64()*std)))
		}
	case kernels.F16:
		w.Data = make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(w.Data[2*i:], f32ToF16(float32(rng.NormFloat64()*std)))
		}
	case kernels.BF16:
		w.Data = make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(w.Data[2*i:], uint16(math.Float32bits(float32(rng.NormFloat64()*std))>>16))
		}
	case kernels.F8E4M3:
		w.Data = make([]byte, n)
		for i := range n {
			v := byte(rng.IntN(256))
			if v&0x7f == 0x7f { // NaN encodings
				v &^= 1
			}
			w.Data[i] = v
		}
		w.ScaleBlock = block
		w.Scale = make([]float32, ((rows+block[0]-1)/block[0])*((cols+block[1]-1)/block[1]))
		for i := range w.Scale {
			w.Scale[i] = float32(std) * (0.5 + rng.Float32()) / 64
		}
	}
	return w
}

func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00
	}
	return sign | uint16(exp)<<10 | uint16(mant>>13)
}

func (c *conf) run() {
	c.section("base")
	// MatMul: GEMV (rows ≤ 8) and tensor-core GEMM, every weight format,
	// aligned and ragged shapes; FP8 prefill on the dequantized bf16 chunks
	// (the E4M3 paths have their own cases, fp8Prefill).
	wasMMA, wasLt := c.g.SetFP8Prefill(false, false)
	type mm struct {
		dt            kernels.DType
		rows, out, in int
		block         [2]int
	}
	for _, s := range []mm{
		{kernels.BF16, 1, 4096, 4096, [2]int{}}, {kernels.BF16, 1, 1000, 72, [2]int{}}, {kernels.BF16, 3, 256, 512, [2]int{}},
		{kernels.BF16, 8, 130, 64, [2]int{}}, {kernels.BF16, 9, 300, 200, [2]int{}}, {kernels.BF16, 64, 512, 1024, [2]int{}},
		{kernels.BF16, 130, 96, 64, [2]int{}}, {kernels.BF16, 5, 33, 30, [2]int{}}, {kernels.BF16, 20, 33, 30, [2]int{}},
		{kernels.BF16, 512, 1024, 4096, [2]int{}},
		{kernels.F8E4M3, 1, 512, 1024, [2]int{128, 128}}, {kernels.F8E4M3, 4, 512, 1024, [2]int{128, 128}},
		{kernels.F8E4M3, 40, 512, 1024, [2]int{128, 128}}, {kernels.F8E4M3, 1, 64, 64, [2]int{32, 32}},
		{kernels.F8E4M3, 16, 128, 64, [2]int{32, 32}}, {kernels.F8E4M3, 2, 40, 24, [2]int{16, 8}},
		{kernels.F8E4M3, 33, 40, 24, [2]int{16, 8}},
		{kernels.F8E4M3, 1, 1024, 5120, [2]int{128, 128}}, {kernels.F8E4M3, 1, 1000, 192, [2]int{16, 128}},
		{kernels.F8E4M3, 1, 40, 24064, [2]int{128, 128}}, {kernels.F8E4M3, 1, 24, 24128, [2]int{128, 128}},
		// More tiles than SMs with a ragged last tile, a half last unit,
		// scale rows of 16.
		{kernels.F8E4M3, 1, 2200, 960, [2]int{128, 128}}, {kernels.F8E4M3, 1, 2117, 2112, [2]int{16, 128}},
		// FP8 prefill through dequantized bf16 chunks: two chunks of the
		// 256 MB scratch (32768 + 7232 rows), a ragged row count.
		{kernels.F8E4M3, 64, 40000, 4096, [2]int{128, 128}}, {kernels.F8E4M3, 70, 1000, 256, [2]int{128, 128}},
		{kernels.F32, 1, 64, 48, [2]int{}}, {kernels.F32, 17, 64, 48, [2]int{}}, {kernels.F16, 2, 64, 48, [2]int{}},
		{kernels.F16, 70, 64, 48, [2]int{}},
	} {
		wg, wh := c.weight(s.dt, []int{s.out, s.in}, s.block)
		xg, xh := c.pair(c.randn(s.rows * s.in))
		yg, yh := c.outPair(s.rows * s.out)
		c.g.MatMul(yg, xg, wg, s.rows)
		c.c.MatMul(yh, xh, wh, s.rows)
		tol := tolExact * 10
		if s.rows == 1 {
			tol = tolGEMV(s.dt)
		}
		if s.rows > 8 {
			tol = tolTF32
			if s.dt == kernels.BF16 || s.dt == kernels.F8E4M3 && s.rows >= 64 && s.block[1]%16 == 0 {
				tol = tolBF16 // cuBLASLt on bf16 operands (FP8: dequantized chunks)
			}
		}
		c.check("MatMul", fmt.Sprintf("%s rows=%d out=%d in=%d", s.dt, s.rows, s.out, s.in), yg, yh, s.rows*s.out, tol)
	}
	c.g.SetFP8Prefill(wasMMA, wasLt)
	// Deferred single-row GEMVs on one input launched as one kernel (q/k/v,
	// gate/up): all operands are made first so that nothing flushes between.
	{
		outs := []int{256, 64, 64, 1000, 8}
		xg, xh := c.pair(c.randn(512))
		type mmOp struct {
			wg, wh kernels.Tensor
			yg, yh kernels.Buf
		}
		var ops []mmOp
		for _, o := range outs {
			var op mmOp
			op.wg, op.wh = c.weight(kernels.BF16, []int{o, 512}, [2]int{})
			op.yg, op.yh = c.outPair(o)
			ops = append(ops, op)
		}
		for _, op := range ops {
			c.g.MatMul(op.yg, xg, op.wg, 1)
			c.c.MatMul(op.yh, xh, op.wh, 1)
		}
		for i, op := range ops {
			c.check("MatMulGroup", fmt.Sprintf("%d of %d out=%d in=512", i+1, len(ops), outs[i]), op.yg, op.yh, outs[i], tolExact*10)
		}
	}
	// Prefill chains whose first op also writes the GEMM's bf16 input
	// (RMSNorm, SwiGLU): the GEMM must see exactly its input, and not a
	// stale copy once another op has rewritten it (the Add in between).
	{
		const rows, dim, inter = 72, 512, 1024 // SwiGLU writes bf16 from 65536 elements
		nwg, nwh := c.weight(kernels.BF16, []int{dim}, [2]int{})
		wg, wh := c.weight(kernels.BF16, []int{96, dim}, [2]int{})
		dg, dh := c.weight(kernels.BF16, []int{64, inter}, [2]int{})
		xg, xh := c.pair(c.randn(rows * dim))
		ng, nh := c.outPair(rows * dim)
		for i, rewrite := range []bool{false, true} {
			c.g.RMSNorm(ng, xg, nwg, rows, dim, 1e-6)
			c.c.RMSNorm(nh, xh, nwh, rows, dim, 1e-6)
			if rewrite {
				c.g.Add(ng, ng, xg, rows*dim)
				c.c.Add(nh, nh, xh, rows*dim)
			}
			yg, yh := c.outPair(rows * 96)
			c.g.MatMul(yg, ng, wg, rows)
			c.c.MatMul(yh, nh, wh, rows)
			c.check("NormThenGEMM", fmt.Sprintf("rows=%d dim=%d rewritten=%v #%d", rows, dim, rewrite, i), yg, yh, rows*96, tolBF16)
		}
		gg, gh := c.pair(c.randn(rows * inter))
		ug, uh := c.pair(c.randn(rows * inter))
		ag, ah := c.outPair(rows * inter)
		c.g.SwiGLU(ag, gg, ug, rows*inter)
		c.c.SwiGLU(ah, gh, uh, rows*inter)
		yg, yh := c.outPair(rows * 64)
		c.g.MatMul(yg, ag, dg, rows)
		c.c.MatMul(yh, ah, dh, rows)
		c.check("SwiGLUThenGEMM", fmt.Sprintf("rows=%d inter=%d", rows, inter), yg, yh, rows*64, tolBF16)
	}
	// Embed: rows narrower than a block, and rows over several blocks with
	// a ragged last one.
	for _, s := range []struct {
		dt        kernels.DType
		ids, cols int
	}{{kernels.BF16, 13, 96}, {kernels.F32, 13, 96}, {kernels.F16, 13, 96}, {kernels.BF16, 1, 5120},
		{kernels.BF16, 3, 1000}, {kernels.F32, 5, 4100}} {
		tg, th := c.weight(s.dt, []int{500, s.cols}, [2]int{})
		ids := make([]int32, s.ids)
		for i := range ids {
			ids[i] = int32(c.rng.IntN(500))
		}
		yg, yh := c.outPair(s.ids * s.cols)
		c.g.Embed(yg, tg, ids)
		c.c.Embed(yh, th, ids)
		c.check("Embed", fmt.Sprintf("%s ids=%d dim=%d", s.dt, s.ids, s.cols), yg, yh, s.ids*s.cols, tolExact)
	}
	// RMSNorm.
	for _, s := range [][2]int{{1, 4096}, {7, 64}, {32, 16}, {3, 1000}} {
		rows, dim := s[0], s[1]
		wg, wh := c.weight(kernels.BF16, []int{dim}, [2]int{})
		xg, xh := c.pair(c.randn(rows * dim))
		yg, yh := c.outPair(rows * dim)
		c.g.RMSNorm(yg, xg, wg, rows, dim, 1e-6)
		c.c.RMSNorm(yh, xh, wh, rows, dim, 1e-6)
		c.check("RMSNorm", fmt.Sprintf("rows=%d dim=%d", rows, dim), yg, yh, rows*dim, tolExact)
	}
	// Elementwise.
	for _, n := range []int{1, 1000, 4096*3 + 5} {
		ag, ah := c.pair(c.randn(n))
		bg, bh := c.pair(c.randn(n))
		yg, yh := c.outPair(n)
		c.g.Add(yg, ag, bg, n)
		c.c.Add(yh, ah, bh, n)
		c.check("Add", fmt.Sprintf("n=%d", n), yg, yh, n, tolExact)
		yg, yh = c.outPair(n)
		c.g.SwiGLU(yg, ag, bg, n)
		c.c.SwiGLU(yh, ah, bh, n)
		c.check("SwiGLU", fmt.Sprintf("n=%d", n), yg, yh, n, tolExact)
	}
	{
		bg, bh := c.weight(kernels.BF16, []int{100}, [2]int{})
		xg, xh := c.pair(c.randn(300))
		c.g.AddBias(xg, bg, 3, 100)
		c.c.AddBias(xh, bh, 3, 100)
		c.check("AddBias", "rows=3 dim=100", xg, xh, 300, tolExact)
	}
	// RoPE: NeoX and interleaved, full and partial rotary, yarn scale.
	for _, s := range []struct {
		rows, heads, hd, rd int
		neox                bool
		scale               float32
	}{{1, 32, 128, 128, true, 0}, {9, 4, 16, 16, true, 0}, {9, 4, 16, 16, false, 0}, {5, 2, 64, 32, true, 1.2}, {5, 2, 64, 16, false, 0}} {
		inv := make([]float32, s.rd/2)
		for i := range inv {
			inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(s.rd)))
		}
		r := &kernels.RoPE{InvFreq: inv, RotaryDim: s.rd, NeoX: s.neox, Scale: s.scale}
		pos := make([]int32, s.rows)
		for i := range pos {
			pos[i] = int32(c.rng.IntN(5000))
		}
		n := s.rows * s.heads * s.hd
		xg, xh := c.pair(c.randn(n))
		c.g.RoPE(xg, pos, s.heads, s.hd, r)
		c.c.RoPE(xh, pos, s.heads, s.hd, r)
		c.check("RoPE", fmt.Sprintf("rows=%d heads=%d hd=%d rot=%d neox=%v", s.rows, s.heads, s.hd, s.rd, s.neox), xg, xh, n, 1e-9)
	}
	// Gather / ScatterAdd.
	{
		const dim = 70
		sg, sh := c.pair(c.randn(20 * dim))
		idx := []int32{3, 19, 0, 7, 7}
		yg, yh := c.outPair(len(idx) * dim)
		c.g.Gather(yg, sg, idx, dim)
		c.c.Gather(yh, sh, idx, dim)
		c.check("Gather", "rows=5 dim=70", yg, yh, len(idx)*dim, tolExact)
		dg, dh := c.pair(c.randn(20 * dim))
		w := []float32{0.5, -1, 2, 0.25, 1}
		c.g.ScatterAdd(dg, yg, []int32{1, 4, 19, 0, 2}, w, dim)
		c.c.ScatterAdd(dh, yh, []int32{1, 4, 19, 0, 2}, w, dim)
		c.check("ScatterAdd", "rows=5 dim=70", dg, dh, 20*dim, tolExact)
	}
	// Each attention pass on the same data.
	c.section("attention")
	c.attention()
	c.g.SetGQAFrom(1)           // the same shapes on attn_gqa at every context length,
	c.g.SetPrefillSplits(false) // and prefill attention never split
	c.section("attention")
	c.attention()
	c.g.SetGQAFrom(0)
	c.g.SetPrefillSplits(true)
	for _, v := range []string{"regs", "q4"} { // the other prefill kernels
		c.g.SetAttnPrefill(v)
		c.section("attention")
		c.attention()
	}
	c.g.SetAttnPrefill("")
	c.kvHalfSections()
	for _, s := range []struct {
		name string
		run  func()
	}{{"fused", c.fused}, {"quant", c.quant}, {"hybrid", c.hybrid}, {"moe", c.moe}, {"tpnorm", c.tpNorm},
		{"fp8prefill", c.fp8Prefill}, {"draw", func() { c.draw(); c.drawCaptured() }}, {"argmax", c.argmax}} {
		c.section(s.name)
		s.run()
	}
}

// kvHalfSections runs the attention cases and the fused rotary ones over
// float16 KV pools on both backends: the same rounding of every stored
// row, so the tolerances stay those of the float32 pools. attn_gqa and
// the unsplit prefill get a pass of their own, as above.
func (c *conf) kvHalfSections() {
	c.kvHalf = true
	defer func() { c.kvHalf = false }()
	c.section("attention f16")
	c.attention()
	c.g.SetGQAFrom(1)
	c.g.SetPrefillSplits(false)
	c.section("attention f16")
	c.attention()
	c.g.SetGQAFrom(0)
	c.g.SetPrefillSplits(true)
	c.section("rope f16")
	c.ropeStore()
	c.ropeAttention()
	c.section("quant after attention f16")
	c.attnRounded()
}

// attention checks StoreKV, CopyKVBlock and Attention (decode and prefill
// rows, GQA, shuffled block tables).
func (c *conf) attention() {
	for _, s := range []struct {
		heads, kvh, hd, bs, start, rows int
	}{{4, 2, 16, 4, 37, 1}, {32, 8, 128, 16, 600, 1}, {8, 8, 64, 16, 5, 1}, {4, 2, 16, 4, 0, 9}, {4, 2, 16, 4, 20, 9},
		{32, 8, 128, 16, 0, 200}, {6, 2, 256, 8, 100, 3}, {32, 8, 128, 16, 300, 130}, {8, 2, 64, 16, 0, 64},
		{16, 4, 64, 8, 33, 100}, {4, 4, 128, 16, 1000, 16}, {6, 2, 256, 16, 10, 40},
		// Decode shapes of attn_gqa: Llama-3 at a long context, wide
		// groups (64/8; 48/4 and 64/4 split into head subgroups), no GQA,
		// hd 256, odd head dims (80: idle column threads; 20: an odd count
		// of float4 columns; 18: attn_partial), several rows (10/9: the first
		// rows' contexts leave their last split empty), bs 64.
		{32, 8, 128, 16, 8000, 1}, {64, 8, 128, 16, 700, 1}, {48, 4, 64, 16, 300, 2}, {64, 4, 128, 64, 200, 1},
		{16, 16, 128, 16, 500, 1}, {24, 4, 256, 16, 900, 1}, {24, 4, 256, 64, 50, 5}, {40, 8, 80, 16, 130, 1},
		{12, 4, 20, 8, 77, 3}, {4, 2, 18, 4, 50, 1}, {8, 2, 64, 16, 10, 9}, {32, 8, 128, 64, 2000, 4},
		{32, 8, 128, 16, 511, 8},
		// Prefill rows over a long context: the split-context path (an
		// append to a long session; a partial last tile; hd 64; splits past
		// some rows' causal end). The GQA pass below runs them unsplit.
		{32, 8, 128, 16, 7700, 64}, {8, 2, 64, 16, 3000, 70}, {4, 2, 128, 16, 1500, 33}, {8, 8, 128, 8, 300, 200},
		// Head dim 256 (Qwen3.5's gated attention): a prefill with a
		// ragged last tile, a split-context append.
		{24, 4, 256, 16, 0, 130}, {24, 4, 256, 16, 3000, 64}} {
		ctx := s.start + s.rows
		kv, table, _ := c.filledKV(s.kvh, s.hd, s.bs, ctx, ctx)
		pg, ph := kv.g, kv.h
		// Move the first block elsewhere (copy on write) and point the table
		// at the copy: a spare block no position uses.
		spare := spareBlock(table, kv.spec.Blocks)
		c.g.CopyKVBlock(pg, int(spare), int(table[0]))
		c.c.CopyKVBlock(ph, int(spare), int(table[0]))
		table[0] = spare
		qn := s.rows * s.heads * s.hd
		qg, qh := c.pair(c.randn(qn))
		yg, yh := c.outPair(qn)
		seq := kernels.AttnSeq{Table: table, Start: s.start}
		scale := float32(1 / math.Sqrt(float64(s.hd)))
		c.g.Attention(yg, qg, pg, 1, seq, s.rows, s.heads, scale)
		c.c.Attention(yh, qh, ph, 1, seq, s.rows, s.heads, scale)
		tol := 1e-9
		if s.rows >= 16 && (s.hd == 64 || s.hd == 128 || s.hd == 256) {
			tol = tolBF16 // the flash prefill kernel (bf16 tensor cores)
		}
		c.check("Attention", fmt.Sprintf("heads=%d/%d hd=%d bs=%d start=%d rows=%d", s.heads, s.kvh, s.hd, s.bs, s.start, s.rows), yg, yh, qn, tol)
	}
}

// spareBlock is a block of the pool that table does not use.
func spareBlock(table []int32, blocks int) int32 {
	for b := int32(blocks - 1); b >= 0; b-- {
		if !slices.Contains(table, b) {
			return b
		}
	}
	panic("conformance: no spare KV block")
}
