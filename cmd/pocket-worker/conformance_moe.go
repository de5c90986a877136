//go:build cuda

package main

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
)

// moe checks kernels.MoEOps against the CPU (the reference): routing must
// pick the same experts (ids exact, ties included) with the same weights;
// the indexed expert GEMVs (decode) sum in fp32 like the CPU, except one
// row of FP8 experts, which takes the ring kernels' f16 activations on the
// tensor cores (tolF8MMA, as the dense FP8 GEMVs); the grouped prefill
// path goes through the prefill GEMMs (bf16/tf32 tolerances).
func (c *conf) moe() {
	c.moeRoute()
	c.moeQuant()
	type ex struct {
		name                   string
		dt                     kernels.DType
		experts, k, hid, inter int
		block                  [2]int
		rows                   []int
		dnBlock                [2]int // down's scale block where it differs from gate/up's
	}
	for _, s := range []ex{
		// qwen3-30b-a3b widths (32 of its 128 experts keep the weights small).
		{"qwen3-30b-a3b", kernels.BF16, 32, 8, 2048, 768, [2]int{}, []int{1, 3, 16, 40}, [2]int{}},
		{"qwen3-30b-a3b-fp8", kernels.F8E4M3, 32, 8, 2048, 768, [2]int{128, 128}, []int{1, 5, 24, 64}, [2]int{}},
		// deepseek-v3 widths, FP8 as the checkpoint stores them.
		{"deepseek-v3", kernels.F8E4M3, 16, 8, 7168, 2048, [2]int{128, 128}, []int{1, 2}, [2]int{}},
		// minimax-m2 widths, bf16 and FP8; glm-4.5-air's 1408 (11 units).
		{"minimax-m2", kernels.BF16, 16, 8, 3072, 1536, [2]int{}, []int{1}, [2]int{}},
		{"minimax-m2-fp8", kernels.F8E4M3, 16, 8, 3072, 1536, [2]int{128, 128}, []int{1, 3}, [2]int{}},
		{"glm-4.5-air-fp8", kernels.F8E4M3, 16, 8, 4096, 1408, [2]int{128, 128}, []int{1}, [2]int{}},
		// fixture-like.
		{"tiny", kernels.BF16, 8, 2, 64, 32, [2]int{}, []int{1, 7, 17}, [2]int{}},
		{"tiny-fp8", kernels.F8E4M3, 8, 2, 64, 32, [2]int{16, 16}, []int{1, 20}, [2]int{}},
		// GLM-4.5-Air's experts as TP ranks hold them: 1408/4 = 352 rows
		// of gate/up re-blocked to [32, 128] and down's 352 columns to
		// [128, 32] (rank 1 of 4); rank 1 of 2, [64, 128] and [128, 64].
		{"glm-air-tp4-rank1", kernels.F8E4M3, 16, 8, 4096, 352, [2]int{32, 128}, []int{1, 3, 24}, [2]int{128, 32}},
		{"glm-air-tp2-rank1", kernels.F8E4M3, 16, 8, 4096, 704, [2]int{64, 128}, []int{1, 24}, [2]int{128, 64}},
	} {
		r := &kernels.Router{Experts: s.experts, TopK: s.k, NormTopK: true}
		dnBlock := s.dnBlock
		if dnBlock == [2]int{} {
			dnBlock = s.block
		}
		sg, sh := c.moeExperts(r, s.dt, s.dt, s.hid, s.inter, s.block, dnBlock)
		grouped := tolTF32 // rows > 16: the prefill GEMMs
		switch {
		case s.dt == kernels.BF16:
			grouped = tolBF16
		case s.block == [2]int{128, 128} && dnBlock == s.block:
			grouped = tolF8GEMM // expert groups of 9+ rows on cuBLASLt's FP8 GEMM
		}
		one := tolExact * 10
		if s.dt == kernels.F8E4M3 {
			one = tolF8MMA
		}
		for _, rows := range s.rows {
			c.moeCompare(sg, sh, s.experts, s.k, s.hid, rows, one, grouped, -1,
				fmt.Sprintf("%s %s e=%d k=%d rows=%d", s.name, s.dt, s.experts, s.k, rows))
		}
		if s.dt == kernels.F8E4M3 && s.block == [2]int{128, 128} && s.hid%128 == 0 && s.inter%128 == 0 {
			// Widths the ring kernels take (the op declines others).
			c.moeNormAdd(sg, sh, s.experts, s.k, s.hid, fmt.Sprintf("%s %s e=%d k=%d", s.name, s.dt, s.experts, s.k))
		}
		if s.dt == kernels.F8E4M3 && s.k > 2 {
			// A slot without an expert (an id out of range: a failed
			// routing) adds nothing, in the one-row kernels too.
			c.moeCompare(sg, sh, s.experts, s.k, s.hid, 1, one, grouped, 2,
				fmt.Sprintf("%s %s e=%d k=%d rows=1, slot 2 empty", s.name, s.dt, s.experts, s.k))
		}
	}
	for _, s := range [][2]int{{1, 2048}, {3, 100}, {37, 64}} {
		rows, dim := s[0], s[1]
		dg, dh := c.pair(c.randn(rows * dim))
		srcg, srch := c.pair(c.randn(rows * dim))
		gg, gh := c.pair(c.randn(rows))
		c.g.MoEAddGated(dg, srcg, gg, rows, dim)
		c.c.MoEAddGated(dh, srch, gh, rows, dim)
		c.check("MoEAddGated", fmt.Sprintf("rows=%d dim=%d", rows, dim), dg, dh, rows*dim, tolExact)
	}
}

