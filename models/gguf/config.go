package gguf

import (
	"encoding/json"
	"fmt"

	"github.com/pocketllm/pocketllm/models"
)

// archInfo is how a GGUF general.architecture maps to transformers.
type archInfo struct {
	hfArch, modelType string
}

var archs = map[string]archInfo{
	"qwen3":    {"Qwen3ForCausalLM", "qwen3"},
	"qwen3moe": {"Qwen3MoeForCausalLM", "qwen3_moe"},
	"llama":    {"LlamaForCausalLM", "llama"},
	// GLM-4.5: llama.cpp counts the multi-token-prediction layers in
	// block_count (nextn_predict_layers of them, at the end).
	"glm4moe":    {"Glm4MoeForCausalLM", "glm4_moe"},
	"minimax-m2": {"MiniMaxM2ForCausalLM", "minimax_m2"},
	// deepseek2 is also DeepSeek-V2/V2.5 (softmax routing, no correction
	// bias), which moeConfig rejects: only the V3 router is implemented.
	"deepseek2": {"DeepseekV3ForCausalLM", "deepseek_v3"},
	// Qwen3-Next: Gated DeltaNet hybrid (the linear-attention sizes are
	// the ssm.* keys).
	"qwen3next": {"Qwen3NextForCausalLM", "qwen3_next"},
	// Qwen3.5 (dense): its multimodal rope (rope.dimension_sections)
	// reduces to plain rope for text.
	"qwen35": {"Qwen3_5ForCausalLM", "qwen3_5_text"},
}

// llama.cpp's expert_gating_func values.
const (
	gatingSoftmax = 1
	gatingSigmoid = 2
)

// ErrArch is returned by Config for architectures without a mapping.
var ErrArch = fmt.Errorf("%w: unsupported architecture", ErrFormat)

// Config builds the hyper-parameters from the {arch}.* keys, the way
// transformers' config.json would state them, and validates them with
// models.ParseConfig. The vocabulary size is the embedding's row count (or
// the token list's length when the file has no embedding).
func (f *File) Config() (*models.Config, error) {
	m := f.Metadata
	arch, ok := m.String("general.architecture")
	if !ok {
		return nil, fmt.Errorf("%w: no general.architecture", ErrFormat)
	}
	info, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrArch, arch)
	}
	u := func(key string) int {
		v, ok := m.Uint(arch + "." + key)
		if !ok || v > 1<<40 {
			return 0
		}
		return int(v)
	}
	c := models.Config{
		Architectures:       []string{info.hfArch},
		ModelType:           info.modelType,
		HiddenSize:          u("embedding_length"),
		IntermediateSize:    u("feed_forward_length"),
		NumLayers:           u("block_count"),
		NumHeads:            u("attention.head_count"),
		NumKVHeads:          u("attention.head_count_kv"),
		HeadDim:             u("attention.key_length"),
		MaxPositions:        u("context_length"),
		NumExperts:          u("expert_count"),
		NumExpertsPerTok:    u("expert_used_count"),
		MoEIntermediateSize: u("expert_feed_forward_length"),
		HiddenAct:           "silu",
	}
	c.RMSNormEps, _ = m.Float(arch + ".attention.layer_norm_rms_epsilon")
	c.RopeTheta, _ = m.Float(arch + ".rope.freq_base")
	if t, ok := f.Tensor("token_embd.weight"); ok && len(t.Shape) == 2 {
		c.VocabSize = t.Shape[0]
	} else if toks, ok := m.Strings("tokenizer.ggml.tokens"); ok {
		c.VocabSize = len(toks)
	}
	_, hasOutput := f.Tensor("output.weight")
	c.TieEmbeddings = !hasOutput
	if _, ok := f.Tensor("blk.0.attn_q.bias"); ok {
		c.AttentionBias = true
	}
	if arch == "qwen3moe" {
		// llama.cpp's qwen3moe graph always renormalises the top-k weights.
		c.NormTopKProb = true
		if v, ok := m.Bool(arch + ".expert_weights_norm"); ok {
			c.NormTopKProb = v
		}
		c.DecoderSparseStep = 1
	}
	if arch == "qwen3next" || arch == "qwen35" {
		if err := f.hybridConfig(arch, &c, u); err != nil {
			return nil, err
		}
	}
	if err := f.moeConfig(arch, &c, u); err != nil {
		return nil, err
	}
	if typ, ok := m.String(arch + ".rope.scaling.type"); ok && typ == "linear" {
		factor, _ := m.Float(arch + ".rope.scaling.factor")
		c.RopeScaling = &models.RopeScaling{Type: "linear", RopeType: "linear", Factor: factor}
	} else if ok && typ == "yarn" && arch == "deepseek2" {
		c.RopeScaling = yarnScaling(m, arch)
	} else if ok && typ != "none" {
		// yarn and the others are not mapped yet: refuse rather than run
		// the model with the wrong positions.
		return nil, fmt.Errorf("%w: %s rope.scaling.type %q is not mapped", ErrFormat, arch, typ)
	}
	if id, ok := m.Uint("tokenizer.ggml.bos_token_id"); ok {
		c.BOSTokenID = json.RawMessage(fmt.Sprint(id))
	}
	if id, ok := m.Uint("tokenizer.ggml.eos_token_id"); ok {
		c.EOSTokenID = json.RawMessage(fmt.Sprint(id))
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	out, err := models.ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", arch, err)
	}
	return out, nil
}

