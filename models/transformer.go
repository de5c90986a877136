package models

import (
	"fmt"
	"math"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// This file holds the shared builders every decoder-only architecture is
// made of: the residual decoder loop, grouped-query attention with rotary
// embeddings, the SwiGLU MLP and routed experts. Architecture files choose
// and configure these; they do not re-implement them.

// Mixer is a layer's token mixer (attention, linear attention, MLA).
type Mixer interface {
	Forward(p *Pass, in, out kernels.Buf) error
}

// FFN is a layer's feed-forward block (dense MLP or mixture of experts).
type FFN interface {
	Forward(p *Pass, in, out kernels.Buf) error
}

// Layer is one pre-norm residual block.
type Layer struct {
	AttnNorm, FFNNorm kernels.Tensor
	Mixer             Mixer
	FFN               FFN
}

// Decoder is the common decoder-only network: embeddings, layers, final
// norm and LM head. It implements Network.
type Decoder struct {
	cfg         *Config
	be          kernels.Backend
	Embed       kernels.Tensor
	Norm        kernels.Tensor
	LMHead      kernels.Tensor
	Layers      []Layer
	KV          kernels.KVSpec
	weightBytes int64
	stateFn     func() any
	// head, when set (a tensor-parallel plan's vocabulary-parallel LM
	// head, tp.go), computes logits [rows, vocab] in place of the LMHead
	// MatMul.
	head func(s *Scratch, dst, x kernels.Buf, rows int) error
	// pairs, when set (the same plan's head on a backend with
	// kernels.ArgmaxOps), leaves the group's argmax pairs of one row x in
	// dst [2·pairSlots] (Model.ForwardGreedy).
	pairs     func(s *Scratch, dst, x kernels.Buf) error
	pairSlots int
}

// KVSpec implements Network.
func (d *Decoder) KVSpec() kernels.KVSpec { return d.KV }

// NewState implements Network.
func (d *Decoder) NewState() any {
	if d.stateFn == nil {
		return nil
	}
	return d.stateFn()
}

// WeightBytes implements Network.
func (d *Decoder) WeightBytes() int64 { return d.weightBytes }

// newDecoder binds embeddings, final norm and LM head (tied when the
// checkpoint says so or has no lm_head).
func newDecoder(c *Config, b *binder) *Decoder {
	d := &Decoder{cfg: c, be: b.be}
	d.Embed = b.tensor("model.embed_tokens.weight", c.VocabSize, c.HiddenSize)
	d.Norm = b.tensor("model.norm.weight", c.HiddenSize)
	if c.TieEmbeddings {
		d.LMHead = d.Embed
	} else if d.LMHead = b.optional("lm_head.weight", c.VocabSize, c.HiddenSize); d.LMHead == nil {
		d.LMHead = d.Embed
	}
	return d
}

// finish checks the binding and fixes the byte count.
func (d *Decoder) finish(b *binder) (*Decoder, error) {
	if err := b.err(); err != nil {
		return nil, err
	}
	d.weightBytes = b.bytes
	return d, nil
}

// Forward implements Network.
func (d *Decoder) Forward(p *Pass) error {
	c, be, s := d.cfg, d.be, p.Scratch
	rows, hid := p.Rows, c.HiddenSize
	eps := float32(c.RMSNormEps)
	x := s.X
	normed := s.Buf("normed", rows*hid)
	delta := s.Buf("delta", rows*hid)
	be.Embed(x, d.Embed, p.Tokens)
	fu, _ := be.(kernels.FusedOps)
	if rows != 1 {
		fu = nil // the fused kernels are for one-token steps
	}
	for i := range d.Layers {
		l := &d.Layers[i]
		if err := d.residual(p, l.Mixer, l.AttnNorm, eps, fu, normed, delta); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if err := d.residual(p, l.FFN, l.FFNNorm, eps, fu, normed, delta); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	switch p.Logits {
	case NoLogits:
		return nil
	case LastLogits, LastHidden, lastPairs:
		// A one-token step's final norm inside the LM head's GEMV where the
		// backend has a fused kernel for the head's format: two launches
		// fewer between the last layer and the head (on CUDA the block
		// formats: the last down projection rounds the normed sum itself).
		if fu != nil && p.Logits == LastLogits && d.head == nil {
			s.Logits = s.Buf("logits", c.VocabSize)
			if fu.NormMatMul([]kernels.Buf{s.Logits}, x, d.Norm, eps, []kernels.Tensor{d.LMHead}, 1) {
				return nil
			}
		}
		last := s.Buf("last", hid)
		if rows == 1 {
			be.RMSNorm(last, x, d.Norm, 1, hid, eps) // x is the last row (one launch less per decode step)
		} else {
			be.Gather(last, x, []int32{int32(rows - 1)}, hid)
			be.RMSNorm(last, last, d.Norm, 1, hid, eps)
		}
		if p.Logits == LastHidden {
			s.Logits = last // what Model.Forward reads
			return nil
		}
		if p.Logits == lastPairs {
			s.Logits = s.Buf("tp.pairs", 2*d.pairSlots)
			return d.pairs(s, s.Logits, last)
		}
		s.Logits = s.Buf("logits", c.VocabSize)
		return d.lmHead(s, s.Logits, last, 1)
	case AllHidden:
		be.RMSNorm(normed, x, d.Norm, rows, hid, eps)
		s.Logits = normed
		return nil
	case rowLogits:
		n := len(p.LogitRows)
		sel := s.Buf("logit rows", n*hid)
		be.Gather(sel, x, p.LogitRows, hid)
		be.RMSNorm(sel, sel, d.Norm, n, hid, eps)
		s.Logits = s.Buf("logits", n*c.VocabSize)
		return d.lmHead(s, s.Logits, sel, n)
	default:
		be.RMSNorm(normed, x, d.Norm, rows, hid, eps)
		s.Logits = s.Buf("logits", rows*c.VocabSize)
		return d.lmHead(s, s.Logits, normed, rows)
	}
}

// lmHead computes logits [rows, vocab] of the normed hidden states x.
func (d *Decoder) lmHead(s *Scratch, dst, x kernels.Buf, rows int) error {
	if d.head != nil {
		return d.head(s, dst, x, rows)
	}
	d.be.MatMul(dst, x, d.LMHead, rows)
	return nil
}

// Attention is grouped-query attention with rotary embeddings, optional
// biases and optional per-head q/k RMSNorm (Qwen3).
type Attention struct {
	be                  kernels.Backend
	Q, K, V, O          kernels.Tensor
	QBias, KBias, VBias kernels.Tensor
	QNorm, KNorm        kernels.Tensor
	Heads, KVHeads, Dim int
	KVLayer             int
	Rope                kernels.RoPE
	Scale, Eps          float32
	fullWidthQKNorm     bool // MiniMax: one norm over all heads
	hidden              int
	// gate: q_proj also yields a per-head output gate (Qwen3-Next), laid
	// out per head as [query, gate]; the output is att * sigmoid(gate).
	// Its rows are split at load (splitGatedQuery): Q and QBias hold the
	// queries', QGate and QGateBias the gates' rows, each head in order,
	// so that no pass has to pull the two apart.
	gate             kernels.HybridOps
	QGate, QGateBias kernels.Tensor
}

// attentionOptions select the variants of newAttention.
type attentionOptions struct {
	qkNorm     bool // per-head q_norm/k_norm (Qwen3, GLM with use_qk_norm)
	qkNormFull bool // q_norm/k_norm over all heads at once (MiniMax-M2)
	bias       bool // q/k/v biases
	rotaryDim  int  // 0: the whole head
	neox       bool
	gated      bool // q_proj yields query and output gate per head (Qwen3-Next)
}

// newAttention binds prefix+{q,k,v,o}_proj and friends.
func newAttention(c *Config, b *binder, prefix string, kvLayer int, o attentionOptions) *Attention {
	hd, h, kvh := c.HeadDim, c.NumHeads, c.NumKVHeads
	a := &Attention{be: b.be, Heads: h, KVHeads: kvh, Dim: hd, KVLayer: kvLayer, hidden: c.HiddenSize,
		Scale: float32(1 / math.Sqrt(float64(hd))), Eps: float32(c.RMSNormEps)}
	qRows := h * hd
	if o.gated {
		a.gate = hybridOps(b)
		if ts := b.tensorSplit(prefix+"q_proj.weight", []int{2 * qRows, c.HiddenSize}, splitGatedQuery(hd)); ts != nil {
			a.Q, a.QGate = ts[0], ts[1]
		}
	} else {
		a.Q = b.tensor(prefix+"q_proj.weight", qRows, c.HiddenSize)
	}
	a.K = b.tensor(prefix+"k_proj.weight", kvh*hd, c.HiddenSize)
	a.V = b.tensor(prefix+"v_proj.weight", kvh*hd, c.HiddenSize)
	a.O = b.tensor(prefix+"o_proj.weight", c.HiddenSize, h*hd)
	if o.bias {
		if !o.gated {
			a.QBias = b.tensor(prefix+"q_proj.bias", qRows)
		} else if ts := b.tensorSplit(prefix+"q_proj.bias", []int{2 * qRows}, splitGatedQuery(hd)); ts != nil {
			a.QBias, a.QGateBias = ts[0], ts[1]
		}
		a.KBias = b.tensor(prefix+"k_proj.bias", kvh*hd)
		a.VBias = b.tensor(prefix+"v_proj.bias", kvh*hd)
	}
	switch {
	case o.qkNormFull:
		a.QNorm = b.tensor(prefix+"q_norm.weight", h*hd)
		a.KNorm = b.tensor(prefix+"k_norm.weight", kvh*hd)
		a.fullWidthQKNorm = true
	case o.qkNorm:
		a.QNorm = b.tensor(prefix+"q_norm.weight", hd)
		a.KNorm = b.tensor(prefix+"k_norm.weight", hd)
	}
	rd := o.rotaryDim
	if rd == 0 {
		rd = hd
	}
	a.Rope = kernels.RoPE{InvFreq: c.RopeInvFreq(rd), RotaryDim: rd, NeoX: o.neox}
	return a
}

// Forward implements Mixer.
func (a *Attention) Forward(p *Pass, in, out kernels.Buf) error {
	be, s, rows := a.be, p.Scratch, p.Rows
	qw, kw := a.Heads*a.Dim, a.KVHeads*a.Dim
	q := s.Buf("q", rows*qw)
	k := s.Buf("k", rows*kw)
	v := s.Buf("v", rows*kw)
	att := s.Buf("att", rows*qw)
	var gate kernels.Buf
	if a.gate != nil {
		gate = s.Buf("q.gate", rows*qw)
		be.MatMul(gate, in, a.QGate, rows)
	}
	be.MatMul(q, in, a.Q, rows)
	be.MatMul(k, in, a.K, rows)
	be.MatMul(v, in, a.V, rows)
	a.addBiases(rows, q, gate, k, v)
	if p.Seq.Pool == nil {
		return fmt.Errorf("attention: no KV pool")
	}
	a.normRopeStore(p, q, k, v)
	be.Attention(att, q, p.Seq.Pool, a.KVLayer, p.Attn, rows, a.Heads, a.Scale)
	if a.gate != nil {
		a.gate.SigmoidMul(att, gate, rows*qw)
	}
	be.MatMul(out, att, a.O, rows)
	return nil
}

// addBiases adds the q/k/v biases (and the gates' with a gated q_proj),
// if any, to rows rows of the projections.
func (a *Attention) addBiases(rows int, q, gate, k, v kernels.Buf) {
	if a.QBias == nil {
		return
	}
	qw, kw := a.Heads*a.Dim, a.KVHeads*a.Dim
	a.be.AddBias(q, a.QBias, rows, qw)
	if a.QGateBias != nil {
		a.be.AddBias(gate, a.QGateBias, rows, qw)
	}
	a.be.AddBias(k, a.KBias, rows, kw)
	a.be.AddBias(v, a.VBias, rows, kw)
}

// splitGatedQuery splits a gated attention's q_proj weight (or bias),
// whose rows are [query, gate] per head of hd rows each, into the
// queries' rows and the gates' rows, heads in order. Rows are independent
// dot products, so the two halves give exactly the values of the whole.
func splitGatedQuery(hd int) func(*kernels.Weight) ([]*kernels.Weight, error) {
	return func(w *kernels.Weight) ([]*kernels.Weight, error) {
		n := w.Shape[0]
		if hd <= 0 || n%(2*hd) != 0 {
			return nil, fmt.Errorf("%w: gated q_proj of %d rows is not [query, gate] heads of %d", ErrShape, n, hd)
		}
		var q, g []rowRange
		for h := 0; h < n; h += 2 * hd {
			q = append(q, rowRange{h, h + hd})
			g = append(g, rowRange{h + hd, h + 2*hd})
		}
		pick := selectRows
		if len(w.Shape) == 1 {
			pick = selectElems
		}
		qw, err := pick(w, q...)
		if err != nil {
			return nil, err
		}
		gw, err := pick(w, g...)
		if err != nil {
			return nil, err
		}
		return []*kernels.Weight{qw, gw}, nil
	}
}

// normRopeStore applies the optional q/k norms and the rotary embedding to
// q and k, and stores k and v in the KV pool.
func (a *Attention) normRopeStore(p *Pass, q, k, v kernels.Buf) {
	be, rows := a.be, p.Rows
	if a.QNorm != nil {
		if a.fullWidthQKNorm {
			be.RMSNorm(q, q, a.QNorm, rows, a.Heads*a.Dim, a.Eps)
			be.RMSNorm(k, k, a.KNorm, rows, a.KVHeads*a.Dim, a.Eps)
		} else {
			be.RMSNorm(q, q, a.QNorm, rows*a.Heads, a.Dim, a.Eps)
			be.RMSNorm(k, k, a.KNorm, rows*a.KVHeads, a.Dim, a.Eps)
		}
	}
	be.RoPE(q, p.Pos, a.Heads, a.Dim, &a.Rope)
	be.RoPE(k, p.Pos, a.KVHeads, a.Dim, &a.Rope)
	be.StoreKV(p.Seq.Pool, a.KVLayer, k, v, p.Slots)
}

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
type MLP struct {
	be             kernels.Backend
	Gate, Up, Down kernels.Tensor
	hidden, inter  int
	name           string
}

func newMLP(c *Config, b *binder, prefix string, inter int) *MLP {
	return &MLP{be: b.be, hidden: c.HiddenSize, inter: inter, name: prefix,
		Gate: b.tensor(prefix+"gate_proj.weight", inter, c.HiddenSize),
		Up:   b.tensor(prefix+"up_proj.weight", inter, c.HiddenSize),
		Down: b.tensor(prefix+"down_proj.weight", c.HiddenSize, inter)}
}

// Forward implements FFN.
func (m *MLP) Forward(p *Pass, in, out kernels.Buf) error {
	m.forwardRows(p.Scratch, in, out, p.Rows)
	return nil
}

func (m *MLP) forwardRows(s *Scratch, in, out kernels.Buf, rows int) {
	be := m.be
	g := s.Buf("mlp.gate", rows*m.inter)
	u := s.Buf("mlp.up", rows*m.inter)
	be.MatMul(g, in, m.Gate, rows)
	be.MatMul(u, in, m.Up, rows)
	be.SwiGLU(g, g, u, rows*m.inter)
	be.MatMul(out, g, m.Down, rows)
}

// ignoredTensor names checkpoint entries no architecture reads.
func ignoredTensor(name string) bool {
	return strings.HasSuffix(name, "rotary_emb.inv_freq")
}

// kvSpecFor is the KV shape of standard attention over layers layers.
func kvSpecFor(c *Config, layers int) kernels.KVSpec {
	return kernels.KVSpec{Layers: layers, KVHeads: c.NumKVHeads, HeadDimK: c.HeadDim, HeadDimV: c.HeadDim}
}
