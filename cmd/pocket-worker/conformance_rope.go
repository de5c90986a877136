//go:build cuda

package main

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// The fused rotary ops (RoPEStoreKV, RoPEAttention) against the CPU running
// RMSNorm, RoPE, StoreKV (and Attention) in sequence.

// kvPools is the same KV pool on both backends.
type kvPools struct {
	spec kernels.KVSpec
	g, h kernels.KVPool
}

func (c *conf) newKVPools(spec kernels.KVSpec) kvPools {
	spec.Half = c.kvHalf
	g, err := c.g.NewKVPool(spec)
	if err != nil {
		panic(err)
	}
	h, _ := c.c.NewKVPool(spec)
	if g.Spec().Half != h.Spec().Half {
		panic(fmt.Sprintf("conformance: KV pools of %+v: float16 on one backend only", spec))
	}
	return kvPools{g.Spec(), g, h}
}

// compareCache compares every block of the pools, read back as the host
// tier reads them.
func (c *conf) compareCache(op, shape string, kv kvPools) {
	n, blocks := int(kv.spec.BytesPerBlock()/4), kv.spec.Blocks
	a, b := make([]float32, blocks*n), make([]float32, blocks*n)
	for blk := range blocks {
		c.g.ReadKVBlock(kv.g, blk, a[blk*n:(blk+1)*n])
		c.c.ReadKVBlock(kv.h, blk, b[blk*n:(blk+1)*n])
	}
	tol := 1e-9
	if kv.spec.Half {
		// Rows that differ by a float32 rounding may round to
		// neighbouring float16s: one in a few thousand, 2^-11 apart.
		tol = 1e-7
	}
	c.compare(op, "cache "+shape, a, b, tol)
}

// ropeInputs are one case's rotary table (base 1e6, rd dims), optional q/k
// norm weights (per head, or over the whole rows: wide), and q, k, v rows
// on both backends; newRopeInputs has already run the CPU's RMSNorm, RoPE
// and StoreKV (layer 1) on its side.
type ropeInputs struct {
	r                  *kernels.RoPE
	nqg, nkg           kernels.Tensor
	qg, kg, vg, qh, kh kernels.Buf
}

func (c *conf) newRopeInputs(kv kvPools, rows, heads, hd, rd int, neox, norm, wide bool, pos, slots []int32) ropeInputs {
	kvh := kv.spec.KVHeads
	inv := make([]float32, rd/2)
	for i := range inv {
		inv[i] = float32(math.Pow(1e6, -2*float64(i)/float64(rd)))
	}
	in := ropeInputs{r: &kernels.RoPE{InvFreq: inv, RotaryDim: rd, NeoX: neox}}
	var vh kernels.Buf
	in.qg, in.qh = c.pair(c.randn(rows * heads * hd))
	in.kg, in.kh = c.pair(c.randn(rows * kvh * hd))
	in.vg, vh = c.pair(c.randn(rows * kvh * hd))
	switch {
	case norm && wide:
		var nqh, nkh kernels.Tensor
		in.nqg, nqh = c.weight(kernels.F32, []int{heads * hd}, [2]int{})
		in.nkg, nkh = c.weight(kernels.F32, []int{kvh * hd}, [2]int{})
		c.c.RMSNorm(in.qh, in.qh, nqh, rows, heads*hd, 1e-6)
		c.c.RMSNorm(in.kh, in.kh, nkh, rows, kvh*hd, 1e-6)
	case norm:
		var nqh, nkh kernels.Tensor
		in.nqg, nqh = c.weight(kernels.F32, []int{hd}, [2]int{})
		in.nkg, nkh = c.weight(kernels.F32, []int{hd}, [2]int{})
		c.c.RMSNorm(in.qh, in.qh, nqh, rows*heads, hd, 1e-6)
		c.c.RMSNorm(in.kh, in.kh, nkh, rows*kvh, hd, 1e-6)
	}
	c.c.RoPE(in.qh, pos, heads, hd, in.r)
	c.c.RoPE(in.kh, pos, kvh, hd, in.r)
	c.c.StoreKV(kv.h, 1, in.kh, vh, slots)
	return in
}

