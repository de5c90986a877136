//go:build cuda

package main

import (
	"encoding/binary"
	"fmt"
	"math"

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
			// qmv (quant_mmv.cuh): row counts off its 2 or 4 rows per warp
			// and 16/wpr or 32/wpr rows per block, block counts off its
			// steps of 4 (Q4_K: 8) blocks.
			shapes = append(shapes, mm{1, 7, 256}, mm{1, 33, 1280}, mm{1, 4099, 4096}, mm{1, 513, 12288}, mm{1, 130, 768},
				mm{1, 65, 2304}, mm{1, 1027, 3328})
			// Tall ones, as an LM head (a dozen waves of qmv's blocks), ragged
			// ones, one not regrouped (Q6_K at 1280 columns).
			shapes = append(shapes, mm{1, 33001, 4096}, mm{1, 40000, 1024}, mm{1, 36001, 1280})
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
	// Embed of tables of whole groups, which the backend holds regrouped
	// (Q4_KG, Q6_KG, Q8_0G).
	for _, dt := range []kernels.DType{kernels.Q4_K, kernels.Q6_K, kernels.Q8_0} {
		w := &kernels.Weight{Name: "embd", DType: dt, Shape: []int{300, 2048}, Data: randomBlocks(c.rng, dt, 300, 2048, 1e-3)}
		tg, th := c.load(w)
		ids := []int32{0, 299, 7, 7, 150}
		yg, yh := c.outPair(len(ids) * 2048)
		c.g.Embed(yg, tg, ids)
		c.c.Embed(yh, th, ids)
		c.check("QEmbed", fmt.Sprintf("%s (regrouped) ids=5 dim=2048", dt), yg, yh, len(ids)*2048, tolExact)
	}
	// The chunked prefill path (scratch smaller than the matrix): chunks of
	// 64 rows, the last one ragged.
	old := cuda.QuantScratchBytes
	cuda.QuantScratchBytes = 64 * 512 * 2
	c.quantMatMul(kernels.Q4_K, 40, 200, 512)
	c.quantMatMul(kernels.Q6_K, 40, 200, 512)
	c.quantMatMul(kernels.Q6_K, 40, 200, 1024) // Q6_KG (rows of whole 1024-column groups)
	c.quantMatMul(kernels.Q4_K, 40, 200, 2048) // Q4_KG
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
	qw := c.quantWeight
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
		// Fewer steps a row, rows not whole groups of 4.
		{2048, []kernels.DType{kernels.Q4_K, kernels.Q4_K}, []int{1000, 77}},
		{1024, []kernels.DType{kernels.Q4_K}, []int{50}},
		// An LM head behind the final norm.
		{1024, []kernels.DType{kernels.Q6_K}, []int{40003}},
		{2048, []kernels.DType{kernels.Q8_0}, []int{36000}},
	} {
		in := s.in
		xv := c.randn(in)
		xg, xh := c.pair(xv)
		gam, ng, nh := c.normVec(in)
		normed := c.c.NewBuf(in)
		c.c.RMSNorm(normed, xh, nh, 1, in, 1e-6)
		normed8 := c.normInt8(xv, gam, 1e-6)
		var dg, dh, d8 []kernels.Buf
		var wg []kernels.Tensor
		for i, out := range s.outs {
			g, h := qw(s.dts[i], out, in)
			yg, yh := c.outPair(out)
			y8 := c.c.NewBuf(out)
			c.c.MatMul(yh, normed, h, 1)
			c.c.MatMul(y8, normed8, h, 1)
			wg, dg, dh, d8 = append(wg, g), append(dg, yg), append(dh, yh), append(d8, y8)
		}
		shape := fmt.Sprintf("%v in=%d out=%v", s.dts, in, s.outs)
		if !c.g.NormMatMul(dg, xg, ng, 1e-6, wg, 1) {
			declined("NormMatMul", shape)
			continue
		}
		for i, out := range s.outs {
			c.checkInt8("NormMatMul", fmt.Sprintf("%s #%d", shape, i), dg[i], d8[i], dh[i], out)
		}
	}
	// NormSwiGLU: Qwen3-8B's gate/up, ragged ones.
	for _, s := range []struct {
		dt      kernels.DType
		out, in int
	}{{kernels.Q4_K, 12288, 4096}, {kernels.Q6_K, 101, 512}, {kernels.Q8_0, 37, 768}, {kernels.Q4_K, 3, 1280},
		// Q6_KG: the rounding kernel of its own (qmv_swiglu_qg), then the
		// plain one (an output off the rounding's 32).
		{kernels.Q6_K, 1024, 2048}, {kernels.Q6_K, 101, 1024},
		// Q4_K's passes back to back (qmv_swiglu_qf): fewer steps, fewer blocks.
		{kernels.Q4_K, 2048, 2048}, {kernels.Q4_K, 96, 1024}} {
		xv := c.randn(s.in)
		xg, xh := c.pair(xv)
		gam, ng, nh := c.normVec(s.in)
		gg, gh := qw(s.dt, s.out, s.in)
		ug, uh := qw(s.dt, s.out, s.in)
		ag, ah := c.outPair(s.out)
		normed, u := c.c.NewBuf(s.in), c.c.NewBuf(s.out)
		c.c.RMSNorm(normed, xh, nh, 1, s.in, 1e-5)
		c.c.MatMul(ah, normed, gh, 1)
		c.c.MatMul(u, normed, uh, 1)
		c.c.SwiGLU(ah, ah, u, s.out)
		normed8, a8 := c.normInt8(xv, gam, 1e-5), c.c.NewBuf(s.out)
		c.c.MatMul(a8, normed8, gh, 1)
		c.c.MatMul(u, normed8, uh, 1)
		c.c.SwiGLU(a8, a8, u, s.out)
		shape := fmt.Sprintf("%s out=%d in=%d", s.dt, s.out, s.in)
		if !c.g.NormSwiGLU(ag, xg, ng, 1e-5, gg, ug, 1) {
			declined("NormSwiGLU", shape)
			continue
		}
		c.checkInt8("NormSwiGLU", shape, ag, a8, ah, s.out)
	}
	// MatMulAdd: o_proj and both ffn_down formats of Qwen3-8B, ragged ones.
	for _, s := range []struct {
		dt      kernels.DType
		out, in int
	}{{kernels.Q4_K, 4096, 4096}, {kernels.Q4_K, 4096, 12288}, {kernels.Q6_K, 4096, 12288}, {kernels.Q6_K, 130, 512},
		{kernels.Q8_0, 33, 256}, {kernels.Q4_K, 6, 2304}} {
		a := c.quantAdd(s.dt, s.out, s.in)
		shape := fmt.Sprintf("%s out=%d in=%d", s.dt, s.out, s.in)
		if !c.g.MatMulAdd(a.ag, a.xg, a.wg, 1) {
			declined("MatMulAdd", shape)
			continue
		}
		c.checkInt8("MatMulAdd", shape, a.ag, a.a8, a.ah, s.out)
	}
	// MatMulAdd straight after NormSwiGLU, a decode layer's down projection:
	// with the rounding SwiGLU (SetSwiGLURound) it reads the int8 rounding
	// the SwiGLU GEMV left instead of rounding the activation itself. The
	// SwiGLU formats, then the down projection's.
	for _, s := range []struct {
		up, down   kernels.DType
		hid, inter int
	}{{kernels.Q4_K, kernels.Q6_K, 4096, 12288}, {kernels.Q4_K, kernels.Q4_K, 4096, 12288},
		{kernels.Q6_K, kernels.Q8_0, 512, 512}, {kernels.Q8_0, kernels.Q4_K, 768, 768}} {
		xv := c.randn(s.hid)
		xg, xh := c.pair(xv)
		gam, ng, nh := c.normVec(s.hid)
		gg, gh := qw(s.up, s.inter, s.hid)
		ug, uh := qw(s.up, s.inter, s.hid)
		dg, dh := qw(s.down, s.hid, s.inter)
		actg := c.g.NewBuf(s.inter)
		// The exact reference: float activations throughout.
		normed, act, u := c.c.NewBuf(s.hid), c.c.NewBuf(s.inter), c.c.NewBuf(s.inter)
		c.c.RMSNorm(normed, xh, nh, 1, s.hid, 1e-5)
		c.c.MatMul(act, normed, gh, 1)
		c.c.MatMul(u, normed, uh, 1)
		c.c.SwiGLU(act, act, u, s.inter)
		acc := c.randn(s.hid)
		ag, ah := c.pair(acc)
		a8 := c.c.NewBuf(s.hid)
		c.c.Write(a8, 0, acc)
		y := c.c.NewBuf(s.hid)
		c.c.MatMul(y, act, dh, 1)
		c.c.Add(ah, ah, y, s.hid)
		// The int8 reference: both inputs rounded as the GPU rounds them.
		normed8 := c.normInt8(xv, gam, 1e-5)
		c.c.MatMul(act, normed8, gh, 1)
		c.c.MatMul(u, normed8, uh, 1)
		c.c.SwiGLU(act, act, u, s.inter)
		c.c.MatMul(y, c.int8Buf(act, s.inter), dh, 1)
		c.c.Add(a8, a8, y, s.hid)
		shape := fmt.Sprintf("after NormSwiGLU %s/%s hidden=%d inter=%d", s.up, s.down, s.hid, s.inter)
		was := c.g.SetSwiGLURound(true)
		ok := c.g.NormSwiGLU(actg, xg, ng, 1e-5, gg, ug, 1) && c.g.MatMulAdd(ag, actg, dg, 1)
		c.g.SetSwiGLURound(was)
		if !ok {
			declined("NormSwiGLU+MatMulAdd", shape)
			continue
		}
		c.checkInt8("MatMulAdd", shape, ag, a8, ah, s.hid)
	}
	// NormSwiGLU or NormMatMul straight after a MatMulAdd into their x: a
	// decode layer's o projection then gate/up, its down projection then
	// the next layer's q/k/v. The add launches when the norm op comes, as
	// qmv_add_q, which rounds the new residual times the norm weight for
	// it (no qx_norm launch); then the residual itself is checked.
	for _, s := range []struct {
		add     kernels.DType
		hid, in int
		next    kernels.DType
		outs    []int // NormMatMul's matrices, or with swiglu gate/up's width
		swiglu  bool
	}{
		{kernels.Q4_K, 4096, 4096, kernels.Q4_K, []int{12288}, true},
		{kernels.Q6_K, 4096, 12288, kernels.Q4_K, []int{4096, 1024, 1024}, false},
		{kernels.Q8_0, 512, 768, kernels.Q6_K, []int{101}, true},
		{kernels.Q4_K, 256, 256, kernels.Q8_0, []int{37, 5}, false},
		{kernels.Q4_K, 1280, 5120, kernels.Q4_K, []int{3}, true},
		// qmv_add_q2_4 with one step a warp (two loaded before the wait at most).
		{kernels.Q4_K, 2048, 2048, kernels.Q4_K, []int{1024}, true},
		// Down projections: Qwen3-8B's Q4_K one (three warps a row
		// group), and two warps a group of ragged steps (1536 columns:
		// 6 blocks, a step of 4 and one of 2).
		{kernels.Q4_K, 4096, 12288, kernels.Q4_K, []int{4096, 1024, 1024}, false},
		{kernels.Q6_K, 1024, 1536, kernels.Q8_0, []int{64}, false},
	} {
		a := c.quantAdd(s.add, s.hid, s.in)
		av := make([]float32, s.hid)
		c.c.Read(a.a8, 0, av)
		gam, ng, nh := c.normVec(s.hid)
		normed := c.c.NewBuf(s.hid)
		c.c.RMSNorm(normed, a.ah, nh, 1, s.hid, 1e-6)
		normed8 := c.normInt8(av, gam, 1e-6)
		shape := fmt.Sprintf("after MatMulAdd %s %dx%d, %s %v", s.add, s.hid, s.in, s.next, s.outs)
		var outg, outh, out8 []kernels.Buf
		var ok bool
		if s.swiglu {
			n := s.outs[0]
			gg, gh := qw(s.next, n, s.hid)
			ug, uh := qw(s.next, n, s.hid)
			actg, acth := c.outPair(n)
			act8, u := c.c.NewBuf(n), c.c.NewBuf(n)
			c.c.MatMul(acth, normed, gh, 1)
			c.c.MatMul(u, normed, uh, 1)
			c.c.SwiGLU(acth, acth, u, n)
			c.c.MatMul(act8, normed8, gh, 1)
			c.c.MatMul(u, normed8, uh, 1)
			c.c.SwiGLU(act8, act8, u, n)
			ok = c.g.MatMulAdd(a.ag, a.xg, a.wg, 1) && c.g.NormSwiGLU(actg, a.ag, ng, 1e-6, gg, ug, 1)
			outg, outh, out8 = []kernels.Buf{actg}, []kernels.Buf{acth}, []kernels.Buf{act8}
		} else {
			var wgs []kernels.Tensor
			for _, n := range s.outs {
				g, h := qw(s.next, n, s.hid)
				dg, dh := c.outPair(n)
				d8 := c.c.NewBuf(n)
				c.c.MatMul(dh, normed, h, 1)
				c.c.MatMul(d8, normed8, h, 1)
				wgs, outg, outh, out8 = append(wgs, g), append(outg, dg), append(outh, dh), append(out8, d8)
			}
			ok = c.g.MatMulAdd(a.ag, a.xg, a.wg, 1) && c.g.NormMatMul(outg, a.ag, ng, 1e-6, wgs, 1)
		}
		if !ok {
			declined("MatMulAdd+norm op", shape)
			continue
		}
		for i := range outg {
			c.checkInt8("MatMulAdd+norm op", fmt.Sprintf("%s #%d", shape, i), outg[i], out8[i], outh[i], outg[i].Len())
		}
		c.checkInt8("MatMulAdd", shape, a.ag, a.a8, a.ah, s.hid)
	}
	c.attnRounded()
}

