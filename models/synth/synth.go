// Package synth writes random-weight checkpoints of real model shapes, for
// benchmarks and for the demo model: the bytes of a 0.6B or 8B model without
// downloading one. Weights are bf16 drawn from a seeded counter-based
// generator, so a shape and seed always give the same file.
package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// Shape is the hyper-parameters of a dense Llama/Qwen3-style model.
type Shape struct {
	Arch         string // "Qwen3ForCausalLM" or "LlamaForCausalLM"
	Vocab        int
	Hidden       int
	Intermediate int
	Layers       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Tied         bool
	RopeTheta    float64
	MaxPositions int
}

// Shapes are the named shapes the benchmarks use.
var Shapes = map[string]Shape{
	// Qwen3-0.6B: ~0.6B parameters, the CPU benchmark's "~0.5B" model.
	"qwen3-0.6b": {Arch: "Qwen3ForCausalLM", Vocab: 151936, Hidden: 1024, Intermediate: 3072, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, Tied: true, RopeTheta: 1e6, MaxPositions: 40960},
	"qwen3-8b":   {Arch: "Qwen3ForCausalLM", Vocab: 151936, Hidden: 4096, Intermediate: 12288, Layers: 36, Heads: 32, KVHeads: 8, HeadDim: 128, RopeTheta: 1e6, MaxPositions: 40960},
	"llama3-8b":  {Arch: "LlamaForCausalLM", Vocab: 128256, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, RopeTheta: 5e5, MaxPositions: 8192},
	// tiny is a few-MB model for tests and the demo.
	"tiny": {Arch: "Qwen3ForCausalLM", Vocab: 512, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, RopeTheta: 1e6, MaxPositions: 4096},
}

// Tensor is one named tensor's shape.
type Tensor struct {
	Name  string
	Shape []int
}

// Tensors lists the checkpoint entries of a shape, in file order.
func (s Shape) Tensors() []Tensor {
	var ts []Tensor
	add := func(name string, shape ...int) { ts = append(ts, Tensor{name, shape}) }
	add("model.embed_tokens.weight", s.Vocab, s.Hidden)
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", s.Hidden)
		add(p+"self_attn.q_proj.weight", s.Heads*s.HeadDim, s.Hidden)
		add(p+"self_attn.k_proj.weight", s.KVHeads*s.HeadDim, s.Hidden)
		add(p+"self_attn.v_proj.weight", s.KVHeads*s.HeadDim, s.Hidden)
		add(p+"self_attn.o_proj.weight", s.Hidden, s.Heads*s.HeadDim)
		if s.Arch == "Qwen3ForCausalLM" {
			add(p+"self_attn.q_norm.weight", s.HeadDim)
			add(p+"self_attn.k_norm.weight", s.HeadDim)
		}
		add(p+"post_attention_layernorm.weight", s.Hidden)
		add(p+"mlp.gate_proj.weight", s.Intermediate, s.Hidden)
		add(p+"mlp.up_proj.weight", s.Intermediate, s.Hidden)
		add(p+"mlp.down_proj.weight", s.Hidden, s.Intermediate)
	}
	add("model.norm.weight", s.Hidden)
	if !s.Tied {
		add("lm_head.weight", s.Vocab, s.Hidden)
	}
	return ts
}

// Config renders config.json for the shape.
func (s Shape) Config() ([]byte, error) {
	c := map[string]any{
		"architectures": []string{s.Arch}, "vocab_size": s.Vocab, "hidden_size": s.Hidden,
		"intermediate_size": s.Intermediate, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"rms_norm_eps": 1e-6, "rope_theta": s.RopeTheta, "max_position_embeddings": s.MaxPositions,
		"tie_word_embeddings": s.Tied, "torch_dtype": "bfloat16", "hidden_act": "silu",
		"bos_token_id": 1, "eos_token_id": 2,
	}
	return json.MarshalIndent(c, "", "  ")
}

// isNorm reports whether a tensor is a norm scale (initialised near 1).
func isNorm(t Tensor) bool { return len(t.Shape) == 1 }

// Write writes dir/config.json and dir/model.safetensors and returns the
// bytes of weights written.
func Write(dir string, s Shape, seed uint64) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	cfg, err := s.Config()
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		return 0, err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := Encode(f, s, seed)
	if err != nil {
		return 0, err
	}
	return n, f.Close()
}

// Encode streams the safetensors bytes of a random checkpoint to w. Values
// come from a counter-based generator (splitmix64 of seed, tensor and
// element index) filled by all cores, so an 8B model takes seconds, and a
// shape and seed always give the same bytes.
func Encode(w io.Writer, s Shape, seed uint64) (int64, error) {
	var es []entry
	for _, t := range s.Tensors() {
		es = append(es, entry{name: t.Name, dtype: "BF16", shape: t.Shape, std: initStd(t.Shape), norm: isNorm(t)})
	}
	return encode(w, es, seed)
}

// fillBF16 writes len(b)/2 values: uniform(±1.7·std) for matrices, 1±0.05
// for norm scales; element i of the call is element ctr+i of the tensor.
func fillBF16(b []byte, seed, ctr uint64, std float32, norm bool) {
	parallelFill(len(b)/2, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			u := float32(Splitmix(seed+ctr+uint64(i))>>40) / (1 << 24) // [0,1)
			v := (u*2 - 1) * std * 1.7
			if norm {
				v = 1 + 0.1*(u-0.5)
			}
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
		}
	})
}

// Splitmix is the splitmix64 mixing function: a counter-based generator
// that any goroutine can evaluate at any index.
func Splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Names lists the named shapes, sorted.
func Names() []string {
	var out []string
	for n := range Shapes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
