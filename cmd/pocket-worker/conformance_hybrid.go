//go:build cuda

package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// hybrid checks the optional op sets of the hybrid and latent-attention
// architectures against the CPU backend: kernels.HybridOps (Gated
// DeltaNet) and kernels.MLAOps (MLA, with and without DeepSeek sparse
// attention), on fixture-sized and real-model shapes.
func (c *conf) hybrid() {
	c.copyBuf()
	c.deltaNet()
	c.latentAttention()
	c.mlaPrefill()
}

// copyBuf checks the device-to-device copy a held snapshot's restore
// runs (a Qwen3.5-27B layer's delta-rule state, 786432 floats, and a
// short one), into a longer buffer whose tail must stay as it was, and
// that the device reports free memory.
func (c *conf) copyBuf() {
	c.section("copybuf")
	for _, n := range []int{786432, 7} {
		src := c.randn(n)
		sg, sh := c.pair(src)
		tail := c.randn(5)
		dg, dh := c.pair(append(make([]float32, n), tail...))
		c.g.CopyBuf(dg, sg, n)
		c.c.CopyBuf(dh, sh, n)
		c.check("CopyBuf", fmt.Sprintf("n=%d", n), dg, dh, n+5, tolExact)
	}
	free, err := c.g.FreeBytes()
	c.n++
	status := "ok"
	if err != nil || free <= 0 {
		status = fmt.Sprintf("FAIL (%v)", err)
		c.failed++
	}
	fmt.Printf("%-12s %-40s %s\n", "FreeBytes", fmt.Sprintf("%d MiB", free>>20), status)
}

// setupFailed reports a case whose KV pool a backend refused (the CUDA
// context stays healthy): a refusal as unsupported (a head dim beyond the
// pool's limit) is printed as SKIP, anything else counts as a failure.
func (c *conf) setupFailed(op, shape string, err error) {
	c.n++
	status := "FAIL"
	if errors.Is(err, kernels.ErrUnsupported) {
		status = "SKIP"
	} else {
		c.failed++
	}
	fmt.Printf("%-12s %-40s %s (%v)\n", op, shape, status, err)
}

