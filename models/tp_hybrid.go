package models

import (
	"fmt"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// Tensor parallelism for the Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5).
//
// A DeltaNet layer is split by heads, like attention: rank r takes key
// heads [r·K/N, (r+1)·K/N) and the value heads that read them (value head
// h reads key head h/(V/K), so those are a contiguous block too). Each
// head's recurrence, convolution channels, decay (A_log, dt_bias) and
// gated RMSNorm (per head over DV) are the head's own, so a rank runs the
// layer on its heads alone; out_proj is column-split and its output is a
// partial sum, all-reduced like o_proj. The recurrent state of a rank is
// then that of its heads only: the DeltaShape with K/N and V/N heads.
//
// The projections select per head:
//
//   - Qwen3.5 stores q|k|v (in_proj_qkv, and the conv1d channels, in that
//     order for both architectures) as three blocks, so a rank's rows are
//     three ranges, copied into one tensor; z, b and a are per value head
//     and contiguous.
//   - Qwen3-Next groups in_proj_qkvz and in_proj_ba per key head, so a
//     rank's key-head groups are one contiguous range (a view); the
//     regrouping into q|k|v and z then runs on the local shape.
//
// The gated full-attention layers need nothing new: q_proj interleaves
// [query, gate] per head, so the even row split hands each rank whole
// heads with their gates; q/k norms are per head, partial rotary is per
// head.

// hybridArchs are the architectures with DeltaNet layers.
var hybridArchs = map[string]bool{"Qwen3NextForCausalLM": true, "Qwen3_5ForCausalLM": true}

// checkHybrid rejects groups the linear-attention heads cannot be divided
// over.
func (p *Plan) checkHybrid(c *Config) error {
	sh, err := deltaShape(c)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTP, err)
	}
	if sh.KHeads%p.World != 0 {
		return fmt.Errorf("%w: %d linear-attention key heads do not divide over %d ranks", ErrTP, sh.KHeads, p.World)
	}
	return nil
}

// deltaLocal is this rank's share of the DeltaNet heads: the local shape
// and the first key and value head it holds.
func (p *Plan) deltaLocal(full kernels.DeltaShape) (local kernels.DeltaShape, fk, fv int) {
	local = full
	local.KHeads, local.VHeads = full.KHeads/p.World, full.VHeads/p.World
	return local, p.Rank * local.KHeads, p.Rank * local.VHeads
}

// shardDelta is this rank's slice of a linear_attn tensor (handled false
// for other tensors).
func (p *Plan) shardDelta(c *Config, w *kernels.Weight) (_ *kernels.Weight, handled bool, err error) {
	name := w.Name
	if !strings.HasPrefix(name, "model.layers.") || !strings.Contains(name, ".linear_attn.") {
		return nil, false, nil
	}
	full, err := deltaShape(c)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w: %w", name, ErrTP, err)
	}
	l, fk, fv := p.deltaLocal(full)
	kd := full.KHeads * full.DK
	// q, k of the local key heads and v of the local value heads.
	qkv := []rowRange{
		{fk * full.DK, (fk + l.KHeads) * full.DK},
		{kd + fk*full.DK, kd + (fk+l.KHeads)*full.DK},
		{2*kd + fv*full.DV, 2*kd + (fv+l.VHeads)*full.DV},
	}
	switch {
	case strings.HasSuffix(name, "in_proj_qkv.weight"), strings.HasSuffix(name, "conv1d.weight"):
		w, err = selectRows(w, qkv...)
	case strings.HasSuffix(name, "in_proj_z.weight"):
		w, err = sliceRows(w, fv*full.DV, (fv+l.VHeads)*full.DV)
	case hasSuffix(name, "in_proj_a.weight", "in_proj_b.weight", "A_log", "dt_bias"):
		w, err = sliceRows(w, fv, fv+l.VHeads)
	case strings.HasSuffix(name, "in_proj_qkvz.weight"):
		g := w.Rows() / full.KHeads // rows per key-head group
		w, err = sliceRows(w, fk*g, (fk+l.KHeads)*g)
	case strings.HasSuffix(name, "in_proj_ba.weight"):
		g := 2 * full.VHeads / full.KHeads
		w, err = sliceRows(w, fk*g, (fk+l.KHeads)*g)
	case strings.HasSuffix(name, "out_proj.weight"):
		w, err = sliceCols(w, fv*full.DV, (fv+l.VHeads)*full.DV)
	}
	// Anything else (norm.weight: one [DV] vector shared by all heads) is
	// replicated.
	return w, true, err
}

// applyDelta turns a built DeltaNet layer into this rank's heads.
func (p *Plan) applyDelta(n *DeltaNet) {
	n.Shape, _, _ = p.deltaLocal(n.Shape)
}

// applyHybrid makes the hybrid's recurrent state the rank's heads only.
func (p *Plan) applyHybrid(h *hybrid) {
	h.shape, _, _ = p.deltaLocal(h.shape)
	be, sh, layers := h.be, h.shape, h.layers
	h.stateFn = func() any { return newDeltaState(be, sh, layers) }
}
