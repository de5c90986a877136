package models

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// MLA is DeepSeek's multi-head latent attention. The cache keeps only the
// compressed row per token, [latent (R) ; rope key (Dr)], shared by all
// heads (kernels.MLAOps); per-head keys and values are never cached.
// Decode absorbs the up-projection kv_b_proj on both sides:
//
//	q·k_h = q_nope·(W_UK_h c) + q_pe·k_pe = (W_UK_hᵀ q_nope)·c + q_pe·k_pe
//	out_h = W_UV_h (Σ_t a_t c_t)
//
// so each head's query becomes [W_UK_hᵀ q_nope ; q_pe] (width R+Dr) and the
// attention output stays in latent space until W_UV_h. Prompt passes, whose
// many query rows share each key, instead expand the context's latents into
// per-head keys and values for the pass (kernels.MLAPrefillOps, expanded
// below), which costs fewer multiply-adds and runs on tensor cores; the
// two forms agree to float rounding (mla_prefill_test.go).
type MLA struct {
	be  kernels.Backend
	ops kernels.MLAOps
	// Queries: q_a_proj → q_a_layernorm → q_b_proj, or q_proj when
	// q_lora_rank is null (QA nil). Rows per head: [nope (Dn) ; rope (Dr)].
	QA, QANorm, QB, Q kernels.Tensor
	// kv_a_proj_with_mqa split by rows into the latent and the rope key.
	KVALatent, KVARope, KVANorm kernels.Tensor
	UKT                         []kernels.Tensor // per head W_UK_hᵀ [R, Dn], from kv_b_proj
	UV                          []kernels.Tensor // per head W_UV_h [Dv, R], rows of kv_b_proj
	// UKTs and UVs are UKT and UV stacked ([Heads·R, Dn], [Heads·Dv, R])
	// for a backend with kernels.HeadMatMul, which then has no per-head
	// tensors.
	UKTs, UVs kernels.Tensor
	// KVB is kv_b_proj in groups of mlaGroupHeads heads' rows, which
	// expand the latents into keys and values for prompt passes (nil
	// without kernels.MLAPrefillOps). On a device backend it is a second
	// copy of those rows beside the absorbed matrices.
	KVB []kernels.Tensor
	O   kernels.Tensor
	// Indexer selects the attended tokens (DeepSeek-V3.2); nil: dense.
	Indexer *Indexer

	Heads, QRank, R, Dn, Dr, Dv int
	KVLayer                     int
	Rope                        kernels.RoPE
	Scale, Eps                  float32
	g                           int // chunk width of the column moves
}

// Indexer is DeepSeek-V3.2's lightning indexer: per token one key
// (LayerNorm(wk x), rotated) cached in the MLA layer's V rows, and per
// query Heads small queries from the q latent whose weighted ReLU scores
// pick the TopK positions attended to.
type Indexer struct {
	WQB, WK, WProj   kernels.Tensor
	Center           kernels.Tensor // I - 1/Dim: LayerNorm's mean removal as a MatMul
	KNormW, KNormB   kernels.Tensor
	Heads, Dim, TopK int
	Rope             kernels.RoPE
	Scale            float32
}

// mlaOptions selects the variants of newMLA.
type mlaOptions struct {
	interleave bool // rope_interleave: rotate pairs (2i, 2i+1)
	indexer    bool // DeepSeek sparse attention
}

