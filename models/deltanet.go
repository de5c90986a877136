package models

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// This file holds the shared parts of hybrid models that interleave Gated
// DeltaNet (linear attention) layers with gated softmax attention
// (Qwen3-Next, Qwen3.5): the DeltaNet mixer, the per-sequence recurrent
// state it reads and writes, and the Network that keeps that state in step
// with the sequence. Architecture files supply only the input projections,
// whose checkpoint layouts differ.

// ErrState marks a Seq.State that does not fit the pass: missing, of the
// wrong model, or not at the position the new tokens start from.
var ErrState = errors.New("recurrent state mismatch")

// RecurrentState is what Model.NewState returns for models with recurrent
// layers (Seq.State holds it). The session cache keeps snapshots of it at
// block boundaries: a forward pass starting at position p needs the state
// as it was after exactly p tokens.
type RecurrentState interface {
	// Pos is the number of tokens the state has absorbed (-1 after a
	// failed pass: Reset or Restore it before use).
	Pos() int
	// Clone returns an independent copy (a fork of the sequence).
	Clone() RecurrentState
	// Len is the number of float32 values of a snapshot; SizeBytes is 4×Len.
	Len() int
	SizeBytes() int64
	// Snapshot returns the state as Len() float32 values.
	Snapshot() []float32
	// Restore loads a Snapshot taken at position pos.
	Restore(data []float32, pos int) error
	// Reset returns the state to the empty sequence (position 0).
	Reset()
}

// HeldState is a snapshot its runner keeps (a worker's clone of a state in
// device memory), so that it restores without crossing to the caller and
// back. Release lets the runner free it; a released or lost one no longer
// restores.
type HeldState interface {
	// Pos is the position of the state it holds.
	Pos() int
	// Bytes is the memory it holds in the runner.
	Bytes() int64
	Release()
}

// HoldingState is a RecurrentState whose runner can keep snapshots itself.
type HoldingState interface {
	RecurrentState
	// Hold returns a copy of the state as it is now, kept by the runner,
	// or an error (no room, a lost runner): the caller takes a Snapshot
	// instead.
	Hold() (HeldState, error)
	// RestoreHeld makes the state h's contents at h's position.
	RestoreHeld(h HeldState) error
}

// DeltaState is the recurrent state of one sequence of a Gated DeltaNet
// hybrid: for every linear-attention layer, in layer order, the causal
// convolution's last ConvKernel-1 inputs ([ConvKernel-1, ConvDim], oldest
// first) and the delta-rule state ([VHeads, DK, DV], transformers'
// recurrent_states layout). The buffers live on the backend; Snapshot and
// Restore move them through the host as one []float32 laid out as
// conv₀, rec₀, conv₁, rec₁, … in that order. The attention layers' KV
// lives in the paged pool as for any model.
type DeltaState struct {
	be    kernels.Backend
	shape kernels.DeltaShape
	conv  []kernels.Buf
	rec   []kernels.Buf
	// whole, where not nil, is one buffer of wholeN floats that conv and
	// rec are views of: CopyFrom between two such states is one copy, not
	// two a layer (a worker copies a state before every step it runs
	// ahead, daemon/worker/rank_ahead.go: 96 copies a Qwen3.5-27B state).
	whole  kernels.Buf
	wholeN int
	pos    int
	marks  *deltaMarks // HoldAt's request for the next pass (deltanet_marks.go)
}

var _ RecurrentState = (*DeltaState)(nil)

func newDeltaState(be kernels.Backend, s kernels.DeltaShape, layers int) *DeltaState {
	st := &DeltaState{be: be, shape: s, conv: make([]kernels.Buf, layers), rec: make([]kernels.Buf, layers)}
	// One allocation with the layers' parts as views (each a driver call
	// on a GPU otherwise: 96 for Qwen3.5-27B, and a snapshot held on the
	// device is a new state), and CopyFrom one copy.
	v, views := be.(kernels.BufViewer)
	if _, copies := be.(kernels.BufCopier); views && copies {
		// Parts 64-float (256-byte) aligned.
		al := func(n int) int { return (max(n, 1) + 63) &^ 63 }
		st.wholeN = layers * (al(s.ConvStateLen()) + al(s.RecStateLen()))
		st.whole = be.NewBuf(st.wholeN)
		off := 0
		for i := range layers {
			st.conv[i] = v.ViewBuf(st.whole, off, s.ConvStateLen())
			off += al(s.ConvStateLen())
			st.rec[i] = v.ViewBuf(st.whole, off, s.RecStateLen())
			off += al(s.RecStateLen())
		}
		return st
	}
	for i := range layers {
		st.conv[i] = be.NewBuf(s.ConvStateLen())
		st.rec[i] = be.NewBuf(s.RecStateLen())
	}
	return st
}