func (c *conf) deltaNet() {
	type dn struct {
		s    kernels.DeltaShape
		rows int
	}
	fixture := kernels.DeltaShape{KHeads: 2, VHeads: 4, DK: 16, DV: 16, ConvKernel: 4}
	next := kernels.DeltaShape{KHeads: 16, VHeads: 32, DK: 128, DV: 128, ConvKernel: 4}
	for _, s := range []dn{
		{fixture, 1}, {fixture, 9}, {fixture, 2},
		{kernels.DeltaShape{KHeads: 2, VHeads: 6, DK: 8, DV: 12, ConvKernel: 4}, 9},
		{kernels.DeltaShape{KHeads: 1, VHeads: 2, DK: 256, DV: 40, ConvKernel: 2}, 5},
		{kernels.DeltaShape{KHeads: 3, VHeads: 3, DK: 100, DV: 70, ConvKernel: 1}, 3},
		{next, 1}, {next, 64}, {next, 200},
		// The convolution's row chunks (hybrid.go: convChunk = 32): a last
		// chunk of one row, the widest window over two chunks.
		{fixture, 33}, {kernels.DeltaShape{KHeads: 2, VHeads: 2, DK: 16, DV: 16, ConvKernel: 8}, 40},
	} {
		sh := s.s
		name := fmt.Sprintf("k=%d v=%d dk=%d dv=%d conv=%d rows=%d", sh.KHeads, sh.VHeads, sh.DK, sh.DV, sh.ConvKernel, s.rows)
		cd := sh.ConvDim()

		// CausalConv1D: output and the state it leaves.
		wg, wh := c.weight(kernels.BF16, []int{cd, 1, sh.ConvKernel}, [2]int{})
		xg, xh := c.pair(c.randn(s.rows * cd))
		cg, ch := c.pair(c.randn(sh.ConvStateLen()))
		yg, yh := c.outPair(s.rows * cd)
		c.g.CausalConv1D(yg, xg, cg, wg, s.rows, sh)
		c.c.CausalConv1D(yh, xh, ch, wh, s.rows, sh)
		c.check("CausalConv1D", name, yg, yh, s.rows*cd, tolExact)
		c.check("CausalConv1D", name+" state", cg, ch, sh.ConvStateLen(), tolExact)

		// GatedDeltaRule on the convolved rows; over 64 rows the chunked
		// kernel too, each from its own copy of the same state.
		d := c.newDeltaRun(sh, s.rows, name, yg, yh)
		if s.rows > 64 {
			c.runDelta(d, "DeltaChunk", true)
		}
		og, oh := c.runDelta(d, "DeltaRule", false)
		vd := sh.VHeads * sh.DV

		// RMSNormGated in place, as the DeltaNet mixer calls it.
		nw, nh := c.weight(kernels.BF16, []int{sh.DV}, [2]int{})
		zg, zh := c.pair(c.randn(s.rows * vd))
		c.g.RMSNormGated(og, og, zg, nw, s.rows*sh.VHeads, sh.DV, 1e-6)
		c.c.RMSNormGated(oh, oh, zh, nh, s.rows*sh.VHeads, sh.DV, 1e-6)
		c.check("RMSNormGated", name, og, oh, s.rows*vd, tolExact)
	}
	c.deltaChunked()
	c.deltaSegments()
	c.deltaSide()
	// RMSNormGated into another buffer, wide rows.
	for _, s := range [][2]int{{3, 1000}, {1, 4096}} {
		rows, dim := s[0], s[1]
		wg, wh := c.weight(kernels.F32, []int{dim}, [2]int{})
		xg, xh := c.pair(c.randn(rows * dim))
		zg, zh := c.pair(c.randn(rows * dim))
		yg, yh := c.outPair(rows * dim)
		c.g.RMSNormGated(yg, xg, zg, wg, rows, dim, 1e-6)
		c.c.RMSNormGated(yh, xh, zh, wh, rows, dim, 1e-6)
		c.check("RMSNormGated", fmt.Sprintf("rows=%d dim=%d", rows, dim), yg, yh, rows*dim, tolExact)
	}
	for _, n := range []int{1, 1000, 32*128*3 + 5} {
		xg, xh := c.pair(c.randn(n))
		gg, gh := c.pair(c.randn(n))
		c.g.SigmoidMul(xg, gg, n)
		c.c.SigmoidMul(xh, gh, n)
		c.check("SigmoidMul", fmt.Sprintf("n=%d", n), xg, xh, n, tolExact)
	}
}