// newMLA binds prefix+{q_a_proj, ..., kv_b_proj, o_proj}.
func newMLA(c *Config, b *binder, prefix string, kvLayer int, o mlaOptions) *MLA {
	h, hid := c.NumHeads, c.HiddenSize
	m := &MLA{be: b.be, Heads: h, QRank: c.QLoraRank, R: c.KVLoraRank, Dn: c.QKNopeHeadDim,
		Dr: c.QKRopeHeadDim, Dv: c.VHeadDim, KVLayer: kvLayer, Eps: float32(c.RMSNormEps)}
	ops, ok := b.be.(kernels.MLAOps)
	if !ok {
		b.fail(fmt.Errorf("latent attention on backend %s: %w", b.be.Name(), kernels.ErrUnsupported))
	}
	m.ops = ops
	m.g = gcd(gcd(m.R, m.Dn), gcd(m.Dr, m.Dv))
	qk := m.Dn + m.Dr
	if m.QRank > 0 {
		m.QA = b.tensor(prefix+"q_a_proj.weight", m.QRank, hid)
		m.QANorm = b.tensor(prefix+"q_a_layernorm.weight", m.QRank)
		m.QB = b.tensor(prefix+"q_b_proj.weight", h*qk, m.QRank)
	} else {
		m.Q = b.tensor(prefix+"q_proj.weight", h*qk, hid)
	}
	if kva := rawWeight(b, prefix+"kv_a_proj_with_mqa.weight", m.R+m.Dr, hid); kva != nil {
		m.KVALatent = b.derived(kva.RowSlice(kva.Name+"[latent]", 0, m.R, []int{m.R, hid}))
		m.KVARope = b.derived(kva.RowSlice(kva.Name+"[rope]", m.R, m.R+m.Dr, []int{m.Dr, hid}))
	}
	m.KVANorm = b.tensor(prefix+"kv_a_layernorm.weight", m.R)
	if kvb := rawWeight(b, prefix+"kv_b_proj.weight", h*(m.Dn+m.Dv), m.R); kvb != nil {
		// The heads kvb holds: all of them, or a tensor-parallel rank's
		// (tp_mla.go), which derives only its own.
		m.bindAbsorbed(b, kvb)
		if _, ok := b.be.(kernels.MLAPrefillOps); ok {
			heads, per := kvb.Rows()/(m.Dn+m.Dv), m.Dn+m.Dv
			for h0 := 0; h0 < heads; h0 += mlaGroupHeads {
				hn := min(mlaGroupHeads, heads-h0)
				m.KVB = append(m.KVB, b.derived(kvb.RowSlice(fmt.Sprintf("%s[heads %d+%d]", kvb.Name, h0, hn), h0*per, (h0+hn)*per, []int{hn * per, m.R})))
			}
		}
	}
	m.O = b.tensor(prefix+"o_proj.weight", hid, h*m.Dv)
	inv, factor := c.mlaRope(m.Dr)
	m.Rope = kernels.RoPE{InvFreq: inv, RotaryDim: m.Dr, NeoX: !o.interleave, Scale: factor}
	m.Scale = float32(1/math.Sqrt(float64(qk))) * c.yarnSoftmaxScale()
	if o.indexer {
		m.Indexer = newIndexer(c, b, prefix+"indexer.")
	}
	return m
}

func newIndexer(c *Config, b *binder, prefix string) *Indexer {
	hi, d := c.IndexNHeads, c.IndexHeadDim
	x := &Indexer{Heads: hi, Dim: d, TopK: c.IndexTopK,
		WQB:    b.tensor(prefix+"wq_b.weight", hi*d, c.QLoraRank),
		WK:     b.tensor(prefix+"wk.weight", d, c.HiddenSize),
		WProj:  b.tensor(prefix+"weights_proj.weight", hi, c.HiddenSize),
		KNormW: b.tensor(prefix+"k_norm.weight", d),
		KNormB: b.tensor(prefix+"k_norm.bias", d)}
	if c.QLoraRank <= 0 || hi <= 0 || d < c.QKRopeHeadDim || x.TopK <= 0 {
		b.fail(fmt.Errorf("%s: the indexer needs q_lora_rank, index_n_heads, index_head_dim ≥ qk_rope_head_dim and index_topk", prefix))
	}
	x.Center = b.derived(centering(prefix+"k_norm.center", d), nil)
	// The indexer rotates the leading Dr dims of its heads, rotate-half
	// style, whatever the main attention's layout.
	inv, factor := c.mlaRope(c.QKRopeHeadDim)
	x.Rope = kernels.RoPE{InvFreq: inv, RotaryDim: c.QKRopeHeadDim, NeoX: true, Scale: factor}
	// The score is Σ_h w_h·Hi^-½ · relu(q·k·Dim^-½); a positive factor
	// moves through the ReLU, so both scales ride on Scale.
	x.Scale = float32(1 / math.Sqrt(float64(d)*float64(hi)))
	return x
}

