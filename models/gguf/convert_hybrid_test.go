package gguf_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/gguf"
)

// Qwen3NextModel: the DeltaNet tensors renamed to ssm_*, A_log stored as
// ssm_a = -exp(A_log), dt_bias as ssm_dt.bias, conv1d squeezed to [C, K],
// every zero-centred norm (all but linear_attn.norm) stored as 1+w,
// in_proj_qkvz regrouped from per-key-head [q, k, v, z] blocks into
// attn_qkv (all q, all k, all v) and attn_gate (z), in_proj_ba kept as
// ssm_ba, the shared expert as *_shexp and its gate as
// ffn_gate_inp_shexp. The converter computes -exp and +1 in the
// checkpoint's dtype; the test converts an F32 copy so that the GGUF
// holds the reference's weights to float32 rounding.
var qwen3NextFamily = family{
	fixture: "qwen3_next", arch: "qwen3next", f32: true,
	expertPrefix: "mlp.experts.",
	expertNames: map[string]string{"gate_proj.weight": "ffn_gate_exps.weight",
		"up_proj.weight": "ffn_up_exps.weight", "down_proj.weight": "ffn_down_exps.weight"},
	names: map[string]string{
		"post_attention_layernorm.weight":    "post_attention_norm.weight",
		"linear_attn.in_proj_ba.weight":      "ssm_ba.weight",
		"linear_attn.out_proj.weight":        "ssm_out.weight",
		"linear_attn.norm.weight":            "ssm_norm.weight",
		"linear_attn.dt_bias":                "ssm_dt.bias",
		"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
		"mlp.shared_expert.up_proj.weight":   "ffn_up_shexp.weight",
		"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
		"mlp.shared_expert_gate.weight":      "ffn_gate_inp_shexp.weight",
	},
	pre: func(name string, t hfTensor) hfTensor {
		if strings.HasSuffix(name, "norm.weight") && !strings.HasSuffix(name, "linear_attn.norm.weight") {
			t.data = mapF32Bytes(t.data, func(x float32) float32 { return x + 1 })
		}
		return t
	},
	transform: func(cfg map[string]any, bid int, name string, t hfTensor) []ggufTensor {
		blk := fmt.Sprintf("blk.%d.", bid)
		switch name {
		case "linear_attn.A_log":
			return []ggufTensor{{name: blk + "ssm_a", shape: t.shape, data: mapF32Bytes(t.data, func(x float32) float32 {
				return -float32(math.Exp(float64(x)))
			})}}
		case "linear_attn.conv1d.weight":
			return []ggufTensor{{name: blk + "ssm_conv1d.weight", shape: []int{t.shape[0], t.shape[2]}, data: t.data}}
		case "linear_attn.in_proj_qkvz.weight":
			return splitQKVZ(cfg, blk, t)
		}
		return nil
	},
	meta: func(cfg map[string]any) []ggufKV {
		const a = "qwen3next"
		u := func(k string) uint32 { return uint32(num(cfg, k)) }
		kvs := textModelKV(a, cfg)
		return append(kvs,
			ggufKV{a + ".expert_feed_forward_length", u("moe_intermediate_size")},
			ggufKV{a + ".expert_shared_feed_forward_length", u("shared_expert_intermediate_size")},
			ggufKV{a + ".ssm.conv_kernel", u("linear_conv_kernel_dim")},
			ggufKV{a + ".ssm.state_size", u("linear_key_head_dim")},
			ggufKV{a + ".ssm.group_count", u("linear_num_key_heads")},
			ggufKV{a + ".ssm.time_step_rank", u("linear_num_value_heads")},
			ggufKV{a + ".ssm.inner_size", u("linear_value_head_dim") * u("linear_num_value_heads")},
			ggufKV{a + ".full_attention_interval", u("full_attention_interval")},
			ggufKV{a + ".rope.dimension_count", uint32(num(cfg, "head_dim") * partial(cfg, 0.25))})
	},
}

