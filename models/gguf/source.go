package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"sort"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/quant"
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
	"deepseek2": {
		"attn_q_a":       "self_attn.q_a_proj",
		"attn_q_a_norm":  "self_attn.q_a_layernorm",
		"attn_q_b":       "self_attn.q_b_proj",
		"attn_kv_a_mqa":  "self_attn.kv_a_proj_with_mqa",
		"attn_kv_a_norm": "self_attn.kv_a_layernorm",
		"attn_kv_b":      "self_attn.kv_b_proj",
		"ffn_gate_shexp": "mlp.shared_experts.gate_proj",
		"ffn_up_shexp":   "mlp.shared_experts.up_proj",
		"ffn_down_shexp": "mlp.shared_experts.down_proj",
		"exp_probs_b":    "mlp.gate.e_score_correction",
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
	expert int    // row slice of a stacked expert tensor, or -1
	unperm int    // >0: undo llama.cpp's rope permutation with this many heads
	vb     string // deepseek2: gguf is attn_k_b, vb attn_v_b; rejoin into kv_b_proj
	op     int    // qwen3next: a transformation to undo (opALog, …)
	gate   string // opQKVZ: the attn_gate tensor
	tile   int    // qwen35: value heads to put back in grouped order
}

// source serves a File under transformers names.
type source struct {
	f       *File
	entries map[string]entry
	names   []string
	dims    deltaDims // qwen3next, qwen35
	arch    string
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
	s := &source{f: f, entries: map[string]entry{}, arch: arch}
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
	hybrid := arch == "qwen3next" || arch == "qwen35"
	if hybrid {
		d, err := f.deltaDims(arch)
		if err != nil {
			return nil, err
		}
		s.dims = d
	}
	for _, t := range f.tensors {
		if hybrid {
			if done, err := s.addHybrid(t.Name, add); err != nil {
				return nil, err
			} else if done {
				continue
			}
		}
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
		if m != nil && arch == "deepseek2" && (m[2] == "attn_k_b" || m[2] == "attn_v_b") && m[3] == "weight" {
			// Rejoined into kv_b_proj below, unless the file also has it.
			kb, vb := "blk."+m[1]+".attn_k_b.weight", "blk."+m[1]+".attn_v_b.weight"
			_, hasKVB := f.Tensor("blk." + m[1] + ".attn_kv_b.weight")
			_, hasVB := f.Tensor(vb)
			_, hasKB := f.Tensor(kb)
			if hasKVB || !hasKB || !hasVB {
				if err := add(t.Name, entry{gguf: t.Name, expert: -1}); err != nil {
					return nil, err
				}
			} else if m[2] == "attn_k_b" {
				if err := add("model.layers."+m[1]+".self_attn.kv_b_proj.weight", entry{gguf: kb, vb: vb, expert: -1}); err != nil {
					return nil, err
				}
			}
			continue
		}
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
	if e.tile != tileNone {
		if w, err = untile(w, e.tile, s.dims); err != nil {
			return nil, err
		}
	}
	switch e.op {
	case opALog:
		return mapF32(w, func(x float64) float64 { return math.Log(-x) })
	case opMinus1:
		return mapF32(w, func(x float64) float64 { return x - 1 })
	case opConv:
		if len(w.Shape) != 2 {
			return nil, fmt.Errorf("%w: %s: conv shape %v", ErrFormat, name, w.Shape)
		}
		w.Shape = []int{w.Shape[0], 1, w.Shape[1]}
		return w, nil
	case opQKVZ:
		z, err := s.f.Weight(e.gate)
		if err != nil {
			return nil, err
		}
		return joinQKVZ(name, w, z, s.dims)
	}
	if e.vb != "" {
		v, err := s.f.Weight(e.vb)
		if err != nil {
			return nil, err
		}
		return joinKVB(name, w, v)
	}
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

// joinKVB undoes the deepseek2 converter's split of kv_b_proj
// [heads*(nope+v), rank] into attn_k_b [heads, rank, nope] (each head's
// nope rows transposed) and attn_v_b [heads, v, rank]: per head, the nope
// rows of kv_b are k_b's columns, then v_b's rows. Float formats are moved
// element by element (exact); block formats are dequantized to F32, since
// k_b's blocks run along nope and kv_b's along rank.
func joinKVB(name string, k, v *kernels.Weight) (*kernels.Weight, error) {
	if len(k.Shape) != 3 || len(v.Shape) != 3 || k.Shape[0] != v.Shape[0] || k.Shape[1] != v.Shape[2] {
		return nil, fmt.Errorf("%w: %s: attn_k_b %v and attn_v_b %v do not pair", ErrFormat, name, k.Shape, v.Shape)
	}
	heads, rank, nope, dv := k.Shape[0], k.Shape[1], k.Shape[2], v.Shape[1]
	es := map[kernels.DType]int{kernels.F32: 4, kernels.F16: 2, kernels.BF16: 2}
	dt, size := k.DType, es[k.DType]
	if k.DType != v.DType || size == 0 {
		kf, err := toF32(k)
		if err != nil {
			return nil, err
		}
		vf, err := toF32(v)
		if err != nil {
			return nil, err
		}
		k, v, dt, size = kf, vf, kernels.F32, 4
	}
	out := make([]byte, heads*(nope+dv)*rank*size)
	for h := 0; h < heads; h++ {
		base := h * (nope + dv) * rank
		for i := 0; i < nope; i++ {
			for r := 0; r < rank; r++ {
				src := ((h*rank+r)*nope + i) * size
				dst := (base + i*rank + r) * size
				copy(out[dst:dst+size], k.Data[src:src+size])
			}
		}
		vs := h * dv * rank * size
		copy(out[(base+nope*rank)*size:], v.Data[vs:vs+dv*rank*size])
	}
	w := &kernels.Weight{Name: name, DType: dt, Shape: []int{heads * (nope + dv), rank}, Data: out}
	return w, w.Validate()
}

// toF32 dequantizes a weight of any supported format to F32.
func toF32(w *kernels.Weight) (*kernels.Weight, error) {
	cols := w.Shape[len(w.Shape)-1]
	rows := 1
	for _, d := range w.Shape[:len(w.Shape)-1] {
		rows *= d
	}
	rb, err := w.DType.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4*rows*cols)
	row := make([]float32, cols)
	for r := 0; r < rows; r++ {
		if err := quant.DequantizeRow(w.DType, w.Data[r*rb:(r+1)*rb], row); err != nil {
			return nil, fmt.Errorf("%s: %w", w.Name, err)
		}
		for i, x := range row {
			binary.LittleEndian.PutUint32(out[4*(r*cols+i):], math.Float32bits(x))
		}
	}
	return &kernels.Weight{Name: w.Name, DType: kernels.F32, Shape: w.Shape, Data: out}, nil
}
