package models

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// Tensor parallelism, as gpt-fast's tp.py does it: a sharding plan applied
// to the model from outside. The architecture files build their layers as
// for one device; the plan
//
//   - at load time, tells the binder which slice of each tensor this rank
//     loads (shard): q/k/v, gate and up are column-split (a block of output
//     rows, a zero-copy view of the mapped checkpoint), o_proj and down_proj
//     are row-split (a block of input columns, gathered from the mapping
//     and copied once into the rank's upload), the LM head is split by
//     vocabulary, everything else (embeddings, norms, the MoE router) is
//     replicated;
//   - after the build, divides the heads and FFN widths the layers compute
//     with, and puts an all-reduce (kernels.Collective) after each
//     attention block and each FFN block, whose outputs are then partial
//     sums; the vocabulary-parallel LM head gathers the logits of all ranks
//     (a zero-padded all-reduce), so Forward returns full logits on every
//     rank and sampling is unchanged.
//
// Heads are split in contiguous blocks: rank r computes query heads
// [r·H/N, (r+1)·H/N) and the KV heads they read. When N exceeds the KV
// heads, N/KV ranks share (each loads) the same KV head. MoE experts are
// tensor-parallel: every rank holds every expert's slice and routes on the
// replicated router, so the combine is one more partial sum. Multi-head
// latent attention (DeepSeek) is split by heads around a replicated
// latent cache (tp_mla.go). With world 1 no plan is applied and the model
// is exactly the single-device one.

// ErrTP marks a model or plan that tensor parallelism cannot serve.
var ErrTP = errors.New("tensor parallelism")

// Plan is one rank's place in a tensor-parallel group.
type Plan struct {
	Rank, World int
	// Comm sums partial results across the group; required when World > 1.
	Comm kernels.Collective
}

// tpArchs are the architectures whose layers the plan knows how to split
// (grouped-query attention, gated attention, SwiGLU MLPs, softmax- and
// sigmoid-routed experts, Gated DeltaNet heads, latent attention).
var tpArchs = map[string]bool{
	"LlamaForCausalLM": true, "MistralForCausalLM": true,
	"Qwen3ForCausalLM": true, "Qwen3MoeForCausalLM": true,
	// The Gated DeltaNet hybrids (tp_hybrid.go).
	"Qwen3NextForCausalLM": true, "Qwen3_5ForCausalLM": true,
	// Multi-head latent attention (tp_mla.go).
	"DeepseekV3ForCausalLM": true, "DeepseekV32ForCausalLM": true,
	// GLM-4.5 and MiniMax-M2's all-heads q/k norm (tp_moe_archs.go).
	"Glm4MoeForCausalLM": true, "MiniMaxM2ForCausalLM": true,
}

// NewRank builds rank plan.Rank's shard of the model: it loads only that
// rank's slices of the weights from src. A nil plan, or one of world 1
// without a collective, builds the single-device model (New); a plan of
// world 1 with one is applied as a group of one rank (its all-reduces see
// this rank alone), which is how a device test runs the plan's ops, the
// distributed argmax among them, on one GPU.
func NewRank(name string, cfg *Config, src Source, be kernels.Backend, plan *Plan) (*Model, error) {
	if plan == nil || plan.World == 1 && plan.Comm == nil {
		return New(name, cfg, src, be)
	}
	if err := plan.check(cfg); err != nil {
		return nil, err
	}
	ctor, ok := architectures[cfg.Arch()]
	if !ok {
		return nil, fmt.Errorf("architecture %q: %w", cfg.Arch(), ErrUnknownArch)
	}
	b := newBinder(cfg, src, be)
	b.plan = plan
	net, err := ctor(cfg, b)
	if err != nil {
		return nil, fmt.Errorf("build %s rank %d/%d: %w", cfg.Arch(), plan.Rank, plan.World, err)
	}
	if err := plan.apply(cfg, net, b); err != nil {
		return nil, err
	}
	if err := b.err(); err != nil {
		return nil, err
	}
	if d := decoderOf(net); d != nil {
		d.weightBytes = b.bytes
	}
	if err := bindMoE(net); err != nil {
		return nil, fmt.Errorf("build %s rank %d/%d: %w", cfg.Arch(), plan.Rank, plan.World, err)
	}
	return &Model{Name: name, Config: cfg, Backend: be, net: net, MaxChunk: 512}, nil
}

// CheckTP reports, before anything is loaded, whether a model of cfg can
// be divided over world ranks (the architecture has a plan, the heads
// divide); NewRank checks the same and, while loading, each tensor's
// split. It returns nil for world ≤ 1.
func CheckTP(cfg *Config, world int) error {
	if world <= 1 {
		return nil
	}
	return (&Plan{World: world, Comm: noComm{}}).check(cfg)
}

// noComm stands in for a collective when only the shapes are checked.
type noComm struct{}

func (noComm) AllReduceSum(kernels.Buf, int) error { return nil }