// moeQuant checks the GGUF expert kernels (moe_quant.cu): the decode path
// (up to 16 rows) decodes the blocks in registers against fp32
// activations, so it sums like the CPU (tolExact·10, as quant.go's exact
// GEMV); more rows take the grouped path, whose MatMuls are quant.go's
// (bf16 GEMM beyond 32 rows of an expert, the int8 GEMV for one row of
// Q4_K/Q6_K/Q8_0): bf16 tolerance. Gate/up and down may differ in format,
// as in llama.cpp's Q4_K_M/Q5_K_M files.
func (c *conf) moeQuant() {
	if !cuda.MoEQuant() {
		fmt.Println("MoEExperts   GGUF experts: POCKET_MOE_QUANT=0, host routing (not checked)")
		return
	}
	type ex struct {
		name                   string
		gu, down               kernels.DType
		experts, k, hid, inter int
		rows                   []int
	}
	cases := []ex{
		// qwen3-30b-a3b widths (32 of its 128 experts) as Q4_K_M and
		// Q5_K_M files store them, and in Q8_0.
		{"qwen3-30b-a3b-q4_k_m", kernels.Q4_K, kernels.Q6_K, 32, 8, 2048, 768, []int{1, 3, 16, 40}},
		{"qwen3-30b-a3b-q5_k_m", kernels.Q5_K, kernels.Q6_K, 16, 8, 2048, 768, []int{1, 5}},
		{"qwen3-30b-a3b-q8_0", kernels.Q8_0, kernels.Q8_0, 16, 8, 2048, 768, []int{1, 2, 24}},
		// The GGUF fixtures (models/gguf/testdata): qwen3moe-q4_k and the
		// IQ1_M experts of qwen3moe-mixed-iq1_m.
		{"qwen3moe-q4_k", kernels.Q4_K, kernels.Q4_K, 8, 2, 256, 256, []int{1, 7, 20}},
		{"qwen3moe-mixed-iq1_m", kernels.IQ1_M, kernels.IQ1_M, 8, 2, 256, 256, []int{1, 7, 20}},
		// Q6_K experts of whole 1024-column groups, held as Q6_KG.
		{"q6_k-grouped", kernels.Q6_K, kernels.Q6_K, 8, 2, 1024, 2048, []int{1, 5, 40}},
	}
	// Every format the backend executes as gate/up, each with another as
	// down: hidden/32 = 40 sub-blocks wrap a warp's lanes, and 3 slots ×
	// 768/32 leave the down pass's last lane step partly empty.
	var dts []kernels.DType
	for d := kernels.DType(0); d.Valid(); d++ {
		if kernels.Executes("cuda", d) && d.BlockElems() > 1 {
			dts = append(dts, d)
		}
	}
	for i, d := range dts {
		cases = append(cases, ex{"sweep", d, dts[(i+7)%len(dts)], 8, 3, 1280, 768, []int{1, 4}})
	}
	for _, s := range cases {
		r := &kernels.Router{Experts: s.experts, TopK: s.k, NormTopK: true}
		sg, sh := c.moeExperts(r, s.gu, s.down, s.hid, s.inter, [2]int{}, [2]int{})
		for _, rows := range s.rows { // rows > 16: quant.go's MatMuls
			c.moeCompare(sg, sh, s.experts, s.k, s.hid, rows, tolExact*10, tolBF16, -1, fmt.Sprintf("%s %s/%s e=%d k=%d hid=%d inter=%d rows=%d",
				s.name, s.gu, s.down, s.experts, s.k, s.hid, s.inter, rows))
		}
	}
}