// Forward implements Mixer.
func (m *MLA) Forward(p *Pass, in, out kernels.Buf) error {
	if p.Seq.Pool == nil {
		return fmt.Errorf("latent attention: no KV pool")
	}
	be, s, rows := m.be, p.Scratch, p.Rows
	q, qa, lat, kpe := m.projBufs(s, rows)
	if qa != nil {
		if m.Indexer != nil {
			// The indexer's queries come from this latent too.
			kernels.MatMulPrecise(be, qa, in, m.QA, rows)
		} else {
			be.MatMul(qa, in, m.QA, rows)
		}
	} else {
		be.MatMul(q, in, m.Q, rows)
	}
	be.MatMul(lat, in, m.KVALatent, rows)
	be.MatMul(kpe, in, m.KVARope, rows)
	return m.attend(p, in, q, qa, lat, kpe, func(att kernels.Buf) { be.MatMul(out, att, m.O, rows) })
}

// projBufs are the pass's input projections' scratch: the queries, their
// low-rank latent (nil without q_a_proj), the KV latent and the rope key.
func (m *MLA) projBufs(s *Scratch, rows int) (q, qa, lat, kpe kernels.Buf) {
	q = s.Buf("mla.q", rows*m.Heads*(m.Dn+m.Dr))
	if m.QA != nil {
		qa = s.Buf("mla.qa", rows*m.QRank)
	}
	return q, qa, s.Buf("mla.latent", rows*m.R), s.Buf("mla.kpe", rows*m.Dr)
}

// forwardFused implements fusedBlock for one row: the three input
// projections (q_a or q, the KV latent and the rope key) read the residual
// through the norm in one NormMatMul, and o_proj adds into the residual
// (add) or writes the rank's partial sum. DeepSeek-V3.2's indexer, whose
// queries keep tf32 or better activations (MatMulPrecise), stays unfused.
func (m *MLA) forwardFused(p *Pass, fu kernels.FusedOps, x, out kernels.Buf, norm kernels.Tensor, eps float32, add bool) (bool, error) {
	if m.Indexer != nil || p.Seq.Pool == nil || p.Rows != 1 {
		return false, nil
	}
	be, s := m.be, p.Scratch
	q, qa, lat, kpe := m.projBufs(s, 1)
	first, firstW := q, m.Q
	if qa != nil {
		first, firstW = qa, m.QA
	}
	if !fu.NormMatMul([]kernels.Buf{first, lat, kpe}, x, norm, eps, []kernels.Tensor{firstW, m.KVALatent, m.KVARope}, 1) {
		return false, nil
	}
	hidden := m.O.Weight().Rows()
	err := m.attend(p, nil, q, qa, lat, kpe, func(att kernels.Buf) {
		if add {
			project(be, fu, x, out, att, m.O, hidden, true)
		} else {
			be.MatMul(out, att, m.O, 1)
		}
	})
	return true, err
}

