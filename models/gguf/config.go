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
}

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
	if typ, ok := m.String(arch + ".rope.scaling.type"); ok && typ == "linear" {
		factor, _ := m.Float(arch + ".rope.scaling.factor")
		c.RopeScaling = &models.RopeScaling{Type: "linear", RopeType: "linear", Factor: factor}
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
