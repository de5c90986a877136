package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"

	"github.com/pocketllm/pocketllm/kernels"
)

// Transformations of the Gated DeltaNet hybrids (qwen3next), undone by
// the source.
const (
	opNone   = iota
	opALog   // ssm_a = -exp(A_log): A_log = log(-ssm_a)
	opMinus1 // zero-centred norms are stored as 1+w
	opConv   // conv1d [C, 1, K] is stored squeezed [C, K]
	opQKVZ   // in_proj_qkvz is stored as attn_qkv (all q, all k, all v) and attn_gate (z)
)

// qwen35's converter reorders the value heads from grouped by key head to
// tiled order in these tensors; the source puts them back.
const (
	tileNone = iota
	tileRows // rows of value heads [VHeads·DV, …]: in_proj_z
	tileV    // rows after the q and k channels: in_proj_qkv, conv1d
	tileHead // one row (or value) per value head: in_proj_a/b, A_log, dt_bias
	tileCols // columns of value heads: out_proj
)

type hybridName struct {
	hf   string
	op   int
	tile int
}

// hybridNames maps a qwen3next block tensor (the name after blk.N.) onto
// transformers' name under model.layers.N.
var hybridNames = map[string]hybridName{
	"ssm_a":                      {"linear_attn.A_log", opALog, tileNone},
	"ssm_dt.bias":                {"linear_attn.dt_bias", opNone, tileNone},
	"ssm_conv1d.weight":          {"linear_attn.conv1d.weight", opConv, tileNone},
	"ssm_norm.weight":            {"linear_attn.norm.weight", opNone, tileNone},
	"ssm_out.weight":             {"linear_attn.out_proj.weight", opNone, tileNone},
	"ssm_ba.weight":              {"linear_attn.in_proj_ba.weight", opNone, tileNone},
	"attn_qkv.weight":            {"linear_attn.in_proj_qkvz.weight", opQKVZ, tileNone},
	"attn_norm.weight":           {"input_layernorm.weight", opMinus1, tileNone},
	"post_attention_norm.weight": {"post_attention_layernorm.weight", opMinus1, tileNone},
	"attn_q_norm.weight":         {"self_attn.q_norm.weight", opMinus1, tileNone},
	"attn_k_norm.weight":         {"self_attn.k_norm.weight", opMinus1, tileNone},
	"ffn_gate_inp_shexp.weight":  {"mlp.shared_expert_gate.weight", opNone, tileNone},
	"ffn_gate_shexp.weight":      {"mlp.shared_expert.gate_proj.weight", opNone, tileNone},
	"ffn_up_shexp.weight":        {"mlp.shared_expert.up_proj.weight", opNone, tileNone},
	"ffn_down_shexp.weight":      {"mlp.shared_expert.down_proj.weight", opNone, tileNone},
}

// qwen35Names are qwen35's (Qwen3.5, separate projections).
var qwen35Names = map[string]hybridName{
	"ssm_a":                      {"linear_attn.A_log", opALog, tileHead},
	"ssm_dt.bias":                {"linear_attn.dt_bias", opNone, tileHead},
	"ssm_conv1d.weight":          {"linear_attn.conv1d.weight", opConv, tileV},
	"ssm_norm.weight":            {"linear_attn.norm.weight", opNone, tileNone},
	"ssm_out.weight":             {"linear_attn.out_proj.weight", opNone, tileCols},
	"ssm_alpha.weight":           {"linear_attn.in_proj_a.weight", opNone, tileHead},
	"ssm_beta.weight":            {"linear_attn.in_proj_b.weight", opNone, tileHead},
	"attn_qkv.weight":            {"linear_attn.in_proj_qkv.weight", opNone, tileV},
	"attn_gate.weight":           {"linear_attn.in_proj_z.weight", opNone, tileRows},
	"attn_norm.weight":           {"input_layernorm.weight", opMinus1, tileNone},
	"post_attention_norm.weight": {"post_attention_layernorm.weight", opMinus1, tileNone},
	"attn_q_norm.weight":         {"self_attn.q_norm.weight", opMinus1, tileNone},
	"attn_k_norm.weight":         {"self_attn.k_norm.weight", opMinus1, tileNone},
}

// untile puts the value heads of w back from tiled order (value head j of
// key head k at j·KHeads+k) into transformers' grouped order (k·r+j). For
// rows it moves whole rows (exact in any format); for columns and vectors
// it works on F32 values.
func untile(w *kernels.Weight, kind int, d deltaDims) (*kernels.Weight, error) {
	r := d.vHeads / d.kHeads
	if kind == tileNone || r == 1 {
		return w, nil
	}
	off, hd := 0, d.dv
	switch kind {
	case tileV:
		off = 2 * d.kHeads * d.dk
	case tileHead:
		hd = 1
	}
	if kind == tileCols || len(w.Shape) == 1 {
		f, err := toF32(w)
		if err != nil {
			return nil, err
		}
		f.Name = w.Name
		w = f
	}
	var unit, lines, stride int // bytes per element moved, lines, bytes per line
	if kind == tileCols || len(w.Shape) == 1 {
		cols := w.Shape[len(w.Shape)-1]
		unit, lines, stride = 4, len(w.Data)/(4*cols), 4*cols
	} else {
		rb, err := w.DType.RowBytes(w.Shape[len(w.Shape)-1])
		if err != nil {
			return nil, err
		}
		unit, lines, stride = rb, 1, len(w.Data)
	}
	span := d.vHeads * hd * unit
	if (off*unit)+span > stride {
		return nil, fmt.Errorf("%w: %s %v does not hold %d value heads of %d", ErrFormat, w.Name, w.Shape, d.vHeads, hd)
	}
	out := append([]byte(nil), w.Data...)
	hb := hd * unit
	for l := range lines {
		base := l*stride + off*unit
		for k := range d.kHeads {
			for j := range r {
				src, dst := base+(j*d.kHeads+k)*hb, base+(k*r+j)*hb
				copy(out[dst:dst+hb], w.Data[src:src+hb])
			}
		}
	}
	w.Data = out
	return w, nil
}

