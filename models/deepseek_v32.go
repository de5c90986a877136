package models

import (
	"errors"
	"fmt"
)

// newDeepSeekV32 builds DeepSeek-V3.2: DeepSeek-V3 with DeepSeek sparse
// attention. Each MLA layer has a lightning indexer whose per-token keys
// share the layer's cache rows (kernels.MLAOps keeps them in the V rows),
// and every query attends only to the index_topk positions it scores
// highest. The MLA rope is always the interleaved-pair layout here.
func newDeepSeekV32(c *Config, b *binder) (Network, error) {
	if err := errors.Join(checkMLA(c), checkMoE(c)); err != nil {
		return nil, fmt.Errorf("deepseek_v32: %w", err)
	}
	if n := len(c.MLPLayerTypes); n != 0 && n != c.NumLayers {
		return nil, fmt.Errorf("deepseek_v32: %d mlp_layer_types for %d layers", n, c.NumLayers)
	}
	d := newDecoder(c, b)
	d.KV = mlaKVSpec(c, true)
	ignoreLayersFrom(b, c.NumLayers)
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := Layer{
			AttnNorm: b.tensor(p+"input_layernorm.weight", c.HiddenSize),
			FFNNorm:  b.tensor(p+"post_attention_layernorm.weight", c.HiddenSize),
			Mixer:    newMLA(c, b, p+"self_attn.", i, mlaOptions{interleave: true, indexer: true}),
		}
		sparse := i >= c.FirstKDenseReplace
		if len(c.MLPLayerTypes) > 0 {
			sparse = c.MLPLayerTypes[i] == "sparse"
		}
		if sparse {
			l.FFN = newDeepSeekMoE(c, b, p+"mlp.")
		} else {
			l.FFN = newMLP(c, b, p+"mlp.", c.IntermediateSize)
		}
		d.Layers = append(d.Layers, l)
	}
	return d.finish(b)
}
