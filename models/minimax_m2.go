package models

import (
	"fmt"
)

// newMiniMaxM2 builds MiniMax-M2: GQA attention whose q/k RMSNorm spans all
// heads at once (qk_norm_type per_layer), rotate-half rope, and on every layer a sparse MoE of
// num_local_experts SwiGLU experts (w1 gate, w3 up, w2 down) chosen by a
// sigmoid router with a selection-only correction bias, renormalised, with
// no shared expert.
func newMiniMaxM2(c *Config, b *binder) (Network, error) {
	if err := checkMoE(c); err != nil {
		return nil, fmt.Errorf("minimax_m2: %w", err)
	}
	if c.UseQKNorm && c.QKNormType != "per_layer" {
		return nil, fmt.Errorf("minimax_m2: qk_norm_type %q: %w", c.QKNormType, ErrUnknownArch)
	}
	// The rotated width follows partial_rotary_factor as transformers reads
	// it; rotary_dim alone does not narrow it there (the reference rotates
	// whole heads for a config with rotary_dim but no factor), so neither
	// does it here.
	rd := c.HeadDim
	if f := c.PartialRotaryFactor; f > 0 && f < 1 {
		rd = int(float64(c.HeadDim) * f)
	}
	d := newDecoder(c, b)
	d.KV = kvSpecFor(c, c.NumLayers)
	n, inter := c.NumExperts, c.IntermediateSize
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		moe := &MoE{be: b.be, hidden: c.HiddenSize,
			Gate: b.tensor(p+"block_sparse_moe.gate.weight", n, c.HiddenSize),
			Router: Router{Experts: n, TopK: c.NumExpertsPerTok, Sigmoid: true, NormTopK: true,
				Bias: hostVector(b, p+"block_sparse_moe.e_score_correction_bias", n)}}
		for e := range n {
			ep := fmt.Sprintf("%sblock_sparse_moe.experts.%d.", p, e)
			moe.Experts = append(moe.Experts, &MLP{be: b.be, hidden: c.HiddenSize, inter: inter, name: ep,
				Gate: b.tensor(ep+"w1.weight", inter, c.HiddenSize),
				Up:   b.tensor(ep+"w3.weight", inter, c.HiddenSize),
				Down: b.tensor(ep+"w2.weight", c.HiddenSize, inter)})
		}
		d.Layers = append(d.Layers, Layer{
			AttnNorm: b.tensor(p+"input_layernorm.weight", c.HiddenSize),
			FFNNorm:  b.tensor(p+"post_attention_layernorm.weight", c.HiddenSize),
			Mixer: newAttention(c, b, p+"self_attn.", i, attentionOptions{neox: true, qkNormFull: c.UseQKNorm,
				rotaryDim: rd}),
			FFN: moe,
		})
	}
	return d.finish(b)
}