// moeCompare runs MoEExperts over rows random activations and expert
// selections on both backends (experts sg on the GPU, sh on the CPU) and
// checks them: within one for a row, 10·tolExact for the indexed kernels
// of up to 16 rows, grouped for more. A hole ≥ 0 empties that slot of row 0.
func (c *conf) moeCompare(sg, sh kernels.ExpertSet, experts, k, hid, rows int, one, grouped float64, hole int, name string) {
	sel := c.moeSel(rows, experts, k)
	if hole >= 0 {
		sel[hole] = -1
	}
	selg, selh := c.pair(sel)
	xg, xh := c.pair(c.randn(rows * hid))
	yg, yh := c.outPair(rows * hid)
	c.g.MoEExperts(sg, yg, xg, selg, rows)
	c.c.MoEExperts(sh, yh, xh, selh, rows)
	tol := tolExact * 10
	switch {
	case rows == 1:
		tol = one
	case rows > 16:
		tol = grouped
	}
	c.check("MoEExperts", name, yg, yh, rows*hid, tol)
}

// moeNormAdd checks kernels.MoEFusedOps (one row: x += the routed experts
// of rmsnorm(x), and y = them) against the CPU's RMSNorm, MoEExperts and
// Add.
func (c *conf) moeNormAdd(sg, sh kernels.ExpertSet, experts, k, hid int, name string) {
	for _, add := range []bool{true, false} {
		selg, selh := c.pair(c.moeSel(1, experts, k))
		xg, xh := c.pair(c.randn(hid))
		yg, yh := c.outPair(hid)
		ng, nh := c.weight(kernels.F32, []int{hid}, [2]int{})
		dg, dh, what := xg, xh, "add into x"
		if !add {
			dg, dh, what = yg, yh, "write y"
		}
		if !c.g.MoEExpertsNorm(sg, dg, xg, ng, 1e-6, selg, add) {
			c.declined("MoEExpertsNorm", name+" "+what)
			continue
		}
		normed := c.c.NewBuf(hid)
		c.c.RMSNorm(normed, xh, nh, 1, hid, 1e-6)
		if add {
			y := c.c.NewBuf(hid)
			c.c.MoEExperts(sh, y, normed, selh, 1)
			c.c.Add(xh, xh, y, hid)
		} else {
			c.c.MoEExperts(sh, yh, normed, selh, 1)
		}
		c.check("MoEExpertsNorm", name+" "+what, dg, dh, hid, tolF8MMA)
	}
}

// moeRoute compares routing for the families' rules, on continuous logits
// and on logits rounded to quarters (many exact ties, which must break
// toward the lower expert and group as the CPU breaks them).
func (c *conf) moeRoute() {
	for _, s := range []struct {
		name string
		r    kernels.Router
		bias bool
	}{
		{"qwen3-30b-a3b", kernels.Router{Experts: 128, TopK: 8, NormTopK: true}, false},
		{"qwen3-next", kernels.Router{Experts: 512, TopK: 10, NormTopK: true}, false},
		{"softmax-nonorm", kernels.Router{Experts: 60, TopK: 4}, false},
		{"deepseek-v3", kernels.Router{Experts: 256, TopK: 8, Sigmoid: true, NormTopK: true, Groups: 8, TopKGrp: 4, Scale: 2.5}, true},
		{"glm4.5", kernels.Router{Experts: 160, TopK: 8, Sigmoid: true, NormTopK: true, Groups: 1, TopKGrp: 1, Scale: 2.5}, true},
		{"minimax-m2", kernels.Router{Experts: 256, TopK: 8, Sigmoid: true, NormTopK: true}, true},
		{"tiny-grouped", kernels.Router{Experts: 16, TopK: 4, Sigmoid: true, NormTopK: true, Groups: 4, TopKGrp: 2, Scale: 1.5}, true},
		{"tiny", kernels.Router{Experts: 8, TopK: 2, NormTopK: true}, false},
		{"max", kernels.Router{Experts: 1024, TopK: 32, Sigmoid: true, Groups: 64, TopKGrp: 8}, true},
	} {
		for _, ties := range []bool{false, true} {
			r := s.r
			if s.bias {
				r.Bias = c.randn(r.Experts)
				for i := range r.Bias {
					r.Bias[i] = float32(math.Round(float64(r.Bias[i])*2)) / 8
				}
			}
			// Experts of 16×16 bf16: only the router matters here.
			sg, sh := c.moeExperts(&r, kernels.BF16, kernels.BF16, 16, 16, [2]int{}, [2]int{})
			for _, rows := range []int{1, 5, 64} {
				lg := c.randn(rows * r.Experts)
				if ties {
					for i := range lg {
						lg[i] = float32(math.Round(float64(lg[i])*4)) / 4
					}
				}
				lgg, lgh := c.pair(lg)
				selg, selh := c.outPair(kernels.RouteLen(rows, r.TopK))
				c.g.MoERoute(sg, selg, lgg, rows)
				c.c.MoERoute(sh, selh, lgh, rows)
				c.check("MoERoute", fmt.Sprintf("%s ties=%v rows=%d", s.name, ties, rows), selg, selh, kernels.RouteLen(rows, r.TopK), tolExact)
			}
		}
	}
}

