package models

import "github.com/pocketllm/pocketllm/kernels"

// decodeReader is a Network that knows which of its weights a one-token
// step reads (Decoder); others are taken to read all of them.
type decodeReader interface {
	DecodeReadBytes() int64
}

// DecodeReadBytes is the weight bytes one decode step reads on average,
// the numerator of a memory-bandwidth roofline. It is WeightBytes less
// what a single token leaves untouched: the rows of an embedding table
// other than its own (unless the table is also the LM head), and in each
// mixture-of-experts layer the routed experts it does not select — a
// token reads top_k of n_routed experts, so on average that fraction of
// the layer's routed expert bytes. Shared experts, routers, attention and
// dense layers count in full. GGUF's stacked ffn_*_exps tensors are split
// into per-expert tensors by the source, so they count as experts too.
func (m *Model) DecodeReadBytes() int64 {
	if d, ok := m.net.(decodeReader); ok {
		return d.DecodeReadBytes()
	}
	return m.net.WeightBytes()
}

// DecodeReadBytes implements decodeReader (see Model.DecodeReadBytes).
func (d *Decoder) DecodeReadBytes() int64 {
	n := d.weightBytes
	// The embedding lookup reads one row; the table is read whole only
	// when it is also the LM head (a tensor-parallel head has its own
	// shard, counted in weightBytes, and leaves the table to the lookup).
	if d.Embed != nil && (d.LMHead != d.Embed || d.head != nil) {
		w := d.Embed.Weight()
		b := tensorBytes(d.Embed)
		if rows := w.Rows(); rows > 0 {
			n -= b - b/int64(rows)
		}
	}
	for _, l := range d.Layers {
		moe := moeOf(l.FFN)
		if moe == nil || moe.Router.Experts <= 0 {
			continue
		}
		var routed int64
		for _, e := range moe.Experts {
			routed += mlpBytes(e)
		}
		k, e := int64(min(moe.Router.TopK, moe.Router.Experts)), int64(moe.Router.Experts)
		n -= routed - routed*k/e
	}
	return n
}

// moeOf returns the mixture-of-experts layer behind an FFN, looking
// through a tensor-parallel all-reduce; nil for a dense FFN.
func moeOf(f FFN) *MoE {
	if r, ok := f.(*allReduce); ok {
		f, _ = r.inner.(FFN)
	}
	m, _ := f.(*MoE)
	return m
}

func mlpBytes(m *MLP) int64 {
	if m == nil {
		return 0
	}
	return tensorBytes(m.Gate) + tensorBytes(m.Up) + tensorBytes(m.Down)
}

// tensorBytes is a tensor's stored size as the binder counts it: data and
// FP8 block scales.
func tensorBytes(t kernels.Tensor) int64 {
	if t == nil {
		return 0
	}
	w := t.Weight()
	return int64(len(w.Data)) + int64(len(w.Scale))*4
}
