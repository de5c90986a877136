package synth

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// Preset is a named real model configuration and how to cut it down.
type Preset struct {
	Config map[string]any // config.json
	Layers int            // decoder layers kept (0: all)
	FP8    bool           // FP8 block-scaled projections, as released
	Note   string
}

// JSON renders the preset's config.json.
func (p Preset) JSON() []byte {
	b, _ := json.MarshalIndent(p.Config, "", "  ") // maps of plain values always marshal
	return b
}

// Presets are real configurations at full width, for benchmarks on the
// GPU machine (generate there; never carry the weights).
var Presets = map[string]Preset{
	// DeepSeek-V3 (671B) as released: MLA, 256 routed experts in 8
	// groups, sigmoid routing with correction bias, FP8 weights. Four
	// layers: the three first_k_dense_replace dense layers and one MoE
	// layer (~17 GB).
	"deepseek-v3-slice": {Layers: 4, FP8: true, Note: "DeepSeek-V3 widths, 3 dense + 1 MoE layer, FP8", Config: deepseekV3},

	// DeepSeek-V3.2 (DeepSeek sparse attention): V3's widths plus the
	// lightning indexer (64 heads of 128, top 2048), four layers as for V3.
	"deepseek-v32-slice": {Layers: 4, FP8: true, Note: "DeepSeek-V3.2 widths (V3's plus the indexer), 3 dense + 1 MoE layer, FP8", Config: withKeys(deepseekV3, map[string]any{
		"architectures": []string{"DeepseekV32ForCausalLM"}, "model_type": "deepseek_v32",
		"index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,
	})},
	// Qwen3-30B-A3B as released (bf16): 128 experts of 768, top 8, no
	// shared expert, 32 query heads on 4 kv heads; four of its 48 layers.
	// The MoE model people run on their own machines, CPUs included.
	"qwen3-30b-a3b-slice": {Layers: 4, Note: "Qwen3-30B-A3B widths, 4 MoE layers, bf16", Config: map[string]any{
		"architectures": []string{"Qwen3MoeForCausalLM"}, "model_type": "qwen3_moe",
		"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
		"num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
		"num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
		"mlp_only_layers": []int{}, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "max_position_embeddings": 40960,
		"tie_word_embeddings": false, "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
	}},
	// MiniMax-M2 (230B-A10B) as released (FP8): 256 experts, top 8,
	// sigmoid routing with bias, no shared expert; four of its 62 layers.
	"minimax-m2-slice": {Layers: 4, FP8: true, Note: "MiniMax-M2 widths, 4 MoE layers, FP8", Config: map[string]any{
		"architectures": []string{"MiniMaxM2ForCausalLM"}, "model_type": "minimax_m2",
		"vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
		"num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "rotary_dim": 64,
		"num_local_experts": 256, "num_experts_per_tok": 8, "scoring_func": "sigmoid", "use_routing_bias": true,
		"use_qk_norm": true, "qk_norm_type": "per_layer", "hidden_act": "silu", "rms_norm_eps": 1e-6,
		"rope_theta": 5000000, "max_position_embeddings": 196608, "tie_word_embeddings": false,
		"bos_token_id": 200019, "eos_token_id": 200020, "torch_dtype": "bfloat16",
	}},
	// GLM-4.5-Air (106B-A12B) as released in FP8: 128 routed experts of
	// 1408 and one shared, sigmoid routing with correction bias, 96 query
	// heads on 8 kv heads (more than the fused decode attention's 8 a
	// group), q/k/v biases, half-width rotary; the dense first layer and
	// three MoE layers of its 46.
	"glm-4.5-air-slice": {Layers: 4, FP8: true, Note: "GLM-4.5-Air widths, 1 dense + 3 MoE layers, FP8", Config: map[string]any{
		"architectures": []string{"Glm4MoeForCausalLM"}, "model_type": "glm4_moe",
		"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
		"num_hidden_layers": 46, "first_k_dense_replace": 1, "num_attention_heads": 96, "num_key_value_heads": 8,
		"head_dim": 128, "attention_bias": true, "use_qk_norm": false, "partial_rotary_factor": 0.5,
		"n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1,
		"norm_topk_prob": true, "routed_scaling_factor": 1.0, "hidden_act": "silu", "rms_norm_eps": 1e-5,
		"rope_theta": 1000000, "max_position_embeddings": 131072, "tie_word_embeddings": false,
		"bos_token_id": 151329, "eos_token_id": 151329, "torch_dtype": "bfloat16",
	}},
	// Qwen3.5-27B text model at full depth, FP8: 64 layers, three Gated
	// DeltaNet layers to one gated attention layer. The linear-attention
	// head counts and widths (16 key heads, 48 value heads of 128) are
	// assumed, not read from the released config.
	"qwen3.5-27b-fp8": {FP8: true, Note: "Qwen3.5-27B shape (linear heads assumed), 64 layers, FP8", Config: map[string]any{
		"architectures": []string{"Qwen3_5ForCausalLM"}, "model_type": "qwen3_5_text",
		"vocab_size": 248320, "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
		"num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "attention_bias": false,
		"layer_types": qwen35Layers(64, 4), "full_attention_interval": 4,
		"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
		"linear_num_key_heads": 16, "linear_num_value_heads": 48,
		"partial_rotary_factor": 0.25, "rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000000,
			"partial_rotary_factor": 0.25},
		"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 262144, "tie_word_embeddings": false,
		"bos_token_id": 248044, "eos_token_id": 248044, "torch_dtype": "bfloat16",
	}},
}

