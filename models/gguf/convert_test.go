package gguf_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

// This file converts the safetensors fixtures of models/testdata/models into
// GGUF the way llama.cpp's convert_hf_to_gguf.py does for each architecture
// (its tensor names, metadata keys, expert stacking and tensor
// transformations; BF16 matrices and F32 vectors, so the values are exact),
// then loads the result through checkpoint.Open like any user file.

type ggufTensor struct {
	name  string
	typ   uint32 // ggml type: 0 F32, 30 BF16
	shape []int  // row-major, outermost first
	data  []byte
}

type ggufKV struct {
	key string
	val any
}

// writeGGUF writes a GGUF v3 file with 32-byte alignment.
func writeGGUF(path string, kvs []ggufKV, ts []ggufTensor) error {
	var h bytes.Buffer
	le := func(v any) {
		if err := binary.Write(&h, binary.LittleEndian, v); err != nil {
			panic(err)
		}
	}
	str := func(s string) { le(uint64(len(s))); h.WriteString(s) }
	h.WriteString("GGUF")
	le(uint32(3))
	le(uint64(len(ts)))
	le(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.key)
		switch v := kv.val.(type) {
		case uint32:
			le(uint32(4))
			le(v)
		case float32:
			le(uint32(6))
			le(v)
		case bool:
			le(uint32(7))
			le(v)
		case string:
			le(uint32(8))
			str(v)
		case []int32:
			le(uint32(9))
			le(uint32(5))
			le(uint64(len(v)))
			le(v)
		default:
			return fmt.Errorf("%s: value type %T", kv.key, kv.val)
		}
	}
	var off uint64
	for _, t := range ts {
		str(t.name)
		le(uint32(len(t.shape)))
		for d := len(t.shape) - 1; d >= 0; d-- {
			le(uint64(t.shape[d]))
		}
		le(t.typ)
		le(off)
		off += (uint64(len(t.data)) + 31) &^ 31
	}
	for h.Len()%32 != 0 {
		h.WriteByte(0)
	}
	for _, t := range ts {
		h.Write(t.data)
		for h.Len()%32 != 0 {
			h.WriteByte(0)
		}
	}
	return os.WriteFile(path, h.Bytes(), 0o644)
}

// bf16ToF32 widens BF16 bytes to F32 bytes (exact).
func bf16ToF32(b []byte) []byte {
	out := make([]byte, 2*len(b))
	for i := 0; i < len(b)/2; i++ {
		out[4*i+2], out[4*i+3] = b[2*i], b[2*i+1]
	}
	return out
}

// hfTensor is a fixture tensor as the converter sees it.
type hfTensor struct {
	shape []int
	data  []byte // BF16 or F32 per dtype
	dtype string
}

// family describes one convert_hf_to_gguf.py model class.
type family struct {
	fixture, arch string
	// meta returns the architecture's keys (without the arch prefix for
	// {arch}.* keys: those start with ".").
	meta func(cfg map[string]any) []ggufKV
	// tensor maps one HF tensor to its GGUF tensors (nil: dropped, or held
	// for stacking); blockCount is the converter's block count.
	expertPrefix string // e.g. "mlp.experts." or "block_sparse_moe.experts."
	expertNames  map[string]string
	names        map[string]string // HF suffix under model.layers.N. → llama.cpp name
	transform    func(cfg map[string]any, bid int, name string, t hfTensor) []ggufTensor
	// pre, when set, sees every tensor first under its full HF name (the
	// value changes a converter makes before renaming).
	pre func(name string, t hfTensor) hfTensor
	// f32 converts an F32 copy of the fixture (exact), for families whose
	// converter computes on the weights in the checkpoint's dtype.
	f32 bool
}

