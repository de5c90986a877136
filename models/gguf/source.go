package gguf

import (
	"fmt"
	"regexp"
	"sort"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
)

// llama.cpp tensor names of one block, mapped to transformers' names under
// model.layers.N.
var blockNames = map[string]string{
	"attn_norm":     "input_layernorm",
	"ffn_norm":      "post_attention_layernorm",
	"attn_q":        "self_attn.q_proj",
	"attn_k":        "self_attn.k_proj",
	"attn_v":        "self_attn.v_proj",
	"attn_output":   "self_attn.o_proj",
	"attn_q_norm":   "self_attn.q_norm",
	"attn_k_norm":   "self_attn.k_norm",
	"ffn_gate":      "mlp.gate_proj",
	"ffn_up":        "mlp.up_proj",
	"ffn_down":      "mlp.down_proj",
	"ffn_gate_inp":  "mlp.gate",
	"ffn_gate_exps": "mlp.experts.%d.gate_proj",
	"ffn_up_exps":   "mlp.experts.%d.up_proj",
	"ffn_down_exps": "mlp.experts.%d.down_proj",
}

// archBlockNames override blockNames for one architecture.
var archBlockNames = map[string]map[string]string{
	"glm4moe": {
		// GLM-4.5's post_attention_layernorm is llama.cpp's ATTN_POST_NORM.
		"post_attention_norm": "post_attention_layernorm",
		"ffn_gate_shexp":      "mlp.shared_experts.gate_proj",
		"ffn_up_shexp":        "mlp.shared_experts.up_proj",
		"ffn_down_shexp":      "mlp.shared_experts.down_proj",
		"exp_probs_b":         "mlp.gate.e_score_correction",
	},
	"minimax-m2": {
		"ffn_gate_inp":  "block_sparse_moe.gate",
		"ffn_gate_exps": "block_sparse_moe.experts.%d.w1",
		"ffn_up_exps":   "block_sparse_moe.experts.%d.w3",
		"ffn_down_exps": "block_sparse_moe.experts.%d.w2",
		"exp_probs_b":   "block_sparse_moe.e_score_correction",
	},
}

// nextnNames maps the multi-token-prediction tensors of a block
// (blk.N.nextn.X) onto transformers' names under model.layers.N; the model
// code binds none of them (they belong to layers past num_hidden_layers).
var nextnNames = map[string]string{
	"eh_proj":          "eh_proj",
	"embed_tokens":     "embed_tokens",
	"enorm":            "enorm",
	"hnorm":            "hnorm",
	"shared_head_head": "shared_head.head",
	"shared_head_norm": "shared_head.norm",
}

var nextnRe = regexp.MustCompile(`^blk\.(\d+)\.nextn\.([a-z_]+)\.(weight|bias)$`)

var globalNames = map[string]string{
	"token_embd.weight":  "model.embed_tokens.weight",
	"output_norm.weight": "model.norm.weight",
	"output.weight":      "lm_head.weight",
}

var blockRe = regexp.MustCompile(`^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$`)

// entry is how a transformers-named weight is made from the file.
type entry struct {
	gguf   string
	expert int // row slice of a stacked expert tensor, or -1
	unperm int // >0: undo llama.cpp's rope permutation with this many heads
}

// source serves a File under transformers names.
type source struct {
	f       *File
	entries map[string]entry
	names   []string
}