// ropeStore checks RoPEStoreKV: q and k in place, and the K/V cache rows
// it stored, read back per block.
func (c *conf) ropeStore() {
	for _, s := range []struct {
		heads, kvh, hd, rd, rows int
		neox, norm               bool
	}{{32, 8, 128, 128, 1, true, false}, {32, 8, 128, 128, 1, true, true}, {16, 4, 64, 64, 1, false, true},
		{24, 4, 256, 64, 1, true, true}, {4, 2, 16, 8, 3, false, false}} {
		const bs, blocks = 4, 6
		kv := c.newKVPools(kernels.KVSpec{Layers: 2, Blocks: blocks, BlockSize: bs, KVHeads: s.kvh, HeadDimK: s.hd, HeadDimV: s.hd})
		pos, slots := make([]int32, s.rows), make([]int32, s.rows)
		for i := range pos {
			pos[i] = int32(c.rng.IntN(30000))
			slots[i] = int32(c.rng.IntN(blocks * bs))
		}
		slots = uniqueSlots(slots, blocks*bs)
		in := c.newRopeInputs(kv, s.rows, s.heads, s.hd, s.rd, s.neox, s.norm, false, pos, slots)
		shape := fmt.Sprintf("heads=%d/%d hd=%d rot=%d rows=%d neox=%v norm=%v", s.heads, s.kvh, s.hd, s.rd, s.rows, s.neox, s.norm)
		if !c.g.RoPEStoreKV(in.qg, in.kg, in.vg, in.nqg, in.nkg, 1e-6, kv.g, 1, pos, slots, s.heads, s.kvh, s.hd, in.r) {
			c.declined("RoPEStoreKV", shape)
			continue
		}
		c.check("RoPEStoreKV", "q "+shape, in.qg, in.qh, s.rows*s.heads*s.hd, 1e-9)
		c.check("RoPEStoreKV", "k "+shape, in.kg, in.kh, s.rows*s.kvh*s.hd, 1e-9)
		c.compareCache("RoPEStoreKV", shape, kv)
	}
}

// ropeAttention checks RoPEAttention (attn_decode) against the CPU's
// RMSNorm, RoPE, StoreKV and Attention: the output, and the cache with
// the new row stored. Shapes: Llama-3 and Qwen3 (q/k norms) heads, hd 64
// with interleaved pairs, hd 256 with partial rotary and 6 heads per
// group, no GQA, 8 heads per group, the first position, a context that
// ends on a block edge, and long ones (many splits, a few batches each,
// empty splits past the context); MiniMax-M2's norms over the whole rows
// (wide: 48/8 heads of 128, rotary 64) and other wide shapes.
func (c *conf) ropeAttention() {
	defer c.g.SetAttnDefer(c.g.SetAttnDefer(true))
	type ex = ropeAttnShape
	wide := []ex{{48, 8, 128, 64, 16, 700, true, true, true}, {48, 8, 128, 64, 16, 2500, true, true, true},
		{48, 8, 128, 64, 16, 0, true, true, true}, {16, 4, 64, 64, 8, 33, false, true, true},
		{24, 4, 256, 64, 16, 900, true, true, true}}
	for i, s := range append([]ex{{32, 8, 128, 128, 16, 600, true, false, false}, {32, 8, 128, 128, 16, 511, true, true, false}, {16, 4, 64, 64, 8, 33, false, true, false},
		{24, 4, 256, 64, 16, 900, true, true, false}, {8, 8, 128, 128, 16, 5, true, false, false}, {64, 8, 128, 128, 64, 200, true, true, false},
		{32, 8, 128, 128, 16, 0, true, true, false}, {16, 4, 128, 128, 16, 1999, true, false, false}, {8, 2, 64, 32, 16, 1500, false, false, false},
		{4, 2, 128, 128, 4, 47, true, true, false},
		// The newest position in a split's second batch (on a 132-SM H200).
		{32, 8, 128, 128, 16, 1019, true, true, false}, {24, 4, 256, 64, 16, 910, true, true, false},
		// Long contexts: many batches per split.
		{32, 8, 128, 128, 16, 8000, true, true, false}, {24, 4, 256, 64, 64, 5000, true, false, false}, {16, 8, 64, 64, 16, 3001, false, true, false}},
		wide...) {
		// Deferred merges (done by attn_merge_E before the check's Read)
		// and the attention's own, alternately.
		c.ropeAttentionCase(s, i%2 == 0, false)
	}
	// Qwen3.5's and Qwen3-Next's output gate right after the attention:
	// SigmoidMul takes a deferred merge over (sigmoid_mul_merge_E).
	for _, s := range []ex{{24, 4, 256, 64, 16, 900, true, true, false}, {24, 4, 256, 64, 64, 5000, true, false, false},
		{16, 2, 256, 64, 16, 0, true, true, false}, {32, 8, 128, 128, 16, 600, true, false, false},
		{16, 4, 64, 64, 8, 33, false, true, false}} {
		c.ropeAttentionCase(s, true, true)
	}
}

