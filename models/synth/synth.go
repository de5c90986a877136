// Package synth writes random-weight checkpoints of real model shapes, for
// benchmarks and for the demo model: the bytes of a 0.6B or 8B model without
// downloading one. Weights are bf16 drawn from a seeded generator, so a
// shape and seed always give the same file.
package synth

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
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

// Write writes dir/config.json and dir/model.safetensors.
func Write(dir string, s Shape, seed uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg, err := s.Config()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := Encode(w, s, seed); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// Encode streams the safetensors bytes of a random checkpoint to w.
func Encode(w *bufio.Writer, s Shape, seed uint64) error {
	ts := s.Tensors()
	header := map[string]any{"__metadata__": map[string]string{"format": "pt", "generator": "pocketllm synth"}}
	var off int64
	for _, t := range ts {
		n := int64(2)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		header[t.Name] = map[string]any{"dtype": "BF16", "shape": t.Shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for (len(h)+8)%8 != 0 {
		h = append(h, ' ')
	}
	var n8 [8]byte
	binary.LittleEndian.PutUint64(n8[:], uint64(len(h)))
	w.Write(n8[:])
	w.Write(h)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for _, t := range ts {
		elems := 1
		for _, d := range t.Shape {
			elems *= d
		}
		// Scale like an initialiser: std ~ 1/sqrt(fan_in), so activations
		// stay in range through many layers.
		std := float32(1 / math.Sqrt(float64(t.Shape[len(t.Shape)-1])))
		var b [2]byte
		for i := 0; i < elems; i++ {
			var v float32
			if isNorm(t) {
				v = 1 + 0.1*(rng.Float32()-0.5)
			} else {
				v = (rng.Float32()*2 - 1) * std * 1.7
			}
			binary.LittleEndian.PutUint16(b[:], uint16(math.Float32bits(v)>>16))
			if _, err := w.Write(b[:]); err != nil {
				return err
			}
		}
	}
	return nil
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