// Source maps the file's llama.cpp tensor names onto transformers names
// (token_embd → model.embed_tokens, blk.N.attn_q → model.layers.N.
// self_attn.q_proj, ffn_gate_exps [E, rows, cols] → mlp.experts.E.
// gate_proj as row slices sharing the mapped bytes, …). A missing output
// tensor means tied embeddings (see Config). Tensors it does not know keep
// their GGUF names, so model validation reports them.
//
// llama: llama.cpp's converter permutes the rows of Q and K so that rope
// rotates interleaved pairs; the source undoes that permutation (a row
// reorder, exact for every block format, at the cost of copying those two
// tensors) so that the weights match transformers' rotate-half layout.
// qwen3 and qwen3moe are stored unpermuted and are served in place.
func (f *File) Source() (models.Source, error) {
	arch, _ := f.Metadata.String("general.architecture")
	s := &source{f: f, entries: map[string]entry{}}
	var heads, kvHeads int
	if arch == "llama" {
		h, _ := f.Metadata.Uint(arch + ".attention.head_count")
		kv, ok := f.Metadata.Uint(arch + ".attention.head_count_kv")
		if !ok {
			kv = h
		}
		if h == 0 || h > 1<<16 || kv == 0 || kv > 1<<16 {
			return nil, fmt.Errorf("%w: llama head counts %d/%d", ErrFormat, h, kv)
		}
		heads, kvHeads = int(h), int(kv)
	}
	add := func(name string, e entry) error {
		if _, dup := s.entries[name]; dup {
			return fmt.Errorf("%w: two tensors map to %s", ErrFormat, name)
		}
		s.entries[name] = e
		s.names = append(s.names, name)
		return nil
	}
	for _, t := range f.tensors {
		if hf, ok := globalNames[t.Name]; ok {
			if err := add(hf, entry{gguf: t.Name, expert: -1}); err != nil {
				return nil, err
			}
			continue
		}
		if m := nextnRe.FindStringSubmatch(t.Name); m != nil {
			if hf, ok := nextnNames[m[2]]; ok {
				if err := add("model.layers."+m[1]+"."+hf+"."+m[3], entry{gguf: t.Name, expert: -1}); err != nil {
					return nil, err
				}
				continue
			}
		}
		m := blockRe.FindStringSubmatch(t.Name)
		hf, known := "", false
		if m != nil {
			hf, known = archBlockNames[arch][m[2]]
			if !known {
				hf, known = blockNames[m[2]]
			}
		}
		if !known {
			if err := add(t.Name, entry{gguf: t.Name, expert: -1}); err != nil {
				return nil, err
			}
			continue
		}
		prefix := "model.layers." + m[1] + "."
		if len(t.Shape) == 3 && len(m[2]) > 5 && m[2][len(m[2])-5:] == "_exps" {
			for e := 0; e < t.Shape[0]; e++ {
				if err := add(prefix+fmt.Sprintf(hf, e)+"."+m[3], entry{gguf: t.Name, expert: e}); err != nil {
					return nil, err
				}
			}
			continue
		}
		suffix := "." + m[3]
		if m[2] == "exp_probs_b" {
			// transformers spells the correction bias e_score_correction_bias.
			suffix = "_" + m[3]
		}
		e := entry{gguf: t.Name, expert: -1}
		if arch == "llama" && m[2] == "attn_q" {
			e.unperm = heads
		} else if arch == "llama" && m[2] == "attn_k" {
			e.unperm = kvHeads
		}
		if err := add(prefix+hf+suffix, e); err != nil {
			return nil, err
		}
	}
	sort.Strings(s.names)
	return s, nil
}

func (s *source) Names() []string { return s.names }

func (s *source) Close() error { return s.f.Close() }

func (s *source) Weight(name string) (*kernels.Weight, error) {
	e, ok := s.entries[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, models.ErrMissingTensor)
	}
	w, err := s.f.Weight(e.gguf)
	if err != nil {
		return nil, err
	}
	w.Name = name
	if e.expert >= 0 {
		rows, cols := w.Shape[1], w.Shape[2]
		return w.RowSlice(name, e.expert*rows, (e.expert+1)*rows, []int{rows, cols})
	}
	if e.unperm > 0 {
		return unpermute(w, e.unperm)
	}
	return w, nil
}

// unpermute reverses llama.cpp's permute(w, n_head): within each head the
// stored row order is (pair i, half h) → i*2+h; transformers wants h*d/2+i.
func unpermute(w *kernels.Weight, heads int) (*kernels.Weight, error) {
	rows := w.Rows()
	if len(w.Shape) != 2 || rows%(2*heads) != 0 {
		return nil, fmt.Errorf("%s: %d rows do not split into %d rope heads", w.Name, rows, heads)
	}
	rb, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		return nil, err
	}
	hd := rows / heads
	out := make([]byte, len(w.Data))
	for h := 0; h < heads; h++ {
		for i := 0; i < hd/2; i++ {
			for half := 0; half < 2; half++ {
				src := h*hd + 2*i + half
				dst := h*hd + half*hd/2 + i
				copy(out[dst*rb:(dst+1)*rb], w.Data[src*rb:(src+1)*rb])
			}
		}
	}
	w.Data = out
	return w, nil
}