// attnRounded checks MatMulAdd straight after RoPEAttention, the o
// projection of a decode layer: the attention's output rounded to int8 by
// its own last split (attn_decode_q_4) or by qx_merge. Contexts of one
// split, a few and many, the 192 positions of bench's last step, a ragged
// last split and a group of eight query heads a kv head; over float32
// pools, and float16 ones from kvHalfSections (attn_decode_q_4h).
func (c *conf) attnRounded() {
	for _, s := range []struct{ heads, kvh, start int }{{32, 8, 600}, {32, 8, 5}, {16, 4, 8000}, {8, 8, 0},
		{32, 8, 191}, {32, 8, 200}, {16, 2, 256}} {
		const hd, bs, out = 128, 16, 512
		ctx := s.start + 1
		kv, table, slots := c.filledKV(s.kvh, hd, bs, ctx, s.start)
		pos := []int32{int32(s.start)}
		in := c.newRopeInputs(kv, 1, s.heads, hd, hd, true, true, false, pos, slots[s.start:])
		seq := kernels.AttnSeq{Table: table, Start: s.start}
		scale := float32(1 / math.Sqrt(hd))
		qn := s.heads * hd
		yg, yh := c.outPair(qn)
		c.c.Attention(yh, in.qh, kv.h, 1, seq, 1, s.heads, scale)
		acc := c.randn(out)
		ah := c.c.NewBuf(out)
		c.c.Write(ah, 0, acc)
		a8 := c.c.NewBuf(out)
		c.c.Write(a8, 0, acc)
		wg, wh := c.quantWeight(kernels.Q4_K, out, qn)
		y := c.c.NewBuf(out)
		c.c.MatMul(y, yh, wh, 1)
		c.c.Add(ah, ah, y, out)
		c.c.MatMul(y, c.int8Buf(yh, qn), wh, 1)
		c.c.Add(a8, a8, y, out)
		for _, round := range []bool{true, false} {
			shape := fmt.Sprintf("after RoPEAttention heads=%d/%d start=%d round=%v", s.heads, s.kvh, s.start, round)
			ag := c.g.NewBuf(out)
			c.g.Write(ag, 0, acc)
			if !c.attnThenMatMulAdd(ag, yg, wg, in, kv, pos, slots[s.start:], seq, s.heads, s.kvh, hd, scale, round, shape) {
				continue
			}
			c.checkInt8("MatMulAdd", shape, ag, a8, ah, out)
		}
	}
}

