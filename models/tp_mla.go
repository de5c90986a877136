package models

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// Tensor parallelism for multi-head latent attention (DeepSeek-V3 and its
// FP8 checkpoints, DeepSeek-V3.2).
//
// MLA's heads are independent once the latent row is known, so they split
// like attention heads: rank r computes heads [r·H/N, (r+1)·H/N).
//
//   - Queries: q_a_proj and q_a_layernorm produce one q_lora_rank-wide
//     latent shared by all heads; they are small and replicated. q_b_proj
//     (or q_proj without a q latent) holds [nope ; rope] rows per head, so a
//     rank loads its heads' rows (a view).
//   - kv_b_proj holds [W_UK_h (Dn rows) ; W_UV_h (Dv rows)] per head: the
//     absorbed decode and the prefill both use W_UK_hᵀ on the query side
//     and W_UV_h on the output side, head by head, so a rank loads its
//     heads' row blocks and derives only their UKT/UV.
//   - o_proj takes the heads' Dv-wide outputs side by side: a rank loads
//     its heads' columns, its output is a partial sum, and the block is
//     all-reduced like any attention block.
//   - The compressed cache row [latent ; rope key] (kv_a_proj_with_mqa,
//     kv_a_layernorm) is one "KV head" that every query head reads. It is
//     computed from the replicated projections on every rank and stored in
//     full in every rank's pool: the rank's KVSpec keeps KVHeads 1 (the
//     GQA rule, KV heads / N, does not apply; num_key_value_heads means
//     nothing to MLA). A group of N ranks thus holds N copies of the
//     latent; the latent is ~1/H of what per-head K/V would be, which is
//     why MLA engines (SGLang, vLLM) replicate it too.
//   - DeepSeek-V3.2's indexer is replicated: its score sums ReLU terms
//     over the index heads (weights_proj) before a hard top-k, so a head
//     split would need an all-reduce of [rows, positions] scores inside
//     the attention. Replicated, every rank scores the same input with the
//     same weights and selects the same tokens, which is exact; the indexer
//     keys live in the V rows of the (full) cache as on one device.
//   - FFNs follow the common plan: the first_k_dense_replace dense MLPs
//     and the shared experts are column/row split, the routed experts are
//     each split the same way (tensor-parallel MoE, as for qwen3_moe), and
//     the sigmoid router with its correction bias is replicated, so all
//     ranks pick the same experts.

// mlaArchs are the architectures whose attention is MLA.
var mlaArchs = map[string]bool{"DeepseekV3ForCausalLM": true, "DeepseekV32ForCausalLM": true}

// checkMLAPlan rejects groups MLA's heads and widths cannot be divided
// over, before anything is loaded.
func (p *Plan) checkMLAPlan(c *Config) error {
	n := p.World
	if err := checkMLA(c); err != nil {
		return fmt.Errorf("%w: %w", ErrTP, err)
	}
	if c.NumHeads%n != 0 {
		return fmt.Errorf("%w: %d attention heads do not divide over %d ranks", ErrTP, c.NumHeads, n)
	}
	if c.MoEIntermediateSize%n != 0 {
		return fmt.Errorf("%w: moe_intermediate_size %d does not divide over %d ranks", ErrTP, c.MoEIntermediateSize, n)
	}
	// The dense layers' width matters only when there are dense layers.
	dense := c.FirstKDenseReplace > 0 || slices.Contains(c.MLPLayerTypes, "dense")
	if dense && c.IntermediateSize%n != 0 {
		return fmt.Errorf("%w: intermediate_size %d does not divide over %d ranks", ErrTP, c.IntermediateSize, n)
	}
	return nil
}

// shardMLA is this rank's slice of an MLA attention tensor (handled false
// for other tensors).
func (p *Plan) shardMLA(c *Config, w *kernels.Weight) (_ *kernels.Weight, handled bool, err error) {
	name := w.Name
	if !mlaArchs[c.Arch()] || !strings.HasPrefix(name, "model.layers.") || !strings.Contains(name, ".self_attn.") {
		return nil, false, nil
	}
	per := c.NumHeads / p.World
	first := p.Rank * per
	// heads returns the rows (columns) of this rank's heads when each
	// head has width of them, after checking size is exactly the heads.
	heads := func(width, size int) (int, int, error) {
		if c.NumHeads%p.World != 0 || size != c.NumHeads*width {
			return 0, 0, fmt.Errorf("%s: %w: %d rows/columns are not %d heads of %d over %d ranks", name, ErrTP, size, c.NumHeads, width, p.World)
		}
		return first * width, (first + per) * width, nil
	}
	var lo, hi int
	switch {
	case hasSuffix(name, "self_attn.q_b_proj.weight", "self_attn.q_proj.weight"):
		if lo, hi, err = heads(c.QKNopeHeadDim+c.QKRopeHeadDim, w.Rows()); err == nil {
			w, err = sliceRows(w, lo, hi)
		}
	case strings.HasSuffix(name, "self_attn.kv_b_proj.weight"):
		if lo, hi, err = heads(c.QKNopeHeadDim+c.VHeadDim, w.Rows()); err == nil {
			w, err = sliceRows(w, lo, hi)
		}
	case strings.HasSuffix(name, "self_attn.o_proj.weight"):
		if lo, hi, err = heads(c.VHeadDim, w.Cols()); err == nil {
			w, err = sliceCols(w, lo, hi)
		}
	}
	// Anything else (q_a_proj, the latent path, the norms, the indexer)
	// is replicated.
	return w, true, err
}

// applyMLA makes a built MLA layer compute this rank's heads. The per-head
// absorbed matrices were derived from the rank's kv_b_proj rows only, so
// there must be exactly as many as the rank's heads.
func (p *Plan) applyMLA(layer int, m *MLA) error {
	if m.Heads%p.World != 0 {
		return fmt.Errorf("%w: layer %d: %d latent-attention heads over %d ranks", ErrTP, layer, m.Heads, p.World)
	}
	m.Heads /= p.World
	if uk, uv := m.absorbedHeads(); uk != m.Heads || uv != m.Heads {
		return fmt.Errorf("%w: layer %d: %d absorbed heads loaded, the rank computes %d", ErrTP, layer, uk, m.Heads)
	}
	return nil
}