// attend is the latent attention after the input projections (q_a's
// output qa before its norm, or q; the KV latent lat and rope key kpe
// before theirs): the cache row, the queries, the attention in the
// expanded or absorbed form, and project(att) for the output projection.
// in (the normed input) is read only by DeepSeek-V3.2's indexer.
func (m *MLA) attend(p *Pass, in, q, qa, lat, kpe kernels.Buf, project func(att kernels.Buf)) error {
	be, s, rows := m.be, p.Scratch, p.Rows
	h, r, dn, dr, dv, g := m.Heads, m.R, m.Dn, m.Dr, m.Dv, m.g
	qk, kw := dn+dr, r+dr

	// Queries, per head [nope ; rope].
	if qa != nil {
		be.RMSNorm(qa, qa, m.QANorm, rows, m.QRank, m.Eps)
		be.MatMul(q, qa, m.QB, rows)
	}

	// The cache row: [normalised latent ; rotated rope key].
	be.RMSNorm(lat, lat, m.KVANorm, rows, r, m.Eps)
	be.RoPE(kpe, p.Pos, 1, dr, &m.Rope)
	krow := zeroed(be, s, s.Buf("mla.krow", rows*kw), rows*kw)
	scatterCols(be, krow, lat, rows, kw, g, colBlock{0, r})
	scatterCols(be, krow, kpe, rows, kw, g, colBlock{r, dr})

	var dsa *kernels.DSA
	var ikey kernels.Buf
	if x := m.Indexer; x != nil {
		dsa, ikey = x.forward(p, in, qa)
	}
	be.StoreKV(p.Seq.Pool, m.KVLayer, krow, ikey, p.Slots)

	// The rotated rope parts of the queries.
	qpe := s.Buf("mla.qpe", rows*h*dr)
	src, dst := make([]colBlock, h), make([]colBlock, h)
	for i := range h {
		src[i], dst[i] = colBlock{i*qk + dn, dr}, colBlock{i*kw + r, dr}
	}
	gatherCols(be, qpe, q, rows, h*qk, g, src...)
	be.RoPE(qpe, p.Pos, h, dr, &m.Rope)
	if done, err := m.expanded(p, q, qpe, lat, kpe, project, dsa); done || err != nil {
		return err
	}

	// Absorbed queries, per head [W_UK_hᵀ q_nope ; rotated q_pe].
	qf := zeroed(be, s, s.Buf("mla.qf", rows*h*kw), rows*h*kw)
	scatterCols(be, qf, qpe, rows, h*kw, g, dst...)
	m.headProducts(p, qf, q, m.UKTs, m.UKT, "mla.uk", headCols{qk, dn}, headCols{kw, r})

	// Attention in latent space, then each head's W_UV and o_proj.
	olat := s.Buf("mla.olat", rows*h*r)
	m.ops.MLAttention(olat, qf, p.Seq.Pool, m.KVLayer, p.Attn, rows, h, r, m.Scale, dsa)
	att := s.Buf("mla.att", rows*h*dv)
	if m.UVs == nil {
		att = zeroed(be, s, att, rows*h*dv)
	}
	m.headProducts(p, att, olat, m.UVs, m.UV, "mla.uv", headCols{r, r}, headCols{dv, dv})
	project(att)
	return nil
}

// headCols is a head's share of a row: width columns of which the first
// used are read or written.
type headCols struct{ width, used int }

// headProducts writes, for every row and head h, W_h times the first
// src.used columns of h's src block into the first dst.used columns of its
// dst block: with the stacked matrices in one call (kernels.HeadMatMul),
// else a MatMul and two column moves a head, which add into dst (its
// blocks must be zero then).
func (m *MLA) headProducts(p *Pass, dst, x kernels.Buf, stacked kernels.Tensor, ws []kernels.Tensor, name string, src, out headCols) {
	be, s, rows, h := m.be, p.Scratch, p.Rows, m.Heads
	if stacked != nil {
		be.(kernels.HeadMatMul).MatMulHeads(dst, x, stacked, kernels.HeadProduct{Rows: rows, Heads: h, Out: out.used,
			In: src.used, XRow: h * src.width, XHead: src.width, DstRow: h * out.width, DstHead: out.width})
		return
	}
	in, res := s.Buf(name+".in", rows*src.used), s.Buf(name+".out", rows*out.used)
	for i := range h {
		gatherCols(be, in, x, rows, h*src.width, m.g, colBlock{i * src.width, src.used})
		be.MatMul(res, in, ws[i], rows)
		scatterCols(be, dst, res, rows, h*out.width, m.g, colBlock{i * out.width, out.used})
	}
}

