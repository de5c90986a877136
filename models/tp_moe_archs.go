package models

import (
	"fmt"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// Tensor parallelism for GLM-4.5 (glm4_moe) and MiniMax-M2 (minimax_m2).
//
// GLM-4.5 needs nothing beyond the common plan: q/k/v biases are split
// with their rows, the per-head q/k norms ([head_dim], shared by all
// heads) and the partial rotary act on each head alone, the
// first_k_dense_replace MLPs, the shared experts and every routed expert
// are column/row split, and the sigmoid router with its correction bias is
// replicated, so all ranks pick the same experts.
//
// MiniMax-M2 normalises q over all H·D elements of a row at once (and k
// over all KV·D): a rank holding a block of heads lacks the other heads'
// share of the sum of squares. Each rank computes its share of every
// row's sum for q and k (kernels.TPNormOps), the group sums the 2·rows
// floats in one all-reduce, and each rank scales its columns, with its
// slice of q_norm/k_norm, by the total: exact, for one small collective a
// layer. When ranks outnumber the KV heads, N/KV ranks hold the same head
// and the summed k share counts it N/KV times, so the scale divides by
// the local width times N rather than by KV·D (for q and for undivided
// KV the two are equal). Its experts (w1/w3 gate and up, w2 down) split
// like any MLP.

// moeTPArchs are the architectures whose plan this file adds.
var moeTPArchs = map[string]bool{"Glm4MoeForCausalLM": true, "MiniMaxM2ForCausalLM": true}

// checkMoEArch rejects groups the expert (and dense) widths cannot be
// divided over, before anything is loaded; heads were checked already.
func (p *Plan) checkMoEArch(c *Config) error {
	n := p.World
	if c.Arch() == "MiniMaxM2ForCausalLM" { // every layer sparse, experts intermediate_size wide
		if c.IntermediateSize%n != 0 {
			return fmt.Errorf("%w: expert intermediate_size %d does not divide over %d ranks", ErrTP, c.IntermediateSize, n)
		}
		return nil
	}
	if c.MoEIntermediateSize%n != 0 {
		return fmt.Errorf("%w: moe_intermediate_size %d does not divide over %d ranks", ErrTP, c.MoEIntermediateSize, n)
	}
	if c.FirstKDenseReplace > 0 && c.IntermediateSize%n != 0 {
		return fmt.Errorf("%w: intermediate_size %d does not divide over %d ranks", ErrTP, c.IntermediateSize, n)
	}
	return nil
}

// shardMiniMax is this rank's slice of MiniMax-M2's full-width q/k norm
// weights and of its w1/w2/w3 experts (handled false for other tensors,
// which the common rules serve).
func (p *Plan) shardMiniMax(c *Config, w *kernels.Weight) (_ *kernels.Weight, handled bool, err error) {
	name := w.Name
	if c.Arch() != "MiniMaxM2ForCausalLM" || !strings.HasPrefix(name, "model.layers.") {
		return nil, false, nil
	}
	even := func(size int) (int, int, error) {
		if size%p.World != 0 {
			return 0, 0, fmt.Errorf("%s: %w: %d does not divide over %d ranks", name, ErrTP, size, p.World)
		}
		per := size / p.World
		return p.Rank * per, (p.Rank + 1) * per, nil
	}
	var lo, hi int
	switch {
	case strings.HasSuffix(name, "self_attn.q_norm.weight"): // [H·D], like q_proj's rows
		if lo, hi, err = even(w.Shape[0]); err == nil {
			w, err = sliceRows(w, lo, hi)
		}
	case strings.HasSuffix(name, "self_attn.k_norm.weight"): // [KV·D], like k_proj's rows
		local, first := p.kvHeads(c)
		hd := w.Shape[0] / c.NumKVHeads
		w, err = sliceRows(w, first*hd, (first+local)*hd)
	case strings.Contains(name, ".block_sparse_moe.experts.") && hasSuffix(name, ".w1.weight", ".w3.weight"):
		if lo, hi, err = even(w.Shape[0]); err == nil {
			w, err = sliceRows(w, lo, hi)
		}
	case strings.Contains(name, ".block_sparse_moe.experts.") && strings.HasSuffix(name, ".w2.weight"):
		if lo, hi, err = even(w.Cols()); err == nil {
			w, err = sliceCols(w, lo, hi)
		}
	default:
		return nil, false, nil
	}
	return w, true, err
}

// fullNormAttention is attention whose q/k RMSNorm spans all heads, for a
// rank holding a block of them: the norms take the group's sum of squares.
// It wraps, rather than embeds, the Attention, so that the fused one-token
// path (which would norm over the local heads alone) is never taken.
type fullNormAttention struct {
	a              *Attention
	ops            kernels.TPNormOps
	comm           kernels.Collective
	qScale, kScale float32 // 1 / (local width · world), see the file comment
}

// newFullNormAttention wraps a (already narrowed to the rank's heads) for
// a group of world ranks.
func newFullNormAttention(a *Attention, be kernels.Backend, comm kernels.Collective, world int) (*fullNormAttention, error) {
	ops, ok := be.(kernels.TPNormOps)
	if !ok {
		return nil, fmt.Errorf("%w: %s: q/k norm over all heads needs a split RMSNorm (kernels.TPNormOps): %w", ErrTP, be.Name(), kernels.ErrUnsupported)
	}
	return &fullNormAttention{a: a, ops: ops, comm: comm,
		qScale: 1 / float32(a.Heads*a.Dim*world), kScale: 1 / float32(a.KVHeads*a.Dim*world)}, nil
}

// Forward implements Mixer: Attention.Forward with the norms' sums of
// squares completed over the group.
func (f *fullNormAttention) Forward(p *Pass, in, out kernels.Buf) error {
	a := f.a
	be, s, rows := a.be, p.Scratch, p.Rows
	qw, kw := a.Heads*a.Dim, a.KVHeads*a.Dim
	q, k, v := s.Buf("q", rows*qw), s.Buf("k", rows*kw), s.Buf("v", rows*kw)
	att := s.Buf("att", rows*qw)
	be.MatMul(q, in, a.Q, rows)
	be.MatMul(k, in, a.K, rows)
	be.MatMul(v, in, a.V, rows)
	if a.QBias != nil {
		be.AddBias(q, a.QBias, rows, qw)
		be.AddBias(k, a.KBias, rows, kw)
		be.AddBias(v, a.VBias, rows, kw)
	}
	if p.Seq.Pool == nil {
		return fmt.Errorf("attention: no KV pool")
	}
	if a.QNorm != nil {
		ss := s.Buf("tp.qk.sumsq", 2*rows) // q's rows, then k's
		f.ops.SumSquares(ss, 0, q, rows, qw)
		f.ops.SumSquares(ss, rows, k, rows, kw)
		if err := f.comm.AllReduceSum(ss, 2*rows); err != nil {
			return fmt.Errorf("tp q/k norm all-reduce: %w", err)
		}
		f.ops.RMSNormSum(q, q, ss, 0, a.QNorm, rows, qw, f.qScale, a.Eps)
		f.ops.RMSNormSum(k, k, ss, rows, a.KNorm, rows, kw, f.kScale, a.Eps)
	}
	be.RoPE(q, p.Pos, a.Heads, a.Dim, &a.Rope)
	be.RoPE(k, p.Pos, a.KVHeads, a.Dim, &a.Rope)
	be.StoreKV(p.Seq.Pool, a.KVLayer, k, v, p.Slots)
	be.Attention(att, q, p.Seq.Pool, a.KVLayer, p.Attn, rows, a.Heads, a.Scale)
	be.MatMul(out, att, a.O, rows)
	return nil
}