// moeConfig fills the keys of the sigmoid-routed MoE families from their
// llama.cpp spellings.
func (f *File) moeConfig(arch string, c *models.Config, u func(string) int) error {
	m := f.Metadata
	if arch != "glm4moe" && arch != "minimax-m2" && arch != "deepseek2" {
		return nil
	}
	if g := u("expert_gating_func"); g != 0 && g != gatingSigmoid {
		return fmt.Errorf("%w: %s expert_gating_func %d (the model code routes by sigmoid)", ErrFormat, arch, g)
	}
	if arch == "deepseek2" {
		return f.mlaConfig(c, u)
	}
	c.ScoringFunc = "sigmoid"
	if c.HeadDim == 0 && c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	// rope.dimension_count is the rotated width of each head.
	if rd := u("rope.dimension_count"); rd > 0 && rd < c.HeadDim {
		c.PartialRotaryFactor = float64(rd) / float64(c.HeadDim)
	}
	qn, hasQNorm := f.Tensor("blk.0.attn_q_norm.weight")
	c.UseQKNorm = hasQNorm
	switch arch {
	case "glm4moe":
		c.NumLayers -= u("nextn_predict_layers")
		c.NRoutedExperts = c.NumExperts
		c.NSharedExperts = u("expert_shared_count")
		c.FirstKDenseReplace = u("leading_dense_block_count")
		c.RoutedScalingFactor, _ = m.Float(arch + ".expert_weights_scale")
		c.NormTopKProb, _ = m.Bool(arch + ".expert_weights_norm")
		c.NGroup, c.TopKGroup = max(u("expert_group_count"), 1), max(u("expert_group_used_count"), 1)
	case "minimax-m2":
		c.NumLocalExperts = c.NumExperts
		if c.MoEIntermediateSize > 0 {
			c.IntermediateSize = c.MoEIntermediateSize
		}
		c.NormTopKProb = true
		// The q/k norms span all heads at once (qk_norm_type per_layer).
		if hasQNorm && len(qn.Shape) == 1 && qn.Shape[0] == c.NumHeads*c.HeadDim {
			c.QKNormType = "per_layer"
		}
	}
	return nil
}

