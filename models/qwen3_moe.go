package models

import (
	"fmt"
	"slices"
)

// newQwen3MoE builds Qwen3-MoE: Qwen3 attention, and on sparse layers a
// softmax router over num_experts SwiGLU experts (top num_experts_per_tok,
// renormalised when norm_topk_prob).
func newQwen3MoE(c *Config, b *binder) (Network, error) {
	if c.NumExperts <= 0 || c.NumExpertsPerTok <= 0 || c.MoEIntermediateSize <= 0 {
		return nil, fmt.Errorf("qwen3_moe: num_experts, num_experts_per_tok and moe_intermediate_size must be set")
	}
	d := newDecoder(c, b)
	d.KV = kvSpecFor(c, c.NumLayers)
	step := max(c.DecoderSparseStep, 1)
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := Layer{
			AttnNorm: b.tensor(p+"input_layernorm.weight", c.HiddenSize),
			FFNNorm:  b.tensor(p+"post_attention_layernorm.weight", c.HiddenSize),
			Mixer:    newAttention(c, b, p+"self_attn.", i, attentionOptions{neox: true, qkNorm: true, bias: c.AttentionBias}),
		}
		if !slices.Contains(c.MLPOnlyLayers, i) && (i+1)%step == 0 {
			l.FFN = &MoE{be: b.be, hidden: c.HiddenSize,
				Gate:    b.tensor(p+"mlp.gate.weight", c.NumExperts, c.HiddenSize),
				Router:  Router{Experts: c.NumExperts, TopK: c.NumExpertsPerTok, NormTopK: c.NormTopKProb},
				Experts: newExperts(c, b, p+"mlp.", c.NumExperts, c.MoEIntermediateSize)}
		} else {
			l.FFN = newMLP(c, b, p+"mlp.", c.IntermediateSize)
		}
		d.Layers = append(d.Layers, l)
	}
	return d.finish(b)
}