func init() { families = append(families, qwen3NextFamily) }

// mapF32Bytes applies fn to F32 bytes.
func mapF32Bytes(b []byte, fn func(float32) float32) []byte {
	out := make([]byte, len(b))
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(fn(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))))
	}
	return out
}

// splitQKVZ is the converter's in_proj_qkvz regrouping: rows grouped per
// key head as [q, k, v, z] become attn_qkv (every head's q, then k, then
// v) and attn_gate (every head's z). F32 rows.
func splitQKVZ(cfg map[string]any, blk string, t hfTensor) []ggufTensor {
	kh, vh := int(num(cfg, "linear_num_key_heads")), int(num(cfg, "linear_num_value_heads"))
	dk, dv := int(num(cfg, "linear_key_head_dim")), int(num(cfg, "linear_value_head_dim"))
	vg := vh / kh * dv
	rb := 4 * t.shape[1]
	group := 2*dk + 2*vg
	rows := func(lo, n int) []byte { return t.data[lo*rb : (lo+n)*rb] }
	var q, k, v, z []byte
	for h := range kh {
		base := h * group
		q = append(q, rows(base, dk)...)
		k = append(k, rows(base+dk, dk)...)
		v = append(v, rows(base+2*dk, vg)...)
		z = append(z, rows(base+2*dk+vg, vg)...)
	}
	qkv := append(append(q, k...), v...)
	return []ggufTensor{
		{name: blk + "attn_qkv.weight", shape: []int{len(qkv) / rb, t.shape[1]}, data: qkv},
		{name: blk + "attn_gate.weight", shape: []int{len(z) / rb, t.shape[1]}, data: z},
	}
}

// Qwen3_5TextModel: Qwen3NextModel's renames and value changes on separate
// projections (in_proj_qkv → attn_qkv, in_proj_z → attn_gate, in_proj_a/b
// → ssm_alpha/ssm_beta), after _LinearAttentionVReorderBase has moved the
// value heads from grouped-by-key-head to tiled order in in_proj_qkv's v
// rows, in_proj_z, in_proj_a/b, A_log, dt_bias, conv1d's v channels and
// out_proj's columns; rope.dimension_sections defaults to [11, 11, 10, 0].
var qwen35Family = family{
	fixture: "qwen3_5", arch: "qwen35", f32: true,
	expertPrefix: "mlp.experts.", // none: dense
	names: map[string]string{
		"post_attention_layernorm.weight": "post_attention_norm.weight",
		"linear_attn.norm.weight":         "ssm_norm.weight",
	},
	pre: func(name string, t hfTensor) hfTensor {
		return qwen3NextFamily.pre(name, t)
	},
	transform: func(cfg map[string]any, bid int, name string, t hfTensor) []ggufTensor {
		blk := fmt.Sprintf("blk.%d.", bid)
		kh, vh := int(num(cfg, "linear_num_key_heads")), int(num(cfg, "linear_num_value_heads"))
		dk, dv := int(num(cfg, "linear_key_head_dim")), int(num(cfg, "linear_value_head_dim"))
		rows := func(data []byte, cols, off, hd int) []byte { // reorder heads of hd rows from row off
			return tileHeads(data, 4*cols, off, kh, vh/kh, hd)
		}
		switch name {
		case "linear_attn.in_proj_qkv.weight":
			return []ggufTensor{{name: blk + "attn_qkv.weight", shape: t.shape, data: rows(t.data, t.shape[1], 2*kh*dk, dv)}}
		case "linear_attn.in_proj_z.weight":
			return []ggufTensor{{name: blk + "attn_gate.weight", shape: t.shape, data: rows(t.data, t.shape[1], 0, dv)}}
		case "linear_attn.in_proj_a.weight":
			return []ggufTensor{{name: blk + "ssm_alpha.weight", shape: t.shape, data: rows(t.data, t.shape[1], 0, 1)}}
		case "linear_attn.in_proj_b.weight":
			return []ggufTensor{{name: blk + "ssm_beta.weight", shape: t.shape, data: rows(t.data, t.shape[1], 0, 1)}}
		case "linear_attn.dt_bias":
			return []ggufTensor{{name: blk + "ssm_dt.bias", shape: t.shape, data: rows(t.data, 1, 0, 1)}}
		case "linear_attn.A_log":
			a := mapF32Bytes(rows(t.data, 1, 0, 1), func(x float32) float32 { return -float32(math.Exp(float64(x))) })
			return []ggufTensor{{name: blk + "ssm_a", shape: t.shape, data: a}}
		case "linear_attn.conv1d.weight":
			return []ggufTensor{{name: blk + "ssm_conv1d.weight", shape: []int{t.shape[0], t.shape[2]}, data: rows(t.data, t.shape[2], 2*kh*dk, dv)}}
		case "linear_attn.out_proj.weight":
			// Columns: reorder each row's value heads.
			cols := t.shape[1]
			out := make([]byte, 0, len(t.data))
			for r := range t.shape[0] {
				out = append(out, tileHeads(t.data[4*r*cols:4*(r+1)*cols], 4, 0, kh, vh/kh, dv)...)
			}
			return []ggufTensor{{name: blk + "ssm_out.weight", shape: t.shape, data: out}}
		}
		return nil
	},
	meta: func(cfg map[string]any) []ggufKV {
		const a = "qwen35"
		kvs := qwen3NextFamily.meta(cfg)
		for i := range kvs {
			kvs[i].key = strings.Replace(kvs[i].key, "qwen3next", a, 1)
		}
		kvs = setKV(kvs, "general.architecture", a)
		var keep []ggufKV
		for _, kv := range kvs {
			if !strings.Contains(kv.key, "expert") {
				keep = append(keep, kv)
			}
		}
		return append(keep, ggufKV{a + ".rope.dimension_sections", []int32{11, 11, 10, 0}})
	},
}