// attnThenMatMulAdd runs RoPEAttention into y, then the block-format
// MatMulAdd of y into acc, with the attention's merge left to that
// projection (re-armed for the case, as the ops before may have turned it
// off): rounded by the attention's last split (round) or by qx_merge. It
// reports whether both ran (a decline is recorded).
func (c *conf) attnThenMatMulAdd(acc, y kernels.Buf, w kernels.Tensor, in ropeInputs, kv kvPools, pos, slots []int32,
	seq kernels.AttnSeq, heads, kvh, hd int, scale float32, round bool, shape string) bool {
	defer c.g.SetAttnDefer(c.g.SetAttnDefer(true))
	defer c.g.SetAttnRound(c.g.SetAttnRound(round))
	if !c.g.RoPEAttention(y, in.qg, in.kg, in.vg, in.nqg, in.nkg, 1e-6, kv.g, 1, pos, slots, seq, heads, kvh, hd, in.r,
		scale) {
		c.declined("RoPEAttention", shape)
		return false
	}
	if !c.g.MatMulAdd(acc, y, w, 1) {
		if cuda.QuantFused() {
			c.declined("MatMulAdd", shape)
		}
		return false
	}
	return true
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
	shape := fmt.Sprintf("%s rows=%d out=%d in=%d", dt, rows, out, in)
	if rows == 1 && cuda.QuantInt8Act(dt) { // int8-rounded activations (dp4a GEMV)
		y8 := c.c.NewBuf(out)
		c.c.MatMul(y8, c.int8Buf(xh, in), wh, 1)
		c.checkInt8("QMatMul", shape, yg, y8, yh, out)
		return
	}
	c.check("QMatMul", shape, yg, yh, rows*out, tol)
}

