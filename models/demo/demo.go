// Package demo is PocketLLM's built-in demo model: a tiny Qwen3-shaped
// network with random weights generated deterministically in memory, and a
// byte-level tokenizer with Qwen3's special tokens and a ChatML template,
// built in code. `pocketd serve --demo` serves it so that the daemon, the
// CLI and the gateway can be tried on a fresh machine with nothing
// downloaded.
//
// The weights are random: the model exercises the whole stack (tokenizer,
// chat template, KV cache, sampling, streaming) but produces nonsense. Its
// LM head is biased toward printable ASCII (lower-case letters and spaces
// most of all) and, a little, toward <|im_end|>, so replies look like
// gibberish words and end on their own.
package demo

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

// Name is the demo model's name.
const Name = "demo"

// Token ids of the special tokens (right after the 256 byte tokens).
const (
	EndOfText = 256 // <|endoftext|>
	IMStart   = 257 // <|im_start|>
	IMEnd     = 258 // <|im_end|>
	// VocabSize is 256 byte tokens plus the three special tokens.
	VocabSize = 259
)

// Shape of the network.
const (
	hidden       = 128
	layers       = 2
	heads        = 4
	kvHeads      = 2
	headDim      = 32
	intermediate = 256
	maxPositions = 8192
	seed         = 0x506f636b6574 // "Pocket"
)

// ConfigJSON is the demo model's config.json, as transformers would write it.
func ConfigJSON() []byte {
	b, _ := json.Marshal(map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"model_type":              "qwen3",
		"vocab_size":              VocabSize,
		"hidden_size":             hidden,
		"intermediate_size":       intermediate,
		"num_hidden_layers":       layers,
		"num_attention_heads":     heads,
		"num_key_value_heads":     kvHeads,
		"head_dim":                headDim,
		"hidden_act":              "silu",
		"max_position_embeddings": maxPositions,
		"rms_norm_eps":            1e-6,
		"rope_theta":              1000000.0,
		"tie_word_embeddings":     false,
		"bos_token_id":            EndOfText,
		"eos_token_id":            []int{IMEnd, EndOfText},
		"torch_dtype":             "bfloat16",
	})
	return b
}

// Open returns the demo checkpoint, built in memory (a few hundred KB of
// bf16 weights). It is deterministic: every call yields the same weights.
func Open() (*checkpoint.Checkpoint, error) {
	cfg, err := models.ParseConfig(ConfigJSON())
	if err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	return &checkpoint.Checkpoint{Name: Name, Path: "(built-in demo)", Format: "demo", Config: cfg, Source: newSource()}, nil
}

// source is a models.Source over generated weights.
type source struct {
	weights map[string]*kernels.Weight
}

func newSource() *source {
	s := &source{weights: map[string]*kernels.Weight{}}
	r := rand.New(rand.NewPCG(seed, seed>>7))
	normal := func(name string, std float64, shape ...int) []float32 {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * std)
		}
		return v
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	// Dimension 0 of the residual stream is a large constant in every
	// embedding; the LM head's column 0 turns it into a per-token bias.
	embed := normal("embed", 1, VocabSize, hidden)
	for t := range VocabSize {
		embed[t*hidden] = 12
	}
	s.add("model.embed_tokens.weight", embed, VocabSize, hidden)
	s.add("model.norm.weight", ones(hidden), hidden)
	head := normal("head", 0.25, VocabSize, hidden)
	for t := range VocabSize {
		head[t*hidden] = float32(tokenBias(t))
	}
	s.add("lm_head.weight", head, VocabSize, hidden)
	const std = 0.02
	for i := range layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		s.add(p+"input_layernorm.weight", ones(hidden), hidden)
		s.add(p+"post_attention_layernorm.weight", ones(hidden), hidden)
		s.add(p+"self_attn.q_proj.weight", normal("q", std, heads*headDim, hidden), heads*headDim, hidden)
		s.add(p+"self_attn.k_proj.weight", normal("k", std, kvHeads*headDim, hidden), kvHeads*headDim, hidden)
		s.add(p+"self_attn.v_proj.weight", normal("v", std, kvHeads*headDim, hidden), kvHeads*headDim, hidden)
		s.add(p+"self_attn.o_proj.weight", normal("o", std, hidden, heads*headDim), hidden, heads*headDim)
		s.add(p+"self_attn.q_norm.weight", ones(headDim), headDim)
		s.add(p+"self_attn.k_norm.weight", ones(headDim), headDim)
		s.add(p+"mlp.gate_proj.weight", normal("gate", std, intermediate, hidden), intermediate, hidden)
		s.add(p+"mlp.up_proj.weight", normal("up", std, intermediate, hidden), intermediate, hidden)
		s.add(p+"mlp.down_proj.weight", normal("down", std, hidden, intermediate), hidden, intermediate)
	}
	return s
}

// tokenBias is the LM-head weight on the constant dimension: it makes
// letters and spaces likely, other printable ASCII possible, control and
// high bytes rare, and <|im_end|> likely enough to end a reply after a few
// dozen tokens.
func tokenBias(t int) float64 {
	switch {
	case t == ' ':
		return 0.55
	case t >= 'a' && t <= 'z':
		return 0.4
	case t >= 'A' && t <= 'Z', t == ',' || t == '.':
		return 0.2
	case t > ' ' && t < 0x7f:
		return 0.05
	case t == IMEnd:
		return 0.2
	}
	return -0.6
}

func (s *source) add(name string, v []float32, shape ...int) {
	data := make([]byte, 2*len(v))
	for i, x := range v {
		b := bf16(x)
		data[2*i], data[2*i+1] = byte(b), byte(b>>8)
	}
	s.weights[name] = &kernels.Weight{Name: name, DType: kernels.BF16, Shape: shape, Data: data}
}

// bf16 rounds x to bfloat16 (round to nearest even).
func bf16(x float32) uint16 {
	u := math.Float32bits(x)
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Weight implements models.Source.
func (s *source) Weight(name string) (*kernels.Weight, error) {
	w, ok := s.weights[name]
	if !ok {
		return nil, fmt.Errorf("demo: %s: %w", name, models.ErrMissingTensor)
	}
	c := *w
	c.Shape = slices.Clone(w.Shape)
	return &c, nil
}

// Names implements models.Source.
func (s *source) Names() []string {
	out := make([]string, 0, len(s.weights))
	for n := range s.weights {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Close implements models.Source.
func (s *source) Close() error { return nil }
