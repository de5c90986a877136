package models

import "fmt"

// newQwen3 builds Qwen3 dense: Llama's layout plus per-head RMSNorm on
// queries and keys before RoPE.
func newQwen3(c *Config, b *binder) (Network, error) {
	d := newDecoder(c, b)
	d.KV = kvSpecFor(c, c.NumLayers)
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		d.Layers = append(d.Layers, Layer{
			AttnNorm: b.tensor(p+"input_layernorm.weight", c.HiddenSize),
			FFNNorm:  b.tensor(p+"post_attention_layernorm.weight", c.HiddenSize),
			Mixer:    newAttention(c, b, p+"self_attn.", i, attentionOptions{neox: true, qkNorm: true, bias: c.AttentionBias}),
			FFN:      newMLP(c, b, p+"mlp.", c.IntermediateSize),
		})
	}
	return d.finish(b)
}