// deltaChunked checks the chunked delta rule (CUDA delta_chunk, taken for
// passes of more than 64 rows) against the CPU op, which runs its own
// chunked form there: outputs and the final state, from a non-zero state,
// on Qwen3.5-27B's shape (16 key heads, 48 value heads, 128 × 128) at 65
// rows (one token in the second chunk), 128 (two whole chunks), 200 and
// 512, and on small GQA shapes whose dk is not a multiple of the kernel's
// 32-wide slices and whose dv is not a multiple of its 32-column tiles. A
// key head dim over 128 must fall back to the recurrence.
//
// Tolerance: both sides run the same algebra in fp32 with the gate math
// (softplus, cumulative decays, their exp) and the l2 sums in fp64, and the
// l2 factors and the decays rounded to fp32 the same way, so they differ
// only in the order of the fp32 sums of the dot products (dk = 128 terms
// summed sequentially on the GPU, in SIMD lanes on the CPU) and in FMA
// contraction: relative errors of a few ε√dk ≈ 1e-6 per product, an NMSE
// near 1e-12. The forward substitution and the carried state do not
// amplify them: with |k̂| = 1, β < 1 and decays ≤ 1 each token's map
// S ↦ e^g(I - βk̂k̂ᵀ)S is a contraction, so a rounding error in the state
// shrinks as it is carried, and (I+A)⁻¹ is that product of contractions
// written per chunk. The recurrent kernel already meets tolExact against
// the CPU's chunked form at 200 rows (the cases above), a larger
// reordering than this one, so the chunked kernel is held to tolExact too.
func (c *conf) deltaChunked() {
	q35 := kernels.DeltaShape{KHeads: 16, VHeads: 48, DK: 128, DV: 128, ConvKernel: 4}
	for _, s := range []struct {
		s    kernels.DeltaShape
		rows int
	}{
		{q35, 65}, {q35, 128}, {q35, 200}, {q35, 512},
		{kernels.DeltaShape{KHeads: 2, VHeads: 6, DK: 40, DV: 48, ConvKernel: 4}, 150},
		{kernels.DeltaShape{KHeads: 1, VHeads: 4, DK: 128, DV: 20, ConvKernel: 4}, 300},
		{kernels.DeltaShape{KHeads: 1, VHeads: 2, DK: 256, DV: 40, ConvKernel: 2}, 100},
	} {
		sh := s.s
		name := fmt.Sprintf("k=%d v=%d dk=%d dv=%d rows=%d", sh.KHeads, sh.VHeads, sh.DK, sh.DV, s.rows)
		// Rows as the convolution leaves them (SiLU of roughly unit
		// inputs), so that q and k are not centred and chunks' keys overlap.
		x := c.randn(s.rows * sh.ConvDim())
		for i, v := range x {
			x[i] = v / (1 + float32(math.Exp(float64(-v))))
		}
		xg, xh := c.pair(x)
		c.runDelta(c.newDeltaRun(sh, s.rows, name, xg, xh), "DeltaChunk", true)
	}
}

// vector loads v as a float32 1-D weight on both backends.
// deltaRun is a GatedDeltaRule case's inputs on both backends, drawn once
// so that both kernels of the CUDA backend can run from the same state.
type deltaRun struct {
	sh                 kernels.DeltaShape
	rows               int
	name               string
	xg, xh, ag, ah     kernels.Buf
	bg, bh             kernels.Buf
	state              []float32
	alg, alh, dtg, dth kernels.Tensor
}

// newDeltaRun draws a case's gates and a non-zero state with slow decay
// (A ≈ e^-2), so that the state carries across tokens, for the rows x.
func (c *conf) newDeltaRun(sh kernels.DeltaShape, rows int, name string, xg, xh kernels.Buf) *deltaRun {
	d := &deltaRun{sh: sh, rows: rows, name: name, xg: xg, xh: xh}
	d.ag, d.ah = c.pair(c.randn(rows * sh.VHeads))
	d.bg, d.bh = c.pair(c.randn(rows * sh.VHeads))
	d.state = c.randn(sh.RecStateLen())
	for i := range d.state {
		d.state[i] *= 0.5
	}
	aLog := c.randn(sh.VHeads)
	for i := range aLog {
		aLog[i] = 0.3*aLog[i] - 2
	}
	d.alg, d.alh = c.vector(aLog)
	d.dtg, d.dth = c.vector(c.randn(sh.VHeads))
	return d
}

// runDelta runs case d from a fresh copy of its state, on the CUDA
// backend's chunked or recurrent kernel and on the CPU, checks outputs and
// final states as op, and returns the outputs.
func (c *conf) runDelta(d *deltaRun, op string, chunked bool) (og, oh kernels.Buf) {
	sh, vd := d.sh, d.sh.VHeads*d.sh.DV
	sg, sth := c.pair(d.state)
	og, oh = c.outPair(d.rows * vd)
	was := c.g.SetDeltaChunk(chunked)
	c.g.GatedDeltaRule(og, d.xg, d.ag, d.bg, sg, d.alg, d.dtg, d.rows, sh)
	c.g.SetDeltaChunk(was)
	c.c.GatedDeltaRule(oh, d.xh, d.ah, d.bh, sth, d.alh, d.dth, d.rows, sh)
	c.check(op, d.name, og, oh, d.rows*vd, tolExact)
	c.check(op, d.name+" state", sg, sth, sh.RecStateLen(), tolExact)
	return og, oh
}