func init() { families = append(families, qwen35Family) }

// tileHeads is _reorder_v_heads: the r·kh heads of hd lines (of lineBytes)
// starting at line off go from grouped (head k·r+j) to tiled (j·kh+k).
func tileHeads(data []byte, lineBytes, off, kh, r, hd int) []byte {
	out := append([]byte(nil), data...)
	hb := hd * lineBytes
	base := off * lineBytes
	for k := range kh {
		for j := range r {
			src, dst := base+(k*r+j)*hb, base+(j*kh+k)*hb
			copy(out[dst:dst+hb], data[src:src+hb])
		}
	}
	return out
}

// TestDeepseek2YarnConfig: DeepSeek-V3's yarn keys as the converter writes
// them (factor, original context, yarn_log_multiplier = 0.1·mscale_all_dim)
// become transformers' rope_scaling.
func TestDeepseek2YarnConfig(t *testing.T) {
	fam := families[2]
	if fam.arch != "deepseek2" {
		t.Fatalf("families[2] is %s", fam.arch)
	}
	meta := fam.meta
	fam.meta = func(cfg map[string]any) []ggufKV {
		const p = "deepseek2.rope.scaling."
		return append(meta(cfg),
			ggufKV{p + "type", "yarn"},
			ggufKV{p + "factor", float32(40)},
			ggufKV{p + "original_context_length", uint32(4096)},
			ggufKV{p + "yarn_log_multiplier", float32(0.1)})
	}
	f, err := gguf.Open(convertFixture(t, fam))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	rs := c.RopeScaling
	if rs == nil || rs.RopeType != "yarn" || rs.Factor != 40 || rs.OriginalMaxPositionEmbeddings != 4096 ||
		math.Abs(rs.MScaleAllDim-1) > 1e-6 || math.Abs(rs.MScale-1) > 1e-6 {
		t.Fatalf("rope_scaling %+v", rs)
	}
}