// Pos implements RecurrentState.
func (s *DeltaState) Pos() int { return s.pos }

// SetPos sets the number of tokens the state has absorbed without
// touching its buffers. It is for a caller that runs the state's ops
// outside Model.Forward — a recorded decode step replayed by the worker
// (daemon/worker/rank_graph.go) — and so must keep the position that
// Forward checks in step with the buffers itself.
func (s *DeltaState) SetPos(pos int) { s.pos = pos }

// Len implements RecurrentState.
func (s *DeltaState) Len() int {
	return len(s.conv) * (s.shape.ConvStateLen() + s.shape.RecStateLen())
}

// SizeBytes implements RecurrentState.
func (s *DeltaState) SizeBytes() int64 { return int64(s.Len()) * 4 }

// Snapshot implements RecurrentState.
func (s *DeltaState) Snapshot() []float32 {
	out := make([]float32, s.Len())
	s.SnapshotTo(out)
	return out
}

// SnapshotTo writes the snapshot into dst (Len values; false, nothing
// written, for another length): a worker reads the state straight into
// its shared-memory region, not through a copy of a Qwen3.5-27B's 151 MB.
func (s *DeltaState) SnapshotTo(dst []float32) bool {
	if len(dst) != s.Len() {
		return false
	}
	cl, rl := s.shape.ConvStateLen(), s.shape.RecStateLen()
	off := 0
	for i := range s.conv {
		s.be.Read(s.conv[i], 0, dst[off:off+cl])
		off += cl
		s.be.Read(s.rec[i], 0, dst[off:off+rl])
		off += rl
	}
	return true
}

// Restore implements RecurrentState.
func (s *DeltaState) Restore(data []float32, pos int) error {
	if len(data) != s.Len() {
		return fmt.Errorf("%w: snapshot of %d values, state holds %d", ErrState, len(data), s.Len())
	}
	if pos < 0 {
		return fmt.Errorf("%w: negative position %d", ErrState, pos)
	}
	s.marks = nil // a request for the state replaced
	cl, rl := s.shape.ConvStateLen(), s.shape.RecStateLen()
	off := 0
	for i := range s.conv {
		s.be.Write(s.conv[i], 0, data[off:off+cl])
		off += cl
		s.be.Write(s.rec[i], 0, data[off:off+rl])
		off += rl
	}
	s.pos = pos
	return nil
}

// Clone implements RecurrentState.
func (s *DeltaState) Clone() RecurrentState {
	c := newDeltaState(s.be, s.shape, len(s.conv))
	if err := c.CopyFrom(s); err != nil {
		panic(err) // same shape and backend by construction
	}
	return c
}

// CopyFrom makes s a copy of src (contents and position) in s's own
// buffers: on the device where the backend copies there
// (kernels.BufCopier), else through the host. src must be a DeltaState of
// the same shape on the same backend.
func (s *DeltaState) CopyFrom(src RecurrentState) error {
	o, ok := src.(*DeltaState)
	if !ok || o.be != s.be || o.shape != s.shape || len(o.conv) != len(s.conv) {
		return fmt.Errorf("%w: copy from %T of another shape or backend", ErrState, src)
	}
	if o == s {
		return nil
	}
	s.marks = nil // a request for the state replaced
	cp, ok := s.be.(kernels.BufCopier)
	if !ok {
		if err := s.Restore(o.Snapshot(), max(o.pos, 0)); err != nil {
			return err
		}
		s.pos = o.pos // -1 too: a state after a failed pass stays unusable
		return nil
	}
	if s.whole != nil && o.whole != nil && s.wholeN == o.wholeN {
		cp.CopyBuf(s.whole, o.whole, s.wholeN) // the same layout: the padding too
		s.pos = o.pos
		return nil
	}
	for i := range s.conv {
		cp.CopyBuf(s.conv[i], o.conv[i], s.shape.ConvStateLen())
		cp.CopyBuf(s.rec[i], o.rec[i], s.shape.RecStateLen())
	}
	s.pos = o.pos
	return nil
}

