package models

import "fmt"

// newLlama builds Llama (and Mistral): GQA attention with rotate-half RoPE
// (llama3 frequency scaling via rope_scaling) and a SwiGLU MLP.
func newLlama(c *Config, b *binder) (Network, error) {
	d := newDecoder(c, b)
	d.KV = kvSpecFor(c, c.NumLayers)
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		d.Layers = append(d.Layers, Layer{
			AttnNorm: b.tensor(p+"input_layernorm.weight", c.HiddenSize),
			FFNNorm:  b.tensor(p+"post_attention_layernorm.weight", c.HiddenSize),
			Mixer:    newAttention(c, b, p+"self_attn.", i, attentionOptions{neox: true, bias: c.AttentionBias}),
			FFN:      newMLP(c, b, p+"mlp.", c.IntermediateSize),
		})
	}
	return d.finish(b)
}