// The int8-activation kernels (qx_norm + qmv, and v1's qx_quant +
// qgemv8_*) round the activation per 32 elements to d·q, d = max|x|/127,
// q = round(x/d) (ties to even), and sum exactly by dp4a. That rounding
// alone gives an NMSE against the fp32 result that depends on the input,
// not on the kernel: kernels/cuda's TestInt8RoundingNMSE emulates it on
// conformance's distributions. With x ~ N(0,1) it is ~3e-5 (the per-32
// max is ~2.1σ); the fused cases round x·γ with conformance's random norm
// vector γ ~ N(0, 1/in), a product of normals whose per-32 max is ~3σ, so
// ~6e-5; random Q4_K blocks all have a positive row mean (d·sc·7.5 −
// dmin·m ≈ 0.2), so a large share of every output is that mean times Σx
// and the NMSE of one x is a ratio of two single χ²₁ draws: up to ~6×
// its median (emulated: 3% of x ~ N(0,1) and 13% of x·γ draws exceed
// 1e-4 for a 4096-wide Q4_K GEMV); SwiGLU multiplies two such results.
// So checkInt8 checks the GPU against the CPU fed the same int8-rounded
// activation (tolInt8: only fp32 order and the odd tie rounded the other
// way differ; a dropped or doubled partial sum is far above it), and
// against the fp32 CPU result within twice the rounding's own NMSE for
// this input (at least tolBF16).
const tolInt8 = 1e-6