// mlaConfig reads DeepSeek-V3's keys. The converter writes MLA as MQA:
// head_count_kv 1, key_length kv_lora_rank+rope, value_length
// kv_lora_rank, with the per-head sizes in key_length_mla and
// value_length_mla (files from before that split state the per-head sizes
// in key_length and value_length and carry attn_kv_b unsplit).
func (f *File) mlaConfig(c *models.Config, u func(string) int) error {
	const arch = "deepseek2"
	m := f.Metadata
	// V2 files have no gating func and no correction bias and route by
	// softmax; V3 files carry exp_probs_b (and, from newer converters, the
	// sigmoid gating func).
	if _, ok := f.Tensor(fmt.Sprintf("blk.%d.exp_probs_b.bias", u("leading_dense_block_count"))); !ok && u("expert_gating_func") != gatingSigmoid {
		return fmt.Errorf("%w: deepseek2 without sigmoid routing (DeepSeek-V2) is not supported", ErrArch)
	}
	c.ScoringFunc = "sigmoid"
	c.NumKVHeads = c.NumHeads
	c.QLoraRank = u("attention.q_lora_rank")
	c.KVLoraRank = u("attention.kv_lora_rank")
	c.QKRopeHeadDim = u("rope.dimension_count")
	kl, vl := u("attention.key_length_mla"), u("attention.value_length_mla")
	if kl == 0 {
		kl, vl = u("attention.key_length"), u("attention.value_length")
	}
	c.QKNopeHeadDim, c.VHeadDim = kl-c.QKRopeHeadDim, vl
	c.HeadDim = c.QKRopeHeadDim
	// llama.cpp rotates deepseek2's rope dims as interleaved pairs.
	c.RopeInterleave = true
	if n := u("nextn_predict_layers"); n > 0 {
		if _, ok := f.Tensor(fmt.Sprintf("blk.%d.nextn.eh_proj.weight", c.NumLayers-1)); ok {
			c.NumLayers -= n
		}
	}
	c.NRoutedExperts = c.NumExperts
	c.NSharedExperts = u("expert_shared_count")
	c.FirstKDenseReplace = u("leading_dense_block_count")
	c.RoutedScalingFactor = 1
	if v, ok := m.Float(arch + ".expert_weights_scale"); ok {
		c.RoutedScalingFactor = v
	}
	c.NormTopKProb, _ = m.Bool(arch + ".expert_weights_norm")
	c.NGroup, c.TopKGroup = max(u("expert_group_count"), 1), max(u("expert_group_used_count"), 1)
	return nil
}

// hybridConfig reads the Gated DeltaNet hybrids' keys: ssm.group_count key
// heads of ssm.state_size, ssm.time_step_rank value heads sharing
// ssm.inner_size, ssm.conv_kernel, every full_attention_interval-th layer
// full attention with rope.dimension_count rotated dims.
func (f *File) hybridConfig(arch string, c *models.Config, u func(string) int) error {
	m := f.Metadata
	c.LinearNumKeyHeads = u("ssm.group_count")
	c.LinearNumValueHeads = u("ssm.time_step_rank")
	c.LinearKeyHeadDim = u("ssm.state_size")
	c.LinearConvKernelDim = u("ssm.conv_kernel")
	if c.LinearNumValueHeads > 0 {
		c.LinearValueHeadDim = u("ssm.inner_size") / c.LinearNumValueHeads
	}
	c.FullAttentionInterval = u("full_attention_interval")
	if c.FullAttentionInterval <= 0 {
		return fmt.Errorf("%w: %s without full_attention_interval", ErrFormat, arch)
	}
	if c.HeadDim == 0 && c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if rd := u("rope.dimension_count"); rd > 0 && rd < c.HeadDim {
		c.PartialRotaryFactor = float64(rd) / float64(c.HeadDim)
	}
	if arch == "qwen3next" {
		c.SharedExpertSize = u("expert_shared_feed_forward_length")
		c.DecoderSparseStep = 1
		// llama.cpp's qwen3next graph renormalises the top-k weights.
		c.NormTopKProb = true
		if v, ok := m.Bool(arch + ".expert_weights_norm"); ok {
			c.NormTopKProb = v
		}
	}
	return nil
}

// yarnScaling reads DeepSeek-V3's yarn keys. The converter writes factor,
// original_context_length and yarn_log_multiplier = 0.1·mscale_all_dim
// (DeepSeek-V3 states mscale equal to mscale_all_dim, so the cos/sin
// factor is 1 and only the softmax scale changes), and, from newer
// converters, yarn_beta_fast/slow (absent: the model's defaults 32 and 1).
func yarnScaling(m *Metadata, arch string) *models.RopeScaling {
	p := arch + ".rope.scaling."
	rs := &models.RopeScaling{Type: "yarn", RopeType: "yarn"}
	rs.Factor, _ = m.Float(p + "factor")
	if v, ok := m.Uint(p + "original_context_length"); ok && v < 1<<40 {
		rs.OriginalMaxPositionEmbeddings = int(v)
	}
	if v, ok := m.Float(p + "yarn_log_multiplier"); ok && v != 0 {
		rs.MScaleAllDim = v / 0.1
		rs.MScale = rs.MScaleAllDim
	}
	rs.BetaFast, _ = m.Float(p + "yarn_beta_fast")
	rs.BetaSlow, _ = m.Float(p + "yarn_beta_slow")
	return rs
}