// bindAbsorbed derives the absorbed form's matrices from kv_b_proj (all
// heads, or a tensor-parallel rank's): W_UK_hᵀ and W_UV_h of every head,
// stacked into one tensor each where the backend multiplies all heads in
// one call (kernels.HeadMatMul, whose strides here are the head widths:
// multiples of 4 for every DeepSeek shape and fixture; a float format it
// does not read rounded to bf16 if it reads that), else one tensor a head.
func (m *MLA) bindAbsorbed(b *binder, kvb *kernels.Weight) {
	per := m.Dn + m.Dv
	var uks, uvs []*kernels.Weight
	for i := range kvb.Rows() / per {
		lo := i * per
		uk, err := kvb.RowSlice(fmt.Sprintf("%s[uk%d]", kvb.Name, i), lo, lo+m.Dn, []int{m.Dn, m.R})
		if err == nil {
			uk, err = transposed(uk)
		}
		var uv *kernels.Weight
		if err == nil {
			uv, err = kvb.RowSlice(fmt.Sprintf("%s[uv%d]", kvb.Name, i), lo+m.Dn, lo+per, []int{m.Dv, m.R})
		}
		if err != nil {
			b.fail(err)
			return
		}
		uks, uvs = append(uks, uk), append(uvs, uv)
	}
	hm, ok := b.be.(kernels.HeadMatMul)
	strides := (m.Dn+m.Dr)%4 == 0 && (m.R+m.Dr)%4 == 0 && m.R%4 == 0 && m.Dv%4 == 0
	if ok && strides && len(uks) > 0 {
		uk, err := kernels.StackRows(kvb.Name+"[ukᵀ]", uks)
		var uv *kernels.Weight
		if err == nil {
			uv, err = kernels.StackRows(kvb.Name+"[uv]", uvs)
		}
		if err != nil {
			b.fail(err)
			return
		}
		// A float kv_b_proj (GGUF's rejoined from block formats is F32)
		// that the backend's kernel does not read goes in rounded to bf16
		// where bf16 is taken: within a device backend's bf16 tolerance,
		// and one launch a product instead of three a head.
		if f := uk.DType; !hm.HeadMatMulTakes(uk) && (f == kernels.F32 || f == kernels.F16) {
			if uk16, err := uk.ToBF16(uk.Name); err == nil && hm.HeadMatMulTakes(uk16) {
				if uv16, err := uv.ToBF16(uv.Name); err == nil {
					uk, uv = uk16, uv16
				}
			}
		}
		if hm.HeadMatMulTakes(uk) && hm.HeadMatMulTakes(uv) {
			m.UKTs, m.UVs = b.derived(uk, nil), b.derived(uv, nil)
			return
		}
	}
	for i := range uks {
		m.UKT = append(m.UKT, b.derived(uks[i], nil))
		m.UV = append(m.UV, b.derived(uvs[i], nil))
	}
}

// absorbedHeads is the number of heads the absorbed matrices were derived for.
func (m *MLA) absorbedHeads() (uk, uv int) {
	if m.UKTs != nil && m.UVs != nil {
		return m.UKTs.Weight().Rows() / m.R, m.UVs.Weight().Rows() / m.Dv
	}
	return len(m.UKT), len(m.UV)
}

// Prompt passes with the keys and values expanded (kernels.MLAPrefillOps):
// mlaGroupHeads heads at a time, each group's expansion of the whole
// context in one GEMM and its attention in one call. The pass takes this
// form when
//   - it has mlaExpandRows rows or more (a decode step, or a few rows,
//     stays absorbed: it would expand the whole context for them);
//   - it costs fewer multiply-adds than the absorbed form, those of the
//     expanded form divided by the backend's MLAExpandSpeedup (expandPays:
//     an append to a long session expands all of it for its few rows);
//   - a group's expansion fits mlaExpandMaxFloats (ctx ≤ 32768 for
//     DeepSeek-V3's widths);
//   - under DeepSeek sparse attention, the backend can mask each row to
//     its selected positions (DSAMask), or every row attends to every
//     visible position (the context is at most index_topk long).
const (
	mlaGroupHeads      = 16
	mlaExpandRows      = 16
	mlaExpandMaxFloats = 1 << 27
)

// expandPays compares the two forms' multiply-adds a head for a pass of
// rows rows over a context of ctx positions: expanding ctx latents
// (R·(Dn+Dv) each) and attending with Dn+Dr+Dv a (row, position), sped up
// by the backend's factor, against attending in latent space (2R+Dr a
// (row, position)) plus absorbing each row's query and output (R·(Dn+Dv)).
// For DeepSeek-V3's widths the CPU (speedup 1) expands fresh prompts and
// appends to contexts not much longer than them (100 rows: up to ~240
// positions); CUDA (8) expands every pass of 16 rows or more.
//
// attended is the positions a row attends to in the absorbed form (ctx, or
// DSA's top-k); the expanded form is counted over the whole context, as a
// masked dense kernel computes it.
func (m *MLA) expandPays(rows, ctx, attended int, speedup float64) bool {
	r, dn, dr, dv := float64(m.R), float64(m.Dn), float64(m.Dr), float64(m.Dv)
	n, c := float64(rows), float64(ctx)
	expanded := (c*r*(dn+dv) + n*c*(dn+dr+dv)) / max(speedup, 1)
	absorbed := n*float64(min(attended, ctx))*(2*r+dr) + n*r*(dn+dv)
	return expanded < absorbed
}