// check rejects groups the model's shapes cannot be divided over.
func (p *Plan) check(c *Config) error {
	n := p.World
	switch {
	case n < 1 || p.Rank < 0 || p.Rank >= n:
		return fmt.Errorf("%w: rank %d of %d", ErrTP, p.Rank, n)
	case p.Comm == nil:
		return fmt.Errorf("%w: a group of %d needs a collective", ErrTP, n)
	case !tpArchs[c.Arch()]:
		return fmt.Errorf("%w: %s: %w", ErrTP, c.Arch(), kernels.ErrUnsupported)
	case mlaArchs[c.Arch()]: // one latent KV row, whatever num_key_value_heads says
		return p.checkMLAPlan(c)
	case c.NumHeads%n != 0:
		return fmt.Errorf("%w: %d attention heads do not divide over %d ranks", ErrTP, c.NumHeads, n)
	case c.NumKVHeads%n != 0 && n%c.NumKVHeads != 0:
		return fmt.Errorf("%w: %d KV heads and %d ranks: neither divides the other", ErrTP, c.NumKVHeads, n)
	case hybridArchs[c.Arch()]:
		return p.checkHybrid(c)
	case moeTPArchs[c.Arch()]:
		return p.checkMoEArch(c)
	}
	return nil
}

// kvHeads is the number of KV heads each rank holds and the first one
// rank r holds.
func (p *Plan) kvHeads(c *Config) (local, first int) {
	return max(c.NumKVHeads/p.World, 1), p.Rank * c.NumKVHeads / p.World
}

// shard returns this rank's slice of a full tensor the architecture asked
// for (already shape-checked), or w itself when the tensor is replicated.
func (p *Plan) shard(c *Config, w *kernels.Weight) (*kernels.Weight, error) {
	if d, ok, err := p.shardDelta(c, w); ok {
		return d, err
	}
	if d, ok, err := p.shardMLA(c, w); ok {
		return d, err
	}
	if d, ok, err := p.shardMiniMax(c, w); ok {
		return d, err
	}
	name := w.Name
	layer := strings.HasPrefix(name, "model.layers.")
	even := func(size int) (int, int, error) {
		if size%p.World != 0 {
			return 0, 0, fmt.Errorf("%s: %w: %d does not divide over %d ranks", name, ErrTP, size, p.World)
		}
		per := size / p.World
		return p.Rank * per, (p.Rank + 1) * per, nil
	}
	switch {
	case layer && (hasSuffix(name, "self_attn.q_proj.weight", "self_attn.q_proj.bias") ||
		hasSuffix(name, "gate_proj.weight", "up_proj.weight")):
		lo, hi, err := even(w.Shape[0])
		if err != nil {
			return nil, err
		}
		return sliceRows(w, lo, hi)
	case layer && hasSuffix(name, "self_attn.k_proj.weight", "self_attn.k_proj.bias",
		"self_attn.v_proj.weight", "self_attn.v_proj.bias"):
		local, first := p.kvHeads(c)
		hd := w.Shape[0] / c.NumKVHeads
		return sliceRows(w, first*hd, (first+local)*hd)
	case layer && hasSuffix(name, "self_attn.o_proj.weight", "down_proj.weight"):
		lo, hi, err := even(w.Cols())
		if err != nil {
			return nil, err
		}
		return sliceCols(w, lo, hi)
	case name == "lm_head.weight" && c.VocabSize%p.World == 0:
		lo, hi, _ := even(w.Shape[0])
		return sliceRows(w, lo, hi)
	}
	return w, nil
}

func hasSuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// apply divides the built layers' head counts and widths to this rank's
// share and installs the all-reduce hooks and the vocabulary-parallel head.
func (p *Plan) apply(c *Config, net Network, b *binder) error {
	d := decoderOf(net)
	if d == nil {
		return fmt.Errorf("%w: %T: %w", ErrTP, net, kernels.ErrUnsupported)
	}
	if h, ok := net.(*hybrid); ok {
		p.applyHybrid(h)
	}
	n := p.World
	kvLocal, _ := p.kvHeads(c)
	if mlaArchs[c.Arch()] {
		kvLocal = d.KV.KVHeads // the latent row, replicated on every rank
	}
	for i := range d.Layers {
		l := &d.Layers[i]
		switch m := l.Mixer.(type) {
		case *Attention:
			m.Heads /= n
			m.KVHeads = kvLocal
			if m.fullWidthQKNorm { // MiniMax-M2 (tp_moe_archs.go)
				f, err := newFullNormAttention(m, b.be, p.Comm, n)
				if err != nil {
					return fmt.Errorf("layer %d: %w", i, err)
				}
				l.Mixer = f
			}
		case *DeltaNet:
			p.applyDelta(m)
		case *MLA:
			if err := p.applyMLA(i, m); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: layer %d: %T mixer: %w", ErrTP, i, l.Mixer, kernels.ErrUnsupported)
		}
		l.Mixer = &allReduce{inner: l.Mixer, comm: p.Comm, width: c.HiddenSize}
		switch f := l.FFN.(type) {
		case *MLP:
			f.inter /= n
		case *MoE:
			for _, e := range f.Experts {
				e.inter /= n
			}
			if f.Shared != nil {
				f.Shared.inter /= n
			}
		default:
			return fmt.Errorf("%w: layer %d: %T FFN: %w", ErrTP, i, l.FFN, kernels.ErrUnsupported)
		}
		l.FFN = &allReduce{inner: l.FFN, comm: p.Comm, width: c.HiddenSize}
	}
	d.KV.KVHeads = kvLocal
	if c.VocabSize%n != 0 || d.LMHead == nil {
		return nil // replicated LM head: every rank computes all logits
	}
	per := c.VocabSize / n
	head := d.LMHead
	if head.Weight().Rows() != per { // tied to the embeddings: load our rows
		w, err := b.weight("model.embed_tokens.weight", []int{c.VocabSize, c.HiddenSize})
		if err != nil {
			return err
		}
		if w, err = sliceRows(w, p.Rank*per, (p.Rank+1)*per); err != nil {
			return err
		}
		if head, err = b.be.LoadWeight(w); err != nil {
			return fmt.Errorf("lm head shard: %w", err)
		}
		b.bytes += int64(len(w.Data)) + int64(len(w.Scale))*4
	}
	vh := &vocabHead{be: b.be, w: head, comm: p.Comm, rank: p.Rank, world: n, per: per}
	d.head = vh.forward
	if ops, ok := b.be.(kernels.ArgmaxOps); ok && c.VocabSize < kernels.MaxPairIndex {
		vh.argmax = ops
		d.pairs, d.pairSlots = vh.pairs, n
	}
	return nil
}

// decoderOf is the Decoder a network is built on (nil for others).
func decoderOf(net Network) *Decoder {
	switch n := net.(type) {
	case *Decoder:
		return n
	case *hybrid:
		return n.Decoder
	}
	return nil
}

// allReduce runs a block whose output is this rank's partial sum, then
// sums it over the group (gpt-fast's forward hook). It serves as Mixer
// and as FFN.
type allReduce struct {
	inner interface {
		Forward(p *Pass, in, out kernels.Buf) error
	}
	comm  kernels.Collective
	width int
}

func (r *allReduce) Forward(p *Pass, in, out kernels.Buf) error {
	if err := r.inner.Forward(p, in, out); err != nil {
		return err
	}
	if err := r.comm.AllReduceSum(out, p.Rows*r.width); err != nil {
		return fmt.Errorf("tp all-reduce: %w", err)
	}
	return nil
}

// vocabHead computes this rank's vocabulary slice of the logits and
// assembles all of them on every rank: the full [rows, vocab] buffer,
// viewed as [rows·world, per], is zeroed (a gather of a never-written zero
// row), this rank's rows are added at row j·world+rank, and an all-reduce
// sums the disjoint slices. It uses only Backend ops, so a decode graph
// captures it like the rest of the step.
type vocabHead struct {
	be               kernels.Backend
	w                kernels.Tensor
	comm             kernels.Collective
	rank, world, per int
	rows             int
	zeroIdx, scatter []int32
	ones             []float32
	argmax           kernels.ArgmaxOps // nil: the backend has no ArgmaxPair
}

func (h *vocabHead) forward(s *Scratch, dst, x kernels.Buf, rows int) error {
	be := h.be
	local := s.Buf("tp.logits", rows*h.per)
	be.MatMul(local, x, h.w, rows)
	if h.rows != rows {
		h.rows = rows
		h.zeroIdx = make([]int32, rows*h.world)
		h.scatter = make([]int32, rows)
		h.ones = make([]float32, rows)
		for j := range rows {
			h.scatter[j] = int32(j*h.world + h.rank)
			h.ones[j] = 1
		}
	}
	zero := s.Buf("tp.zero", h.per) // never written: zero since allocation
	be.Gather(dst, zero, h.zeroIdx, h.per)
	be.ScatterAdd(dst, local, h.scatter, h.ones, h.per)
	if err := h.comm.AllReduceSum(dst, rows*h.per*h.world); err != nil {
		return fmt.Errorf("tp logits all-reduce: %w", err)
	}
	return nil
}

// pairs is the head of a greedy step (Model.ForwardGreedy): this rank's
// slice of the logits of the one row x, its best value and index as the
// pair at slot rank of dst (kernels.ArgmaxOps), and an all-reduce of the
// 2·world floats, where forward's took the vocabulary's. Backend ops and
// the collective only, so a decode graph records it too.
func (h *vocabHead) pairs(s *Scratch, dst, x kernels.Buf) error {
	local := s.Buf("tp.logits", h.per)
	h.be.MatMul(local, x, h.w, 1)
	h.argmax.ArgmaxPair(dst, local, h.per, h.rank*h.per, h.rank, h.world)
	if err := h.comm.AllReduceSum(dst, 2*h.world); err != nil {
		return fmt.Errorf("tp argmax all-reduce: %w", err)
	}
	return nil
}
