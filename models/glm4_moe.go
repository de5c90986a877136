package models

import (
	"fmt"
)

// newGLM4MoE builds GLM-4.5 (Glm4MoeForCausalLM): GQA attention with q/k/v
// biases, optional per-head q/k RMSNorm and rotate-half rope on the first
// partial_rotary_factor of each head; dense layers before
// first_k_dense_replace, then the DeepSeek-MoE block (sigmoid router with
// correction bias, grouped top-k, scaling, shared experts). Its
// multi-token-prediction layers are not run.
func newGLM4MoE(c *Config, b *binder) (Network, error) {
	if err := checkMoE(c); err != nil {
		return nil, fmt.Errorf("glm4_moe: %w", err)
	}
	rd := c.HeadDim
	if f := c.PartialRotaryFactor; f > 0 && f < 1 {
		rd = int(float64(c.HeadDim) * f)
	}
	d := newDecoder(c, b)
	d.KV = kvSpecFor(c, c.NumLayers)
	ignoreLayersFrom(b, c.NumLayers)
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := Layer{
			AttnNorm: b.tensor(p+"input_layernorm.weight", c.HiddenSize),
			FFNNorm:  b.tensor(p+"post_attention_layernorm.weight", c.HiddenSize),
			Mixer: newAttention(c, b, p+"self_attn.", i, attentionOptions{neox: true, qkNorm: c.UseQKNorm,
				bias: c.AttentionBias, rotaryDim: rd}),
		}
		if i >= c.FirstKDenseReplace {
			l.FFN = newDeepSeekMoE(c, b, p+"mlp.")
		} else {
			l.FFN = newMLP(c, b, p+"mlp.", c.IntermediateSize)
		}
		d.Layers = append(d.Layers, l)
	}
	return d.finish(b)
}