// Reset implements RecurrentState.
func (s *DeltaState) Reset() {
	s.marks = nil
	zero := make([]float32, max(s.shape.ConvStateLen(), s.shape.RecStateLen()))
	for i := range s.conv {
		s.be.Write(s.conv[i], 0, zero[:s.shape.ConvStateLen()])
		s.be.Write(s.rec[i], 0, zero[:s.shape.RecStateLen()])
	}
	s.pos = 0
}

// DeltaNet is a Gated DeltaNet mixer: input projections to q, k, v (one
// convolved block), the output gate z and the decay/step gates a and b;
// a causal depthwise convolution with SiLU; the gated delta rule over the
// sequence's recurrent state; an RMSNorm gated by silu(z); out_proj.
type DeltaNet struct {
	be     kernels.Backend
	ops    kernels.HybridOps
	Shape  kernels.DeltaShape
	Conv   kernels.Tensor // conv1d.weight [ConvDim, 1, kernel]
	ALog   kernels.Tensor // A_log [VHeads]
	DtBias kernels.Tensor // dt_bias [VHeads]
	Norm   kernels.Tensor // norm.weight [DV], used as is (not 1+w)
	Out    kernels.Tensor // out_proj [hidden, VHeads*DV]
	// Index is this layer's place among the model's DeltaNet layers.
	Index int
	Eps   float32
	// project writes qkv [rows, ConvDim], z [rows, VHeads*DV] and a, b
	// [rows, VHeads] from the normed input: the part whose checkpoint
	// layout differs between architectures.
	project func(p *Pass, in, qkv, z, a, b kernels.Buf)
	// projectFused is project of one row from the un-normed residual x,
	// the norm applied inside one kernels.FusedOps.NormMatMul over all the
	// input projections; false (nothing done) when the backend declines.
	// Nil: the architecture has no fused projection.
	projectFused func(p *Pass, fu kernels.FusedOps, x kernels.Buf, norm kernels.Tensor, eps float32, qkv, z, a, b kernels.Buf) bool
}

// deltaShape reads the linear-attention hyper-parameters of c.
func deltaShape(c *Config) (kernels.DeltaShape, error) {
	s := kernels.DeltaShape{KHeads: c.LinearNumKeyHeads, VHeads: c.LinearNumValueHeads,
		DK: c.LinearKeyHeadDim, DV: c.LinearValueHeadDim, ConvKernel: c.LinearConvKernelDim}
	const limit = 1 << 16
	for k, v := range map[string]int{"linear_num_key_heads": s.KHeads, "linear_num_value_heads": s.VHeads,
		"linear_key_head_dim": s.DK, "linear_value_head_dim": s.DV, "linear_conv_kernel_dim": s.ConvKernel} {
		if v <= 0 || v > limit {
			return s, fmt.Errorf("%s out of range: %d", k, v)
		}
	}
	if s.VHeads%s.KHeads != 0 {
		return s, fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", s.VHeads, s.KHeads)
	}
	return s, nil
}

// newDeltaNet binds the tensors every DeltaNet layer has under prefix
// ("model.layers.N.linear_attn."); the caller sets project.
func newDeltaNet(c *Config, b *binder, prefix string, s kernels.DeltaShape, index int) *DeltaNet {
	n := &DeltaNet{be: b.be, Shape: s, Index: index, Eps: float32(c.RMSNormEps)}
	n.ops = hybridOps(b)
	n.Conv = b.tensor(prefix+"conv1d.weight", s.ConvDim(), 1, s.ConvKernel)
	n.ALog = b.tensor(prefix+"A_log", s.VHeads)
	n.DtBias = b.tensor(prefix+"dt_bias", s.VHeads)
	n.Norm = b.tensor(prefix+"norm.weight", s.DV)
	n.Out = b.tensor(prefix+"out_proj.weight", c.HiddenSize, s.VHeads*s.DV)
	return n
}

// hybridOps returns the backend's optional hybrid ops, recording
// ErrUnsupported in the binder when it has none.
func hybridOps(b *binder) kernels.HybridOps {
	ops, ok := b.be.(kernels.HybridOps)
	if !ok {
		b.fail(fmt.Errorf("gated DeltaNet on backend %s: %w", b.be.Name(), kernels.ErrUnsupported))
	}
	return ops
}

// Forward implements Mixer.
func (n *DeltaNet) Forward(p *Pass, in, out kernels.Buf) error {
	st, err := n.state(p)
	if err != nil {
		return err
	}
	b := n.bufs(p)
	n.project(p, in, b.qkv, b.z, b.a, b.b)
	n.mix(p, st, b)
	n.be.MatMul(out, b.core, n.Out, p.Rows)
	return nil
}