// normVec is conformance's random norm vector (c.weight's F32 values, the
// same draws), also on the host.
// quantWeight is a random out × in weight of block format dt on both
// backends.
func (c *conf) quantWeight(dt kernels.DType, out, in int) (g, h kernels.Tensor) {
	return c.load(&kernels.Weight{Name: "w", DType: dt, Shape: []int{out, in}, Data: randomBlocks(c.rng, dt, out, in, 1e-3)})
}

// addCase is a MatMulAdd acc += W·x of a block-format W: its GPU inputs
// (ag holds acc) and the CPU's results, exact (ah) and with x rounded to
// int8 as the kernels round it (a8).
type addCase struct {
	ag, ah, a8, xg kernels.Buf
	wg             kernels.Tensor
}

// quantAdd makes an addCase of random acc, x and W (dt, out × in).
func (c *conf) quantAdd(dt kernels.DType, out, in int) addCase {
	acc := c.randn(out)
	ag, ah := c.pair(acc)
	a8 := c.c.NewBuf(out)
	c.c.Write(a8, 0, acc)
	xg, xh := c.pair(c.randn(in))
	wg, wh := c.quantWeight(dt, out, in)
	y := c.c.NewBuf(out)
	c.c.MatMul(y, xh, wh, 1)
	c.c.Add(ah, ah, y, out)
	c.c.MatMul(y, c.int8Buf(xh, in), wh, 1)
	c.c.Add(a8, a8, y, out)
	return addCase{ag: ag, ah: ah, a8: a8, xg: xg, wg: wg}
}

