package models

import (
	"fmt"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
)

// newQwen3Next builds Qwen3-Next: the Gated DeltaNet hybrid whose
// linear-attention inputs come from two fused projections grouped per key
// head, and a mixture of experts with a sigmoid-gated shared expert.
func newQwen3Next(c *Config, b *binder) (Network, error) {
	if c.NumExperts <= 0 || c.NumExpertsPerTok <= 0 || c.MoEIntermediateSize <= 0 {
		return nil, fmt.Errorf("qwen3_next: num_experts, num_experts_per_tok and moe_intermediate_size must be set")
	}
	step := max(c.DecoderSparseStep, 1)
	ffn := func(i int, p string) FFN {
		if slices.Contains(c.MLPOnlyLayers, i) || (i+1)%step != 0 {
			return newMLP(c, b, p+"mlp.", c.IntermediateSize)
		}
		m := &MoE{be: b.be, hidden: c.HiddenSize,
			Gate:    b.tensor(p+"mlp.gate.weight", c.NumExperts, c.HiddenSize),
			Router:  Router{Experts: c.NumExperts, TopK: c.NumExpertsPerTok, NormTopK: c.NormTopKProb},
			Experts: newExperts(c, b, p+"mlp.", c.NumExperts, c.MoEIntermediateSize)}
		if c.SharedExpertSize > 0 {
			m.Shared = newMLP(c, b, p+"mlp.shared_expert.", c.SharedExpertSize)
			m.SharedGate = b.tensor(p+"mlp.shared_expert_gate.weight", 1, c.HiddenSize)
		}
		return m
	}
	return newHybridDecoder(c, b, qwen3NextProjections(c, b), ffn)
}

// qwen3NextProjections binds in_proj_qkvz and in_proj_ba. Their rows are
// grouped per key head — [q, k, v, z] with VHeads/KHeads value heads per
// group, and [b, a] likewise — so after one matmul each, Gather regroups
// the columns into the contiguous q|k|v, z, b and a blocks the DeltaNet
// ops read (in units of gcd(DK, DV) floats; no weight is copied). The
// regrouping is worked out from n.Shape when the pass runs: a
// tensor-parallel plan shrinks the shape to the rank's key-head groups
// after the build (tp_hybrid.go).
func qwen3NextProjections(c *Config, b *binder) func(n *DeltaNet, prefix string) {
	return func(n *DeltaNet, prefix string) {
		sh, hid := n.Shape, c.HiddenSize
		qkvz := b.tensor(prefix+"in_proj_qkvz.weight", sh.ConvDim()+sh.VHeads*sh.DV, hid)
		ba := b.tensor(prefix+"in_proj_ba.weight", 2*sh.VHeads, hid)
		// regroup writes the DeltaNet inputs from the two projections.
		regroup := func(p *Pass, mixed, gates, qkv, z, a, bb kernels.Buf) {
			be, rows, sh := n.be, p.Rows, n.Shape
			g := qwen3NextGroups(sh)
			units := g.group * sh.KHeads
			be.Gather(qkv, mixed, unitGather(rows, units, g.qkv), g.u)
			be.Gather(z, mixed, unitGather(rows, units, g.z), g.u)
			be.Gather(bb, gates, unitGather(rows, 2*sh.KHeads, g.b), g.r)
			be.Gather(a, gates, unitGather(rows, 2*sh.KHeads, g.a), g.r)
		}
		bufs := func(p *Pass) (mixed, gates kernels.Buf) {
			sh := n.Shape
			g := qwen3NextGroups(sh)
			return p.Scratch.Buf("dn.qkvz", p.Rows*g.group*g.u*sh.KHeads), p.Scratch.Buf("dn.ba", p.Rows*2*sh.VHeads)
		}
		n.project = func(p *Pass, in, qkv, z, a, bb kernels.Buf) {
			mixed, gates := bufs(p)
			n.be.MatMul(mixed, in, qkvz, p.Rows)
			n.be.MatMul(gates, in, ba, p.Rows)
			regroup(p, mixed, gates, qkv, z, a, bb)
		}
		n.projectFused = func(p *Pass, fu kernels.FusedOps, x kernels.Buf, norm kernels.Tensor, eps float32,
			qkv, z, a, bb kernels.Buf) bool {
			mixed, gates := bufs(p)
			if !fu.NormMatMul([]kernels.Buf{mixed, gates}, x, norm, eps, []kernels.Tensor{qkvz, ba}, 1) {
				return false
			}
			regroup(p, mixed, gates, qkv, z, a, bb)
			return true
		}
	}
}

// nextGroups is how Qwen3-Next's per-key-head projection rows regroup:
// the unit u (floats), units per key-head group, the value heads per key
// head r, and the unit offsets Gather picks for q|k|v, z, b and a.
type nextGroups struct {
	u, group, r  int
	qkv, z, b, a []int
}

func qwen3NextGroups(sh kernels.DeltaShape) nextGroups {
	g := nextGroups{r: sh.VHeads / sh.KHeads, u: gcd(sh.DK, sh.DV)} // the unit divides every piece
	g.group = (2*sh.DK + 2*g.r*sh.DV) / g.u
	dk, vg := sh.DK/g.u, g.r*sh.DV/g.u
	for _, off := range []int{0, dk} { // queries, then keys
		for kh := range sh.KHeads {
			g.qkv = span(g.qkv, kh*g.group+off, dk)
		}
	}
	for kh := range sh.KHeads {
		g.qkv = span(g.qkv, kh*g.group+2*dk, vg)
		g.z = span(g.z, kh*g.group+2*dk+vg, vg)
	}
	for kh := range sh.KHeads {
		g.b, g.a = append(g.b, 2*kh), append(g.a, 2*kh+1)
	}
	return g
}