// forwardFused implements fusedBlock: the input projections read the
// un-normed residual (one NormMatMul where the architecture and the
// backend allow), and out_proj adds into the residual; the convolution,
// the delta rule and the gated norm are as in Forward.
func (n *DeltaNet) forwardFused(p *Pass, fu kernels.FusedOps, x, out kernels.Buf, norm kernels.Tensor, eps float32, add bool) (bool, error) {
	st, err := n.state(p)
	if err != nil {
		return true, err
	}
	b := n.bufs(p)
	if n.projectFused == nil || !n.projectFused(p, fu, x, norm, eps, b.qkv, b.z, b.a, b.b) {
		hid := n.Out.Weight().Rows()
		normed := p.Scratch.Buf("normed", hid)
		n.be.RMSNorm(normed, x, norm, 1, hid, eps)
		n.project(p, normed, b.qkv, b.z, b.a, b.b)
	}
	n.mix(p, st, b)
	project(n.be, fu, x, out, b.core, n.Out, n.Out.Weight().Rows(), add)
	return true, nil
}

// state is the pass's recurrent state, checked to hold this layer.
func (n *DeltaNet) state(p *Pass) (*DeltaState, error) {
	st, ok := p.Seq.State.(*DeltaState)
	if !ok || n.Index >= len(st.conv) {
		return nil, fmt.Errorf("%w: linear attention needs the state from Model.NewState, have %T", ErrState, p.Seq.State)
	}
	return st, nil
}

// deltaBufs are a pass's DeltaNet activations.
type deltaBufs struct {
	qkv, conv, z, a, b, core kernels.Buf
}

func (n *DeltaNet) bufs(p *Pass) deltaBufs {
	sc, rows, sh := p.Scratch, p.Rows, n.Shape
	vd := sh.VHeads * sh.DV
	return deltaBufs{qkv: sc.Buf("dn.qkv", rows*sh.ConvDim()), conv: sc.Buf("dn.conv", rows*sh.ConvDim()),
		z: sc.Buf("dn.z", rows*vd), a: sc.Buf("dn.a", rows*sh.VHeads), b: sc.Buf("dn.b", rows*sh.VHeads),
		core: sc.Buf("dn.core", rows*vd)}
}

// mix runs the convolution, the gated delta rule over the state and the
// gated norm, leaving the mixer's output before out_proj in b.core.
func (n *DeltaNet) mix(p *Pass, st *DeltaState, b deltaBufs) {
	if st.marks != nil && st.marks.inner > st.marks.filled {
		n.markedMix(p, st, b)
		return
	}
	rows, sh := p.Rows, n.Shape
	n.ops.CausalConv1D(b.conv, b.qkv, st.conv[n.Index], n.Conv, rows, sh)
	n.ops.GatedDeltaRule(b.core, b.conv, b.a, b.b, st.rec[n.Index], n.ALog, n.DtBias, rows, sh)
	n.ops.RMSNormGated(b.core, b.core, b.z, n.Norm, rows*sh.VHeads, sh.DV, n.Eps)
}

// hybrid is the Network of a DeltaNet hybrid: the shared Decoder, plus the
// check that the sequence's recurrent state stands where the pass starts,
// which is what keeps a reused, forked or truncated session from silently
// continuing from the wrong state.
type hybrid struct {
	*Decoder
	be     kernels.Backend
	shape  kernels.DeltaShape
	layers int // DeltaNet layers
}

// Forward implements Network.
func (h *hybrid) Forward(p *Pass) error {
	st, ok := p.Seq.State.(*DeltaState)
	if !ok || len(st.conv) != h.layers || st.shape != h.shape {
		return fmt.Errorf("%w: need the state from this model's NewState, have %T", ErrState, p.Seq.State)
	}
	if st.pos != p.Seq.Start {
		return fmt.Errorf("%w: state holds %d tokens, pass starts at position %d", ErrState, st.pos, p.Seq.Start)
	}
	if err := st.beginMarks(p.Seq.Start, p.Rows); err != nil {
		return err
	}
	st.pos = -1 // until the pass completes
	if err := h.Decoder.Forward(p); err != nil {
		st.marks = nil
		return err
	}
	st.pos = p.Seq.Start + p.Rows
	return st.endMarks(st.pos)
}