// expanded runs the pass's attention and output projection (project) in
// the expanded form and reports true, or does nothing and reports false.
func (m *MLA) expanded(p *Pass, q, qpe, lat, kpe kernels.Buf, project func(att kernels.Buf), dsa *kernels.DSA) (bool, error) {
	ops, ok := m.be.(kernels.MLAPrefillOps)
	rows, start := p.Rows, p.Attn.Start
	ctx := start + rows
	hn := min(mlaGroupHeads, m.Heads)
	attended := ctx
	if dsa != nil {
		attended = dsa.TopK
	}
	if !ok || len(m.KVB) == 0 || len(m.KVB)*hn < m.Heads || rows < mlaExpandRows ||
		!m.expandPays(rows, ctx, attended, ops.MLAExpandSpeedup()) || ctx*hn*(m.Dn+m.Dv) > mlaExpandMaxFloats {
		return false, nil
	}
	be, s, r, dr := m.be, p.Scratch, m.R, m.Dr
	// Under DSA past index_topk positions, each row's selection as a mask
	// (once for all head groups).
	var mask kernels.Buf
	if dsa != nil && ctx > dsa.TopK {
		mask = s.Buf("mla.x.mask", rows*kernels.MaskWords(ctx))
		if !ops.DSAMask(mask, dsa, p.Seq.Pool, m.KVLayer, p.Attn, rows) {
			return false, nil
		}
	}
	// The latents and rope keys of the whole context: this pass's as
	// computed, or (an append) every position's from the cache, which
	// holds this pass's rows too by now.
	latAll, kpeAll := lat, kpe
	if start > 0 {
		latAll, kpeAll = s.Buf("mla.x.lat", ctx*r), s.Buf("mla.x.kpe", ctx*dr)
		ops.ReadKV(latAll, p.Seq.Pool, m.KVLayer, p.Attn.Table, ctx, 0, r)
		ops.ReadKV(kpeAll, p.Seq.Pool, m.KVLayer, p.Attn.Table, ctx, r, dr)
	}
	att := s.Buf("mla.att", rows*m.Heads*m.Dv)
	kv := s.Buf("mla.x.kv", ctx*hn*(m.Dn+m.Dv))
	for i, w := range m.KVB {
		h0 := i * hn
		be.MatMul(kv, latAll, w, ctx)
		a := kernels.MLAExpanded{Rows: rows, Start: start, Heads: m.Heads, H0: h0, HN: min(hn, m.Heads-h0),
			Dn: m.Dn, Dr: dr, Dv: m.Dv, Scale: m.Scale, Mask: mask}
		if !ops.MLAExpandedAttention(att, q, qpe, kv, kpeAll, a) {
			if i > 0 { // (every group has the same head dims)
				return true, fmt.Errorf("latent attention: the backend declined head group %d of %d", i, len(m.KVB))
			}
			return false, nil
		}
	}
	project(att)
	return true, nil
}

// forward computes the indexer's queries, weights and this pass's keys.
// Every projection feeding the index scores keeps its activations at tf32
// or better (kernels.PreciseMatMul): the hard top-k turns the error of
// bf16-rounded activations into near-tie scores swapping places, i.e.
// different attended tokens, which no later precision recovers.
func (x *Indexer) forward(p *Pass, in, qa kernels.Buf) (*kernels.DSA, kernels.Buf) {
	be, s, rows, d := p.Scratch.be, p.Scratch, p.Rows, x.Dim
	q := s.Buf("dsa.q", rows*x.Heads*d)
	kernels.MatMulPrecise(be, q, qa, x.WQB, rows)
	be.RoPE(q, p.Pos, x.Heads, d, &x.Rope)
	k := s.Buf("dsa.k", rows*d)
	kc := s.Buf("dsa.kc", rows*d)
	kernels.MatMulPrecise(be, k, in, x.WK, rows)
	// LayerNorm(k) = RMSNorm(k - mean(k)) * w + b (eps 1e-6, as the reference).
	kernels.MatMulPrecise(be, kc, k, x.Center, rows)
	be.RMSNorm(kc, kc, x.KNormW, rows, d, 1e-6)
	be.AddBias(kc, x.KNormB, rows, d)
	be.RoPE(kc, p.Pos, 1, d, &x.Rope)
	w := s.Buf("dsa.w", rows*x.Heads)
	kernels.MatMulPrecise(be, w, in, x.WProj, rows)
	return &kernels.DSA{Q: q, W: w, Heads: x.Heads, Dim: d, TopK: x.TopK, Scale: x.Scale}, kc
}