func (c *conf) vector(v []float32) (g, h kernels.Tensor) {
	w := &kernels.Weight{Name: "vec", DType: kernels.F32, Shape: []int{len(v)}, Data: make([]byte, 4*len(v))}
	for i, x := range v {
		bits := math.Float32bits(x)
		w.Data[4*i], w.Data[4*i+1], w.Data[4*i+2], w.Data[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	return c.load(w)
}

// mlaCase is one latent-attention check: heads query heads over a cache
// of [latent (r) ; rope (dr)] rows. With idxHeads > 0 it is DeepSeek
// sparse attention with an indexer of idxHeads × idxDim selecting topk;
// zeroKeys is the share of positions whose indexer key is zero (their
// score is exactly 0, so ties straddle the selection boundary and the
// CPU's tie rule decides).
type mlaCase struct {
	heads, r, dr, bs, start, rows int
	idxHeads, idxDim, topk        int
	zeroKeys                      float64
}

func (c *conf) latentAttention() {
	for _, s := range []mlaCase{
		// Dense MLA: the fixtures' shape, then DeepSeek-V3's 128 × (512+64).
		{heads: 4, r: 32, dr: 8, bs: 4, start: 37, rows: 1},
		{heads: 4, r: 32, dr: 8, bs: 4, start: 0, rows: 9},
		{heads: 4, r: 32, dr: 8, bs: 4, start: 20, rows: 9},
		{heads: 12, r: 64, dr: 16, bs: 16, start: 300, rows: 3},
		{heads: 128, r: 512, dr: 64, bs: 16, start: 600, rows: 1},
		{heads: 16, r: 512, dr: 64, bs: 16, start: 100, rows: 20},
		{heads: 40, r: 512, dr: 64, bs: 16, start: 1000, rows: 3},
		{heads: 128, r: 512, dr: 64, bs: 64, start: 9000, rows: 1},
		// DSA: the fixture's indexer (top 8), prefill and decode, with and
		// without boundary ties; then V3.2's 64 × 128 indexer.
		{heads: 4, r: 32, dr: 8, bs: 4, start: 0, rows: 20, idxHeads: 4, idxDim: 16, topk: 8},
		{heads: 4, r: 32, dr: 8, bs: 4, start: 30, rows: 1, idxHeads: 4, idxDim: 16, topk: 8},
		{heads: 4, r: 32, dr: 8, bs: 4, start: 30, rows: 1, idxHeads: 4, idxDim: 16, topk: 8, zeroKeys: 0.8},
		{heads: 4, r: 32, dr: 8, bs: 4, start: 5, rows: 30, idxHeads: 4, idxDim: 16, topk: 8, zeroKeys: 0.6},
		{heads: 4, r: 32, dr: 8, bs: 4, start: 600, rows: 1, idxHeads: 4, idxDim: 16, topk: 8, zeroKeys: 0.99},
		{heads: 16, r: 64, dr: 8, bs: 16, start: 2000, rows: 2, idxHeads: 64, idxDim: 128, topk: 256},
		{heads: 16, r: 64, dr: 8, bs: 16, start: 3000, rows: 1, idxHeads: 64, idxDim: 128, topk: 2048, zeroKeys: 0.5},
		{heads: 128, r: 512, dr: 64, bs: 64, start: 4000, rows: 1, idxHeads: 64, idxDim: 128, topk: 2048},
	} {
		c.mlaOne(s)
	}
}

func (c *conf) mlaOne(s mlaCase) {
	dk, dv := s.r+s.dr, s.r
	op := "MLAttention"
	name := fmt.Sprintf("heads=%d dk=%d bs=%d start=%d rows=%d", s.heads, dk, s.bs, s.start, s.rows)
	if s.idxHeads > 0 {
		op = "MLA+DSA"
		name += fmt.Sprintf(" idx=%d×%d top=%d", s.idxHeads, s.idxDim, s.topk)
		if s.zeroKeys > 0 {
			name += fmt.Sprintf(" ties=%.0f%%", 100*s.zeroKeys)
		}
	}
	lc, ok := c.latentCache(s, op, name)
	if !ok {
		return
	}
	pg, ph, table, dg, dh := lc.g, lc.h, lc.table, lc.dsaG, lc.dsaH
	qn := s.rows * s.heads * dk
	qg, qh := c.pair(c.randn(qn))
	on := s.rows * s.heads * dv
	yg, yh := c.outPair(on)
	seq := kernels.AttnSeq{Table: table, Start: s.start}
	scale := float32(1 / math.Sqrt(float64(dk)))
	c.g.MLAttention(yg, qg, pg, 1, seq, s.rows, s.heads, dv, scale, dg)
	c.c.MLAttention(yh, qh, ph, 1, seq, s.rows, s.heads, dv, scale, dh)
	tol := tolExact
	if dk == 576 && dv == 512 {
		tol = tolBF16 // DeepSeek's dims run on the bf16 tensor cores (mla_tc)
	}
	c.check(op, name, yg, yh, on, tol)
}

// latentCache is one side-by-side MLA cache of a case: pools on both
// backends holding random latent rows (and indexer keys) for the case's
// start+rows positions through a shuffled block table, and the indexer's
// inputs when the case has one.
type latentCache struct {
	g, h       kernels.KVPool
	table      []int32
	dsaG, dsaH *kernels.DSA
}

// latentCache makes s's cache, or reports the case failed to set up.
func (c *conf) latentCache(s mlaCase, op, name string) (latentCache, bool) {
	var lc latentCache
	dk, ctx := s.r+s.dr, s.start+s.rows
	blocks := (ctx+s.bs-1)/s.bs + 1
	spec := kernels.KVSpec{Layers: 2, Blocks: blocks, BlockSize: s.bs, KVHeads: 1, HeadDimK: dk, HeadDimV: s.idxDim}
	var err error
	if lc.g, err = c.g.NewKVPool(spec); err == nil {
		lc.h, err = c.c.NewKVPool(spec)
	}
	if err != nil {
		c.setupFailed(op, name, err)
		return lc, false
	}
	var slots []int32
	lc.table, slots = c.shuffledTable(blocks, ctx, s.bs)
	kg, kh := c.pair(c.randn(ctx * dk))
	var vg, vh kernels.Buf
	if s.idxDim > 0 {
		keys := c.randn(ctx * s.idxDim)
		for p := range ctx {
			if c.rng.Float64() < s.zeroKeys {
				clear(keys[p*s.idxDim : (p+1)*s.idxDim])
			}
		}
		vg, vh = c.pair(keys)
	}
	c.g.StoreKV(lc.g, 1, kg, vg, slots)
	c.c.StoreKV(lc.h, 1, kh, vh, slots)
	if s.idxHeads > 0 {
		iqg, iqh := c.pair(c.randn(s.rows * s.idxHeads * s.idxDim))
		iwg, iwh := c.pair(c.randn(s.rows * s.idxHeads))
		sc := float32(1 / math.Sqrt(float64(s.idxDim)*float64(s.idxHeads)))
		lc.dsaG = &kernels.DSA{Q: iqg, W: iwg, Heads: s.idxHeads, Dim: s.idxDim, TopK: s.topk, Scale: sc}
		lc.dsaH = &kernels.DSA{Q: iqh, W: iwh, Heads: s.idxHeads, Dim: s.idxDim, TopK: s.topk, Scale: sc}
	}
	return lc, true
}

// shuffledTable is a block table of ctx positions over blocks blocks of bs
// slots in random order (positions must be found through it), and each
// position's slot.
func (c *conf) shuffledTable(blocks, ctx, bs int) (table, slots []int32) {
	perm := c.rng.Perm(blocks)
	table = make([]int32, (ctx+bs-1)/bs)
	for i := range table {
		table[i] = int32(perm[i])
	}
	slots = make([]int32, ctx)
	for p := range slots {
		slots[p] = table[p/bs]*int32(bs) + int32(p%bs)
	}
	return table, slots
}