// deltaDims are the linear-attention sizes the qkvz regrouping needs.
type deltaDims struct{ kHeads, vHeads, dk, dv int }

func (f *File) deltaDims(arch string) (deltaDims, error) {
	u := func(k string) int {
		v, _ := f.Metadata.Uint(arch + "." + k)
		if v > 1<<20 {
			return 0
		}
		return int(v)
	}
	d := deltaDims{kHeads: u("ssm.group_count"), vHeads: u("ssm.time_step_rank"), dk: u("ssm.state_size")}
	if d.vHeads > 0 {
		d.dv = u("ssm.inner_size") / d.vHeads
	}
	if d.kHeads <= 0 || d.vHeads <= 0 || d.dk <= 0 || d.dv <= 0 || d.vHeads%d.kHeads != 0 {
		return d, fmt.Errorf("%w: %s ssm sizes %+v", ErrFormat, arch, d)
	}
	return d, nil
}

// mapF32 dequantizes w and applies fn to every value.
func mapF32(w *kernels.Weight, fn func(float64) float64) (*kernels.Weight, error) {
	out, err := toF32(w)
	if err != nil {
		return nil, err
	}
	out.Name = w.Name
	for i := 0; i+4 <= len(out.Data); i += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(out.Data[i:]))
		binary.LittleEndian.PutUint32(out.Data[i:], math.Float32bits(float32(fn(float64(x)))))
	}
	return out, nil
}

// joinQKVZ rebuilds in_proj_qkvz, whose rows are grouped per key head as
// [q (dk), k (dk), v (r·dv), z (r·dv)], from attn_qkv (all heads' q, then
// all k, then all v) and attn_gate (all z): an exact row reorder.
func joinQKVZ(name string, qkv, z *kernels.Weight, d deltaDims) (*kernels.Weight, error) {
	r := d.vHeads / d.kHeads
	qkvRows, zRows := 2*d.kHeads*d.dk+d.vHeads*d.dv, d.vHeads*d.dv
	if len(qkv.Shape) != 2 || len(z.Shape) != 2 || qkv.Shape[0] != qkvRows || z.Shape[0] != zRows || qkv.Shape[1] != z.Shape[1] {
		return nil, fmt.Errorf("%w: %s: attn_qkv %v and attn_gate %v do not fit %+v", ErrFormat, name, qkv.Shape, z.Shape, d)
	}
	if qkv.DType != z.DType {
		var err error
		if qkv, err = toF32(qkv); err != nil {
			return nil, err
		}
		if z, err = toF32(z); err != nil {
			return nil, err
		}
	}
	rb, err := qkv.DType.RowBytes(qkv.Shape[1])
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, (qkvRows+zRows)*rb)
	rows := func(src []byte, lo, n int) { out = append(out, src[lo*rb:(lo+n)*rb]...) }
	vg := r * d.dv
	for kh := range d.kHeads {
		rows(qkv.Data, kh*d.dk, d.dk)
		rows(qkv.Data, d.kHeads*d.dk+kh*d.dk, d.dk)
		rows(qkv.Data, 2*d.kHeads*d.dk+kh*vg, vg)
		rows(z.Data, kh*vg, vg)
	}
	w := &kernels.Weight{Name: name, DType: qkv.DType, Shape: []int{qkvRows + zRows, qkv.Shape[1]}, Data: out}
	return w, w.Validate()
}

var hybridBlockRe = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)

// addHybrid adds the qwen3next tensors whose names or values the
// converter changed; it reports false for the others.
func (s *source) addHybrid(name string, add func(string, entry) error) (bool, error) {
	names := hybridNames
	if s.arch == "qwen35" {
		names = qwen35Names
	}
	if name == "output_norm.weight" {
		return true, add("model.norm.weight", entry{gguf: name, expert: -1, op: opMinus1})
	}
	m := hybridBlockRe.FindStringSubmatch(name)
	if m == nil {
		return false, nil
	}
	if m[2] == "attn_gate.weight" && s.arch == "qwen3next" {
		if _, ok := s.f.Tensor("blk." + m[1] + ".attn_qkv.weight"); ok {
			return true, nil // joined into in_proj_qkvz
		}
		return false, nil
	}
	h, ok := names[m[2]]
	if !ok {
		return false, nil
	}
	e := entry{gguf: name, expert: -1, op: h.op, tile: h.tile}
	if h.op == opQKVZ {
		e.gate = "blk." + m[1] + ".attn_gate.weight"
		if _, ok := s.f.Tensor(e.gate); !ok {
			return false, nil
		}
	}
	return true, add("model.layers."+m[1]+"."+h.hf, e)
}