var commonNames = map[string]string{
	"input_layernorm.weight":              "attn_norm.weight",
	"post_attention_layernorm.weight":     "ffn_norm.weight",
	"self_attn.q_proj.weight":             "attn_q.weight",
	"self_attn.k_proj.weight":             "attn_k.weight",
	"self_attn.v_proj.weight":             "attn_v.weight",
	"self_attn.q_proj.bias":               "attn_q.bias",
	"self_attn.k_proj.bias":               "attn_k.bias",
	"self_attn.v_proj.bias":               "attn_v.bias",
	"self_attn.o_proj.weight":             "attn_output.weight",
	"self_attn.q_norm.weight":             "attn_q_norm.weight",
	"self_attn.k_norm.weight":             "attn_k_norm.weight",
	"mlp.gate_proj.weight":                "ffn_gate.weight",
	"mlp.up_proj.weight":                  "ffn_up.weight",
	"mlp.down_proj.weight":                "ffn_down.weight",
	"mlp.gate.weight":                     "ffn_gate_inp.weight",
	"mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
	"mlp.shared_experts.up_proj.weight":   "ffn_up_shexp.weight",
	"mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
	"mlp.gate.e_score_correction_bias":    "exp_probs_b.bias",
}

func num(cfg map[string]any, key string) float64 {
	v, _ := cfg[key].(float64)
	return v
}

// ropeTheta reads rope_theta the way transformers 5 configs state it.
func ropeTheta(cfg map[string]any) float64 {
	if p, ok := cfg["rope_parameters"].(map[string]any); ok {
		if v, ok := p["rope_theta"].(float64); ok {
			return v
		}
	}
	return num(cfg, "rope_theta")
}

// textModelKV is TextModel.set_gguf_parameters: the keys every family gets.
func textModelKV(arch string, cfg map[string]any) []ggufKV {
	u := func(k string) uint32 { return uint32(num(cfg, k)) }
	kvs := []ggufKV{
		{"general.architecture", arch},
		{"general.file_type", uint32(32)}, // MOSTLY_BF16
		{arch + ".block_count", u("num_hidden_layers")},
		{arch + ".context_length", u("max_position_embeddings")},
		{arch + ".embedding_length", u("hidden_size")},
		{arch + ".feed_forward_length", u("intermediate_size")},
		{arch + ".attention.head_count", u("num_attention_heads")},
		{arch + ".attention.head_count_kv", u("num_key_value_heads")},
		{arch + ".rope.freq_base", float32(ropeTheta(cfg))},
		{arch + ".attention.layer_norm_rms_epsilon", float32(num(cfg, "rms_norm_eps"))},
		{"tokenizer.ggml.bos_token_id", u("bos_token_id")},
		{"tokenizer.ggml.eos_token_id", u("eos_token_id")},
	}
	if _, ok := cfg["head_dim"]; ok {
		kvs = append(kvs, ggufKV{arch + ".attention.key_length", u("head_dim")},
			ggufKV{arch + ".attention.value_length", u("head_dim")})
	}
	for _, k := range []string{"num_local_experts", "num_experts"} {
		if _, ok := cfg[k]; ok {
			kvs = append(kvs, ggufKV{arch + ".expert_count", u(k)})
			break
		}
	}
	if _, ok := cfg["num_experts_per_tok"]; ok {
		kvs = append(kvs, ggufKV{arch + ".expert_used_count", u("num_experts_per_tok")})
	}
	if _, ok := cfg["n_group"]; ok {
		kvs = append(kvs, ggufKV{arch + ".expert_group_count", u("n_group")})
	}
	if _, ok := cfg["topk_group"]; ok {
		kvs = append(kvs, ggufKV{arch + ".expert_group_used_count", u("topk_group")})
	}
	return kvs
}

var layerRe = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)

