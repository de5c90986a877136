package models

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// newDeepSeekV3 builds DeepSeek-V3 (and its FP8 checkpoints): multi-head
// latent attention with a compressed cache (MLA), dense SwiGLU layers
// before first_k_dense_replace, then DeepSeek-MoE layers: a sigmoid router
// with selection-only correction bias and grouped top-k, routed experts
// and shared experts. Multi-token-prediction layers are not run.
func newDeepSeekV3(c *Config, b *binder) (Network, error) {
	if err := errors.Join(checkMLA(c), checkMoE(c)); err != nil {
		return nil, fmt.Errorf("deepseek_v3: %w", err)
	}
	d := newDecoder(c, b)
	d.KV = mlaKVSpec(c, false)
	ignoreLayersFrom(b, c.NumLayers)
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := Layer{
			AttnNorm: b.tensor(p+"input_layernorm.weight", c.HiddenSize),
			FFNNorm:  b.tensor(p+"post_attention_layernorm.weight", c.HiddenSize),
			Mixer:    newMLA(c, b, p+"self_attn.", i, mlaOptions{interleave: c.RopeInterleave}),
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

// newDeepSeekMoE binds the DeepSeek-MoE block that DeepSeek-V3, V3.2 and
// GLM-4.5 share: gate.weight with gate.e_score_correction_bias, a sigmoid
// router (grouped top-k, renormalised, scaled by routed_scaling_factor),
// experts.N and shared_experts of n_shared_experts × moe_intermediate_size.
func newDeepSeekMoE(c *Config, b *binder, prefix string) *MoE {
	n := c.NumExperts
	m := &MoE{be: b.be, hidden: c.HiddenSize,
		Gate: b.tensor(prefix+"gate.weight", n, c.HiddenSize),
		Router: Router{Experts: n, TopK: c.NumExpertsPerTok, Sigmoid: true, NormTopK: c.NormTopKProb,
			Bias:   hostVector(b, prefix+"gate.e_score_correction_bias", n),
			Groups: c.NGroup, TopKGrp: c.TopKGroup, Scale: float32(c.RoutedScalingFactor)},
		Experts: newExperts(c, b, prefix, n, c.MoEIntermediateSize)}
	if c.NSharedExperts > 0 {
		m.Shared = newMLP(c, b, prefix+"shared_experts.", c.MoEIntermediateSize*c.NSharedExperts)
	}
	return m
}

// checkMoE validates the routed-expert hyper-parameters.
func checkMoE(c *Config) error {
	if c.NumExperts <= 0 || c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
		return fmt.Errorf("need 0 < num_experts_per_tok ≤ experts, have %d of %d", c.NumExpertsPerTok, c.NumExperts)
	}
	if g := max(c.NGroup, 1); c.NumExperts%g != 0 || c.TopKGroup > g ||
		(g > 1 && (c.NumExperts/g < 2 || c.TopKGroup*c.NumExperts/g < c.NumExpertsPerTok)) {
		return fmt.Errorf("n_group %d / topk_group %d do not fit %d experts choosing %d", c.NGroup, c.TopKGroup, c.NumExperts, c.NumExpertsPerTok)
	}
	return nil
}

// hostVector reads a small 1-D tensor (a router bias) to host float32:
// routing runs on the host.
func hostVector(b *binder, name string, n int) []float32 {
	w := rawWeight(b, name, n)
	if w == nil {
		return nil
	}
	out := make([]float32, n)
	for i := range out {
		switch w.DType {
		case kernels.F32:
			out[i] = math.Float32frombits(uint32(w.Data[4*i]) | uint32(w.Data[4*i+1])<<8 | uint32(w.Data[4*i+2])<<16 | uint32(w.Data[4*i+3])<<24)
		case kernels.BF16:
			out[i] = math.Float32frombits(uint32(w.Data[2*i])<<16 | uint32(w.Data[2*i+1])<<24)
		default:
			b.fail(fmt.Errorf("%s: %s vector: %w", name, w.DType, kernels.ErrUnsupported))
			return nil
		}
	}
	return out
}

// ignoreLayersFrom marks the tensors of layers n and above as known:
// checkpoints with num_nextn_predict_layers append their multi-token
// prediction layers after the last decoder layer, and we do not run them.
func ignoreLayersFrom(b *binder, n int) {
	for _, name := range b.src.Names() {
		rest, ok := strings.CutPrefix(name, "model.layers.")
		if !ok {
			continue
		}
		idx, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(idx); err == nil && i >= n {
			b.expected[name] = true
		}
	}
}