// mlaKVSpec is the compressed cache: one shared row per token, and the
// indexer keys in the V rows when the model has them.
func mlaKVSpec(c *Config, indexer bool) kernels.KVSpec {
	s := kernels.KVSpec{Layers: c.NumLayers, KVHeads: 1, HeadDimK: c.KVLoraRank + c.QKRopeHeadDim}
	if indexer {
		s.HeadDimV = c.IndexHeadDim
	}
	return s
}

// checkMLA validates the MLA hyper-parameters before any tensor is bound.
func checkMLA(c *Config) error {
	if c.KVLoraRank <= 0 || c.QKNopeHeadDim <= 0 || c.QKRopeHeadDim <= 0 || c.VHeadDim <= 0 || c.QKRopeHeadDim%2 != 0 {
		return fmt.Errorf("latent attention needs kv_lora_rank, qk_nope_head_dim, an even qk_rope_head_dim and v_head_dim, have %d, %d, %d, %d",
			c.KVLoraRank, c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim)
	}
	return nil
}

// colBlock is a run of columns [lo, lo+width) of a row.
type colBlock struct{ lo, width int }

// colChunks lists, row by row and block by block, the indices of the
// g-wide chunks the blocks cover in rows of rowW columns. Gather and
// ScatterAdd over g-wide "rows" with these indices move column blocks
// between row layouts, which is how heads are split and joined here.
func colChunks(rows, rowW, g int, blocks []colBlock) []int32 {
	n := 0
	for _, b := range blocks {
		n += b.width / g
	}
	idx := make([]int32, 0, rows*n)
	for r := range rows {
		for _, b := range blocks {
			for j := 0; j < b.width; j += g {
				idx = append(idx, int32((r*rowW+b.lo+j)/g))
			}
		}
	}
	return idx
}

// gatherCols writes the blocks of src's rows side by side into dst.
func gatherCols(be kernels.Backend, dst, src kernels.Buf, rows, srcW, g int, blocks ...colBlock) {
	be.Gather(dst, src, colChunks(rows, srcW, g, blocks), g)
}

// scatterCols adds src's rows, split into the blocks, into dst's blocks.
func scatterCols(be kernels.Backend, dst, src kernels.Buf, rows, dstW, g int, blocks ...colBlock) {
	idx := colChunks(rows, dstW, g, blocks)
	ones := make([]float32, len(idx))
	for i := range ones {
		ones[i] = 1
	}
	be.ScatterAdd(dst, src, idx, ones, g)
}