// convertFixture converts models/testdata/models/<fam.fixture> and returns
// the GGUF's path.
func convertFixture(t *testing.T, fam family) string {
	t.Helper()
	dir := filepath.Join("..", "testdata", "models", fam.fixture)
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.OpenFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	names := st.Names()
	sort.Strings(names)
	var out []ggufTensor
	emit := func(name string, ht hfTensor) {
		gt := ggufTensor{name: name, shape: ht.shape, data: ht.data, typ: 30}
		if ht.dtype == "F32" {
			gt.typ = 0
		}
		// The converter stores vectors (norms, biases) as F32.
		if len(ht.shape) == 1 && ht.dtype == "BF16" {
			gt.typ, gt.data = 0, bf16ToF32(ht.data)
		}
		out = append(out, gt)
	}
	stacks := map[string][][]byte{} // gguf name → per-expert data
	stackShape := map[string][]int{}
	stackDType := map[string]string{}
	for _, n := range names {
		tt, _ := st.Tensor(n)
		ht := hfTensor{shape: append([]int(nil), tt.Shape...), data: tt.Data, dtype: tt.DType}
		if tt.DType != "BF16" && tt.DType != "F32" {
			t.Fatalf("%s: dtype %s", n, tt.DType)
		}
		if fam.f32 && ht.dtype == "BF16" {
			ht.data, ht.dtype = bf16ToF32(ht.data), "F32"
		}
		if fam.pre != nil {
			ht = fam.pre(n, ht)
		}
		switch n {
		case "model.embed_tokens.weight":
			emit("token_embd.weight", ht)
			continue
		case "model.norm.weight":
			emit("output_norm.weight", ht)
			continue
		case "lm_head.weight":
			emit("output.weight", ht)
			continue
		}
		m := layerRe.FindStringSubmatch(n)
		if m == nil {
			t.Fatalf("unmapped %s", n)
		}
		bid, _ := strconv.Atoi(m[1])
		rest := m[2]
		if strings.HasPrefix(rest, fam.expertPrefix) {
			// experts.E.W.weight → stacked [E, rows, cols] in expert order.
			parts := strings.SplitN(strings.TrimPrefix(rest, fam.expertPrefix), ".", 2)
			e, _ := strconv.Atoi(parts[0])
			gn, ok := fam.expertNames[parts[1]]
			if !ok {
				t.Fatalf("unmapped expert tensor %s", n)
			}
			gn = fmt.Sprintf("blk.%d.%s", bid, gn)
			for len(stacks[gn]) <= e {
				stacks[gn] = append(stacks[gn], nil)
			}
			stacks[gn][e] = ht.data
			stackShape[gn] = ht.shape
			stackDType[gn] = ht.dtype
			continue
		}
		if fam.transform != nil {
			if ts := fam.transform(cfg, bid, rest, ht); ts != nil {
				out = append(out, ts...)
				continue
			}
		}
		gn, ok := fam.names[rest]
		if !ok {
			gn, ok = commonNames[rest]
		}
		if !ok {
			t.Fatalf("unmapped %s", n)
		}
		emit(fmt.Sprintf("blk.%d.%s", bid, gn), ht)
	}
	for gn, parts := range stacks {
		var data []byte
		for e, p := range parts {
			if p == nil {
				t.Fatalf("%s: expert %d missing", gn, e)
			}
			data = append(data, p...)
		}
		emit(gn, hfTensor{shape: append([]int{len(parts)}, stackShape[gn]...), data: data, dtype: stackDType[gn]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	kvs := fam.meta(cfg)
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := writeGGUF(path, kvs, out); err != nil {
		t.Fatal(err)
	}
	return path
}

// setKV replaces or appends key.
func setKV(kvs []ggufKV, key string, val any) []ggufKV {
	for i := range kvs {
		if kvs[i].key == key {
			kvs[i].val = val
			return kvs
		}
	}
	return append(kvs, ggufKV{key, val})
}

var families = []family{
	{
		// Glm4MoeModel: block_count counts the NextN layers; routed experts
		// only in expert_count; post_attention_layernorm is ATTN_POST_NORM;
		// e_score_correction_bias → exp_probs_b.bias; experts stacked
		// [down, gate, up] per layer.
		fixture: "glm4_moe", arch: "glm4moe",
		expertPrefix: "mlp.experts.",
		expertNames: map[string]string{"gate_proj.weight": "ffn_gate_exps.weight",
			"up_proj.weight": "ffn_up_exps.weight", "down_proj.weight": "ffn_down_exps.weight"},
		names: map[string]string{"post_attention_layernorm.weight": "post_attention_norm.weight"},
		meta: func(cfg map[string]any) []ggufKV {
			const a = "glm4moe"
			u := func(k string) uint32 { return uint32(num(cfg, k)) }
			kvs := textModelKV(a, cfg)
			kvs = setKV(kvs, a+".block_count", u("num_hidden_layers")+u("num_nextn_predict_layers"))
			kvs = append(kvs,
				ggufKV{a + ".rope.dimension_count", uint32(num(cfg, "head_dim") * partial(cfg, 0.5))},
				ggufKV{a + ".expert_count", u("n_routed_experts")},
				ggufKV{a + ".expert_feed_forward_length", u("moe_intermediate_size")},
				ggufKV{a + ".expert_shared_count", u("n_shared_experts")},
				ggufKV{a + ".leading_dense_block_count", u("first_k_dense_replace")},
				ggufKV{a + ".expert_gating_func", uint32(2)},
				ggufKV{a + ".expert_weights_scale", float32(num(cfg, "routed_scaling_factor"))},
				ggufKV{a + ".expert_weights_norm", cfg["norm_topk_prob"] == true},
				ggufKV{a + ".nextn_predict_layers", u("num_nextn_predict_layers")})
			return kvs
		},
	},
	{
		// MiniMaxM2Model: experts w1/w2/w3 stacked into gate/down/up;
		// expert_feed_forward_length = intermediate_size; rope.dimension_count
		// = rotary_dim; gating func from scoring_func (sigmoid).
		fixture: "minimax_m2", arch: "minimax-m2",
		expertPrefix: "block_sparse_moe.experts.",
		expertNames: map[string]string{"w1.weight": "ffn_gate_exps.weight",
			"w3.weight": "ffn_up_exps.weight", "w2.weight": "ffn_down_exps.weight"},
		names: map[string]string{"block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
			"block_sparse_moe.e_score_correction_bias": "exp_probs_b.bias"},
		meta: func(cfg map[string]any) []ggufKV {
			const a = "minimax-m2"
			kvs := textModelKV(a, cfg)
			// The fixture's config has rotary_dim 8 but no
			// partial_rotary_factor, and its transformers reference rotates
			// whole heads; the converter would write 8 here (and llama.cpp
			// would rotate 8 of 16). The test writes the width the reference
			// used so that it can compare; the mapping itself reads the key
			// as llama.cpp does.
			rd := uint32(num(cfg, "head_dim"))
			return append(kvs,
				ggufKV{a + ".expert_gating_func", uint32(2)},
				ggufKV{a + ".expert_feed_forward_length", uint32(num(cfg, "intermediate_size"))},
				ggufKV{a + ".rope.dimension_count", rd})
		},
	},
	{
		// DeepseekV2Model (also DeepseekV3ForCausalLM): MLA written as MQA
		// (head_count_kv 1, key/value_length of the latent cache, per-head
		// sizes in *_length_mla), kv_b_proj split into attn_k_b
		// (transposed) and attn_v_b, experts stacked, shared experts as
		// *_shexp, e_score_correction_bias as exp_probs_b.bias, MTP layers
		// skipped. The fixture states no scoring_func, so no
		// expert_gating_func is written (exp_probs_b marks V3 routing).
		fixture: "deepseek_v3", arch: "deepseek2",
		expertPrefix: "mlp.experts.",
		expertNames: map[string]string{"gate_proj.weight": "ffn_gate_exps.weight",
			"up_proj.weight": "ffn_up_exps.weight", "down_proj.weight": "ffn_down_exps.weight"},
		names: map[string]string{
			"self_attn.q_a_proj.weight":           "attn_q_a.weight",
			"self_attn.q_a_layernorm.weight":      "attn_q_a_norm.weight",
			"self_attn.q_b_proj.weight":           "attn_q_b.weight",
			"self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
			"self_attn.kv_a_layernorm.weight":     "attn_kv_a_norm.weight",
		},
		transform: splitKVB,
		meta: func(cfg map[string]any) []ggufKV {
			const a = "deepseek2"
			u := func(k string) uint32 { return uint32(num(cfg, k)) }
			kvs := textModelKV(a, cfg)
			kvs = setKV(kvs, a+".attention.head_count_kv", uint32(1))
			kvs = setKV(kvs, a+".attention.key_length", u("kv_lora_rank")+u("qk_rope_head_dim"))
			kvs = setKV(kvs, a+".attention.value_length", u("kv_lora_rank"))
			return append(kvs,
				ggufKV{a + ".leading_dense_block_count", u("first_k_dense_replace")},
				ggufKV{a + ".vocab_size", u("vocab_size")},
				ggufKV{a + ".attention.q_lora_rank", u("q_lora_rank")},
				ggufKV{a + ".attention.kv_lora_rank", u("kv_lora_rank")},
				ggufKV{a + ".attention.key_length_mla", u("qk_nope_head_dim") + u("qk_rope_head_dim")},
				ggufKV{a + ".attention.value_length_mla", u("v_head_dim")},
				ggufKV{a + ".expert_feed_forward_length", u("moe_intermediate_size")},
				ggufKV{a + ".expert_count", u("n_routed_experts")},
				ggufKV{a + ".expert_shared_count", u("n_shared_experts")},
				ggufKV{a + ".expert_weights_scale", float32(num(cfg, "routed_scaling_factor"))},
				ggufKV{a + ".expert_weights_norm", cfg["norm_topk_prob"] == true},
				ggufKV{a + ".rope.dimension_count", u("qk_rope_head_dim")})
		},
	},
}

// splitKVB is DeepseekV2Model's kv_b_proj split: kv_b [h*(nope+v), rank]
// viewed [h, nope+v, rank], split into k_b [h, nope, rank] transposed to
// [h, rank, nope] and v_b [h, v, rank].
func splitKVB(cfg map[string]any, bid int, name string, t hfTensor) []ggufTensor {
	if name != "self_attn.kv_b_proj.weight" {
		return nil
	}
	h := int(num(cfg, "num_attention_heads"))
	nope, dv := int(num(cfg, "qk_nope_head_dim")), int(num(cfg, "v_head_dim"))
	rank := t.shape[1]
	const es = 2 // BF16
	kb := make([]byte, h*rank*nope*es)
	var vb []byte
	for hh := 0; hh < h; hh++ {
		base := hh * (nope + dv) * rank
		for i := 0; i < nope; i++ {
			for r := 0; r < rank; r++ {
				src := (base + i*rank + r) * es
				dst := ((hh*rank+r)*nope + i) * es
				copy(kb[dst:dst+es], t.data[src:src+es])
			}
		}
		vb = append(vb, t.data[(base+nope*rank)*es:(base+(nope+dv)*rank)*es]...)
	}
	return []ggufTensor{
		{name: fmt.Sprintf("blk.%d.attn_k_b.weight", bid), typ: 30, shape: []int{h, rank, nope}, data: kb},
		{name: fmt.Sprintf("blk.%d.attn_v_b.weight", bid), typ: 30, shape: []int{h, dv, rank}, data: vb},
	}
}

func partial(cfg map[string]any, def float64) float64 {
	if p, ok := cfg["rope_parameters"].(map[string]any); ok {
		if v, ok := p["partial_rotary_factor"].(float64); ok {
			return v
		}
	}
	if v, ok := cfg["partial_rotary_factor"].(float64); ok {
		return v
	}
	return def
}

// TestConvertedParity converts each MoE family's safetensors fixture to
// GGUF as llama.cpp's converter would, opens it as a user checkpoint and
// checks logits and greedy tokens against the fixture's reference.
func TestConvertedParity(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.arch, func(t *testing.T) {
			path := convertFixture(t, fam)
			ck, err := checkpoint.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Source.Close()
			want, err := os.ReadFile(filepath.Join("..", "testdata", "models", fam.fixture, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var wc map[string]any
			_ = json.Unmarshal(want, &wc)
			if got, w := ck.Config.Arch(), wc["architectures"].([]any)[0]; got != w {
				t.Fatalf("arch %s, want %s", got, w)
			}
			ref := loadReference(t, filepath.Join("..", "..", "testdata", "models", fam.fixture))
			checkParity(t, fam.fixture, ck.Config, ck.Source, ref)
		})
	}
}