// qwen35Layers is layer_types: every interval-th layer full attention.
func qwen35Layers(n, interval int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "linear_attention"
		if (i+1)%interval == 0 {
			out[i] = "full_attention"
		}
	}
	return out
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	var out []string
	for n := range Presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// AllNames lists the dense shapes and the presets, sorted.
func AllNames() []string {
	out := append(Names(), PresetNames()...)
	slices.Sort(out)
	return out
}

// Generate writes the checkpoint a command line asks for: config (a
// config.json's bytes) when non-nil, else the named dense shape or preset.
// format is "" (the shape's own: bf16 for dense shapes, as released for
// presets), "bf16" or "fp8"; layers > 0 keeps that many decoder layers.
func Generate(dir, name string, config []byte, format string, layers int, seed uint64) (int64, error) {
	o := Options{Layers: layers, Seed: seed}
	switch format {
	case "", "bf16":
	case "fp8":
		o.FP8 = true
	default:
		return 0, fmt.Errorf("unknown format %q (bf16, fp8)", format)
	}
	if config != nil {
		return WriteConfig(dir, config, o)
	}
	if p, ok := Presets[name]; ok {
		if format == "" {
			o.FP8 = p.FP8
		}
		if o.Layers == 0 {
			o.Layers = p.Layers
		}
		return WriteConfig(dir, p.JSON(), o)
	}
	s, ok := Shapes[name]
	if !ok {
		return 0, fmt.Errorf("unknown shape %q (known: %v)", name, AllNames())
	}
	if layers > 0 {
		s.Layers = layers
	}
	if !o.FP8 {
		return Write(dir, s, seed)
	}
	cfg, err := s.Config()
	if err != nil {
		return 0, err
	}
	o.Layers = 0
	return WriteConfig(dir, cfg, o)
}

// deepseekV3 is DeepSeek-V3's config.json as released.
var deepseekV3 = map[string]any{
	"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
	"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
	"num_hidden_layers": 61, "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128,
	"n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5, "num_experts_per_tok": 8,
	"n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": true,
	"first_k_dense_replace": 3, "moe_layer_freq": 1,
	"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
	"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 163840, "rope_theta": 10000,
	"rope_scaling": map[string]any{"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
		"beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
	"tie_word_embeddings": false, "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1,
	"torch_dtype": "bfloat16",
}

// withKeys is base with the keys of over replaced or added (a copy).
func withKeys(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}