// zeroed clears the first n elements of b (see Scratch.Zeros) and returns it.
func zeroed(be kernels.Backend, s *Scratch, b kernels.Buf, n int) kernels.Buf {
	z := s.Zeros(n)
	be.Add(b, z, z, n)
	return b
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// rawWeight fetches a checkpoint tensor that the architecture derives
// others from (row slices, transposes), counting it as bound. Under a
// tensor-parallel plan it is the rank's slice.
func rawWeight(b *binder, name string, shape ...int) *kernels.Weight {
	b.expected[name] = true
	w, err := b.weight(name, shape)
	if err == nil && b.plan != nil { // this rank's slice (tp.go)
		w, err = b.plan.shard(b.cfg, w)
	}
	if err != nil {
		b.fail(err)
		return nil
	}
	b.bytes += int64(len(w.Data)) + int64(len(w.Scale))*4
	return w
}

// derived makes a backend tensor of a weight derived from checkpoint
// tensors (taking a constructor's results as they come).
func (b *binder) derived(w *kernels.Weight, err error) kernels.Tensor {
	if err != nil {
		b.fail(err)
		return nil
	}
	t, err := b.be.LoadWeight(w)
	if err != nil {
		b.fail(fmt.Errorf("%s: %w", w.Name, err))
		return nil
	}
	return t
}

// transposed returns wᵀ in w's own format: elements move, values do not
// change (FP8 scale blocks transpose with them), so it is exact.
func transposed(w *kernels.Weight) (*kernels.Weight, error) {
	rows, cols := w.Rows(), w.Cols()
	var es int
	switch w.DType {
	case kernels.F32:
		es = 4
	case kernels.F16, kernels.BF16:
		es = 2
	case kernels.F8E4M3:
		es = 1
	default:
		return nil, fmt.Errorf("%s: transposing %s: %w", w.Name, w.DType, kernels.ErrUnsupported)
	}
	t := &kernels.Weight{Name: w.Name + "ᵀ", DType: w.DType, Shape: []int{cols, rows}, Data: make([]byte, len(w.Data))}
	for i := range rows {
		for j := range cols {
			copy(t.Data[(j*rows+i)*es:(j*rows+i+1)*es], w.Data[(i*cols+j)*es:(i*cols+j+1)*es])
		}
	}
	if w.DType == kernels.F8E4M3 {
		bo, bi := w.ScaleBlock[0], w.ScaleBlock[1]
		sr, sc := ceilDiv(rows, bo), ceilDiv(cols, bi)
		t.ScaleBlock = [2]int{bi, bo}
		t.Scale = make([]float32, len(w.Scale))
		for i := range sr {
			for j := range sc {
				t.Scale[j*sr+i] = w.Scale[i*sc+j]
			}
		}
	}
	return t, t.Validate()
}

// centering is the F32 matrix I - 1/n: x·Cᵀ subtracts x's mean.
func centering(name string, n int) *kernels.Weight {
	w := &kernels.Weight{Name: name, DType: kernels.F32, Shape: []int{n, n}, Data: make([]byte, 4*n*n)}
	for i := range n {
		for j := range n {
			v := -1 / float32(n)
			if i == j {
				v += 1
			}
			binary.LittleEndian.PutUint32(w.Data[4*(i*n+j):], math.Float32bits(v))
		}
	}
	return w
}

// mlaRope returns the rotary frequencies of a dim-wide rope part and the
// cos/sin factor: yarn's when rope_scaling asks for yarn (DeepSeek-V3's
// long-context setting), else the config's plain rule.
func (c *Config) mlaRope(dim int) ([]float32, float32) {
	s := c.RopeScaling
	if s == nil || (s.RopeType != "yarn" && s.Type != "yarn") {
		return c.RopeInvFreq(dim), 0
	}
	base, factor := c.RopeTheta, s.Factor
	orig := float64(s.OriginalMaxPositionEmbeddings)
	if orig == 0 {
		orig = float64(c.MaxPositions)
	}
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	corr := func(rot float64) float64 {
		return float64(dim) * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := max(math.Floor(corr(betaFast)), 0), min(math.Ceil(corr(betaSlow)), float64(dim-1))
	if low == high {
		high += 0.001
	}
	inv := make([]float32, dim/2)
	for i := range inv {
		posFreq := math.Pow(base, float64(2*i)/float64(dim))
		ramp := min(max((float64(i)-low)/(high-low), 0), 1)
		extrap := 1 - ramp
		inv[i] = float32(1/(factor*posFreq)*(1-extrap) + 1/posFreq*extrap)
	}
	att := yarnMScale(factor, 1)
	if s.MScale != 0 && s.MScaleAllDim != 0 {
		att = yarnMScale(factor, s.MScale) / yarnMScale(factor, s.MScaleAllDim)
	}
	return inv, float32(att)
}

// yarnSoftmaxScale is DeepSeek's extra softmax factor under yarn:
// mscale(factor, mscale_all_dim)².
func (c *Config) yarnSoftmaxScale() float32 {
	s := c.RopeScaling
	if s == nil || (s.RopeType != "yarn" && s.Type != "yarn") || s.MScaleAllDim == 0 {
		return 1
	}
	m := yarnMScale(s.Factor, s.MScaleAllDim)
	return float32(m * m)
}

func yarnMScale(scale, mscale float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*math.Log(scale) + 1
}