// moeExperts makes random experts (gate and up in dt with scale blocks
// block, down in down with dnBlock) and binds them on both backends.
func (c *conf) moeExperts(r *kernels.Router, dt, down kernels.DType, hid, inter int, block, dnBlock [2]int) (g, h kernels.ExpertSet) {
	var ws [2][3][]kernels.Tensor // backend, matrix (gate, up, down), expert
	for range r.Experts {
		for m, shape := range [3][2]int{{inter, hid}, {inter, hid}, {hid, inter}} {
			mdt := dt
			if m == 2 {
				mdt = down
			}
			b := block
			if m == 2 {
				b = dnBlock
			}
			w := c.moeWeight(mdt, shape[0], shape[1], b)
			for b := range ws {
				ws[b][m] = append(ws[b][m], w[b])
			}
		}
	}
	g, err := c.g.NewExperts(r, ws[0][0], ws[0][1], ws[0][2])
	if err != nil {
		panic(err)
	}
	if h, err = c.c.NewExperts(r, ws[1][0], ws[1][1], ws[1][2]); err != nil {
		panic(err)
	}
	return g, h
}

// moeSel makes a routing buffer: k distinct experts per row, positive
// weights.
func (c *conf) moeSel(rows, experts, k int) []float32 {
	sel := make([]float32, kernels.RouteLen(rows, k))
	for r := range rows {
		for j, id := range c.rng.Perm(experts)[:k] {
			sel[r*2*k+j] = float32(id)
			sel[r*2*k+k+j] = 0.05 + c.rng.Float32()
		}
	}
	return sel
}

// moeWeight makes a random [out, in] expert matrix fast (bit patterns from
// one 64-bit draw per four bf16 values, eight FP8 values; GGUF blocks as
// quant_conf.go makes them), loaded on both.
func (c *conf) moeWeight(dt kernels.DType, out, in int, block [2]int) [2]kernels.Tensor {
	w := &kernels.Weight{Name: "expert", DType: dt, Shape: []int{out, in}}
	n := out * in
	switch dt {
	case kernels.BF16:
		w.Data = make([]byte, 2*n)
		for i := 0; i < n; i += 4 {
			u := c.rng.Uint64()
			for j := 0; j < 4 && i+j < n; j++ {
				h := uint16(u >> (16 * j))
				// sign, exponent 2^-8..2^-5, mantissa.
				binary.LittleEndian.PutUint16(w.Data[2*(i+j):], h&0x807f|uint16(119+(h>>7)&3)<<7)
			}
		}
	case kernels.F8E4M3:
		w.Data = make([]byte, n)
		for i := 0; i < n; i += 8 {
			u := c.rng.Uint64()
			for j := 0; j < 8 && i+j < n; j++ {
				v := byte(u >> (8 * j))
				if v&0x7f == 0x7f { // NaN encodings
					v &^= 1
				}
				w.Data[i+j] = v
			}
		}
		w.ScaleBlock = block
		w.Scale = make([]float32, ((out+block[0]-1)/block[0])*((in+block[1]-1)/block[1]))
		for i := range w.Scale {
			w.Scale[i] = float32((0.5 + c.rng.Float64()) / 64 / math.Sqrt(float64(in)))
		}
	default:
		if dt.BlockElems() == 1 {
			panic("moeWeight: " + dt.String())
		}
		w.Data = randomBlocks(c.rng, dt, out, in, 1e-3)
	}
	g, h := c.load(w)
	return [2]kernels.Tensor{g, h}
}