func (c *conf) normVec(n int) (v []float32, g, h kernels.Tensor) {
	v = make([]float32, n)
	data := make([]byte, 4*n)
	for i := range v {
		v[i] = float32(c.rng.NormFloat64() / math.Sqrt(float64(n)))
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v[i]))
	}
	g, h = c.load(&kernels.Weight{Name: fmt.Sprintf("w[%d]", n), DType: kernels.F32, Shape: []int{n}, Data: data})
	return v, g, h
}

// normInt8 is a CPU buffer of the normed activation as qx_norm + qmv
// (norm mode) see it: x·γ rounded to int8 (the same fp32 products, so the
// same integers; rounding RMSNorm's output instead would turn the odd tie
// the other way), times 1/rms.
func (c *conf) normInt8(x, gam []float32, eps float64) kernels.Buf {
	n := len(x)
	xg := make([]float32, n)
	var ss float64
	for i, v := range x {
		ss += float64(v) * float64(v)
		xg[i] = v * gam[i]
	}
	t := c.c.NewBuf(n)
	c.c.Write(t, 0, xg)
	r := c.int8Buf(t, n)
	c.c.Read(r, 0, xg)
	inv := float32(1 / math.Sqrt(ss/float64(n)+eps))
	for i := range xg {
		xg[i] *= inv
	}
	c.c.Write(r, 0, xg)
	return r
}

// int8Buf is a CPU buffer of h's first n values rounded as the kernels
// round activations (n % 32 == 0).
func (c *conf) int8Buf(h kernels.Buf, n int) kernels.Buf {
	v := make([]float32, n)
	c.c.Read(h, 0, v)
	for b := 0; b+32 <= n; b += 32 {
		var am float32
		for _, x := range v[b : b+32] {
			am = max(am, float32(math.Abs(float64(x))))
		}
		d, id := am/127, float32(0)
		if am > 0 {
			id = 127 / am
		}
		for i := b; i < b+32; i++ {
			v[i] = d * float32(math.RoundToEven(float64(v[i]*id)))
		}
	}
	r := c.c.NewBuf(n)
	c.c.Write(r, 0, v)
	return r
}

// checkInt8 checks g, an int8-activation GPU result, against h8 (the CPU
// with the int8-rounded activation) and h (the fp32 CPU result).
func (c *conf) checkInt8(op, shape string, g, h8, h kernels.Buf, n int) {
	c.check(op, shape+" vs int8", g, h8, n, tolInt8)
	a, b := make([]float32, n), make([]float32, n)
	c.c.Read(h8, 0, a)
	c.c.Read(h, 0, b)
	var num, den float64
	for i := range a {
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	c.check(op, shape, g, h, n, max(tolBF16, 2*num/max(den, 1e-30)))
}