// centred turns a bound zero-centred RMSNorm weight w (Qwen3-Next's
// Qwen3NextRMSNorm computes x/rms(x) * (1 + w)) into the tensor 1+w, so
// the backend's plain RMSNorm applies it. The sum is formed in float32, as
// the reference does.
func (b *binder) centred(t kernels.Tensor, dim int) kernels.Tensor {
	if t == nil {
		return nil
	}
	name := t.Weight().Name
	v := b.hostRows(t, 1, dim)
	data := make([]byte, 4*dim)
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(1+x))
	}
	s, err := b.be.LoadWeight(&kernels.Weight{Name: name + "+1", DType: kernels.F32, Shape: []int{dim}, Data: data})
	if err != nil {
		b.fail(fmt.Errorf("%s: %w", name, err))
		return nil
	}
	return s
}

// hostRows decodes a small bound tensor [rows, cols] to float32 through
// the backend (Embed is a row lookup in any weight format).
func (b *binder) hostRows(t kernels.Tensor, rows, cols int) []float32 {
	buf := b.be.NewBuf(rows * cols)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(i)
	}
	b.be.Embed(buf, t, ids)
	out := make([]float32, rows*cols)
	b.be.Read(buf, 0, out)
	return out
}

// unitGather builds the Gather indices that pick, from src viewed as rows
// of unit floats, the pieces a checkpoint interleaves: for each of rows
// token rows of width rowUnits units, the units listed in pick (offsets
// within the row) in order. Gather then produces [rows, len(pick)*unit].
func unitGather(rows, rowUnits int, pick []int) []int32 {
	idx := make([]int32, 0, rows*len(pick))
	for r := range rows {
		for _, u := range pick {
			idx = append(idx, int32(r*rowUnits+u))
		}
	}
	return idx
}

// span appends the unit offsets [lo, lo+n) to pick.
func span(pick []int, lo, n int) []int {
	for i := range n {
		pick = append(pick, lo+i)
	}
	return pick
}

// newHybridDecoder builds the layer stack Qwen3-Next and Qwen3.5 share:
// zero-centred RMSNorms everywhere (layer norms, final norm, q/k norms),
// a DeltaNet mixer on layers layer_types calls linear_attention (project
// binds its input projections) and gated attention with partial rotary on
// the others, whose KV goes to the pool in order. ffn supplies each
// layer's feed-forward block.
func newHybridDecoder(c *Config, b *binder, project func(n *DeltaNet, prefix string), ffn func(i int, prefix string) FFN) (Network, error) {
	sh, err := deltaShape(c)
	if err != nil {
		return nil, err
	}
	types := c.LayerTypes
	if len(types) == 0 && c.FullAttentionInterval > 0 {
		// transformers' default: every full_attention_interval-th layer.
		for i := range c.NumLayers {
			types = append(types, map[bool]string{true: "full_attention", false: "linear_attention"}[(i+1)%c.FullAttentionInterval == 0])
		}
	}
	if len(types) != c.NumLayers {
		return nil, fmt.Errorf("layer_types has %d entries for %d layers", len(types), c.NumLayers)
	}
	hd, hid := c.HeadDim, c.HiddenSize
	rotary := hd
	if f := c.PartialRotaryFactor; f > 0 && f < 1 {
		rotary = int(float64(hd) * f)
	}
	d := newDecoder(c, b)
	d.Norm = b.centred(d.Norm, hid)
	net := &hybrid{Decoder: d, be: b.be, shape: sh}
	kv := 0
	for i, typ := range types {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := Layer{
			AttnNorm: b.centred(b.tensor(p+"input_layernorm.weight", hid), hid),
			FFNNorm:  b.centred(b.tensor(p+"post_attention_layernorm.weight", hid), hid),
			FFN:      ffn(i, p),
		}
		switch typ {
		case "linear_attention":
			n := newDeltaNet(c, b, p+"linear_attn.", sh, net.layers)
			project(n, p+"linear_attn.")
			l.Mixer = n
			net.layers++
		case "full_attention":
			a := newAttention(c, b, p+"self_attn.", kv, attentionOptions{neox: true, qkNorm: true, gated: true, rotaryDim: rotary, bias: c.AttentionBias})
			a.QNorm, a.KNorm = b.centred(a.QNorm, hd), b.centred(a.KNorm, hd)
			l.Mixer = a
			kv++
		default:
			return nil, fmt.Errorf("layer %d: unknown layer type %q", i, typ)
		}
		d.Layers = append(d.Layers, l)
	}
	d.KV = kvSpecFor(c, kv)
	d.stateFn = func() any { return newDeltaState(b.be, sh, net.layers) }
	if _, err := d.finish(b); err != nil {
		return nil, err
	}
	return net, nil
}