// ropeAttnShape is a shape of ropeAttention: heads, kv heads, head dim,
// rotary dims, KV block size, the new row's position, NeoX pairs, q/k
// norms, norms over the whole rows.
type ropeAttnShape struct {
	heads, kvh, hd, rd, bs, start int
	neox, norm, wide              bool
}

// ropeAttentionCase is one case of ropeAttention: the attention with its
// merge deferred or not, then (gated) SigmoidMul on its output.
func (c *conf) ropeAttentionCase(s ropeAttnShape, deferred, gated bool) {
	ctx := s.start + 1
	kv, table, slots := c.filledKV(s.kvh, s.hd, s.bs, ctx, s.start)
	pos := []int32{int32(s.start)}
	in := c.newRopeInputs(kv, 1, s.heads, s.hd, s.rd, s.neox, s.norm, s.wide, pos, slots[s.start:])
	seq := kernels.AttnSeq{Table: table, Start: s.start}
	scale := float32(1 / math.Sqrt(float64(s.hd)))
	qn := s.heads * s.hd
	yg, yh := c.outPair(qn)
	c.c.Attention(yh, in.qh, kv.h, 1, seq, 1, s.heads, scale)
	shape := fmt.Sprintf("heads=%d/%d hd=%d rot=%d bs=%d start=%d neox=%v norm=%v wide=%v", s.heads, s.kvh, s.hd, s.rd,
		s.bs, s.start, s.neox, s.norm, s.wide)
	c.g.SetAttnDefer(deferred)
	if !c.g.RoPEAttention(yg, in.qg, in.kg, in.vg, in.nqg, in.nkg, 1e-6, kv.g, 1, pos, slots[s.start:], seq, s.heads,
		s.kvh, s.hd, in.r, scale) {
		c.declined("RoPEAttention", shape)
		return
	}
	if gated {
		gg, gh := c.pair(c.randn(qn))
		c.g.SigmoidMul(yg, gg, qn)
		c.c.SigmoidMul(yh, gh, qn)
		c.check("RoPEAttention+SigmoidMul", shape, yg, yh, qn, 1e-9)
		return
	}
	c.check("RoPEAttention", shape, yg, yh, qn, 1e-9)
	c.compareCache("RoPEAttention", shape, kv)
}

// filledKV makes pools of layer-1 K/V rows for positions [0, filled) of a
// ctx-position sequence (kvh heads of hd, blocks of bs) through a shuffled
// block table with two blocks to spare, and returns the table and every
// position's slot.
func (c *conf) filledKV(kvh, hd, bs, ctx, filled int) (kvPools, []int32, []int32) {
	blocks := (ctx+bs-1)/bs + 2
	kv := c.newKVPools(kernels.KVSpec{Layers: 2, Blocks: blocks, BlockSize: bs, KVHeads: kvh, HeadDimK: hd, HeadDimV: hd})
	table, slots := c.shuffledTable(blocks, ctx, bs)
	if filled > 0 {
		kg, kh := c.pair(c.randn(filled * kvh * hd))
		vg, vh := c.pair(c.randn(filled * kvh * hd))
		c.g.StoreKV(kv.g, 1, kg, vg, slots[:filled])
		c.c.StoreKV(kv.h, 1, kh, vh, slots[:filled])
	}
	return kv, table, slots
}
