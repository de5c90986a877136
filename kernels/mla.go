package kernels

// MLAOps is an optional extension of Backend: attention over a compressed
// multi-head latent attention (MLA) cache, as DeepSeek-V3 and V3.2 need it.
// A backend without it cannot run those models; model construction
// reports ErrUnsupported once, at build time.
//
// The cache layout it reads: a KV pool with KVHeads 1 whose K row per
// token is [latent (dv) ; rotated rope key] (HeadDimK = kv_lora_rank +
// qk_rope_head_dim), shared by every query head. The latent doubles as
// the value, so nothing is stored per head and no V copy is kept. The
// layer's V rows (HeadDimV) are free for a second per-token key: DeepSeek
// sparse attention keeps its indexer keys there (HeadDimV =
// index_head_dim); dense MLA stores none (HeadDimV 0).
type MLAOps interface {
	// MLAttention computes causal attention of the absorbed queries q
	// [rows, heads*HeadDimK] against the layer's cached K rows, each head
	// scoring q·k over all HeadDimK columns times scale, and writes dst
	// [rows, heads*dv]: the softmax-weighted sum of the first dv columns
	// of the K rows (V = K[:, :dv], the latent).
	//
	// dsa, when non-nil, makes it DeepSeek sparse attention: query row r
	// (position seq.Start+r) attends only to the dsa.TopK visible
	// positions with the highest index score (all of them when at most
	// TopK are visible); see DSA. Without dsa every row attends to
	// positions 0..seq.Start+r.
	MLAttention(dst, q Buf, p KVPool, layer int, seq AttnSeq, rows, heads, dv int, scale float32, dsa *DSA)
}

// DSA is the token selection of DeepSeek sparse attention (the lightning
// indexer). The index score of query row r for cached position t is
//
//	Σ_h W[r,h] · relu(Scale · Q[r,h,:]·key_t)
//
// where key_t is the layer's V row of position t (Dim = HeadDimV): the
// indexer key cache lives beside the latent in the same pool layer.
// Ties at the selection boundary go to the earlier position.
type DSA struct {
	Q     Buf // [rows, Heads*Dim] indexer queries, rotary already applied
	W     Buf // [rows, Heads] per-head weights of the score
	Heads int
	Dim   int
	TopK  int
	Scale float32
}

// MLAPrefillOps is an optional extension of MLAOps for prompt passes:
// DeepSeek's latent attention with the keys and values expanded per head
// from the latents (kv_b_proj), which makes it ordinary multi-head
// attention with head dims Dn+Dr and Dv. Over a prompt that costs
// (Dn+Dr+Dv) multiply-adds a (query, key, head) where the absorbed form
// costs 2R+Dr (320 against 1088 for DeepSeek-V3), plus one GEMM over the
// context's latents, and it runs as a flash kernel on tensor cores where
// the absorbed one does not. Decode keeps the absorbed form: one query row
// would pay the expansion of the whole context.
type MLAPrefillOps interface {
	// ReadKV copies columns [lo, lo+width) of the K rows of positions
	// 0..n-1 of a sequence (table: its KV blocks in position order) into
	// dst [n, width].
	ReadKV(dst Buf, p KVPool, layer int, table []int32, n, lo, width int)
	// MLAExpandedAttention computes causal attention for the heads
	// [a.H0, a.H0+a.HN) of a.Heads, query row i at position a.Start+i
	// attending to positions 0..a.Start+i, and writes those heads' columns
	// of dst [a.Rows, a.Heads·Dv]. Head h's query is [q[i, h, :Dn] ;
	// qpe[i, h, :]] (q [Rows, Heads·(Dn+Dr)] as q_b_proj makes it, qpe
	// [Rows, Heads·Dr] its rotated rope parts); its key at position t is
	// [kv[t, h-H0, :Dn] ; kpe[t, :]] and its value kv[t, h-H0, Dn:] (kv
	// [ctx, HN·(Dn+Dv)], the group's expansion; kpe [ctx, Dr] the rotated
	// rope keys). With a.Mask (DSAMask's), row i attends only to the
	// positions its bits select. It reports false, having done nothing,
	// for head dims or a mask the backend has no kernel for.
	MLAExpandedAttention(dst, q, qpe, kv, kpe Buf, a MLAExpanded) bool
	// DSAMask writes the positions DeepSeek sparse attention selects for
	// each of rows query rows (row r at position seq.Start+r, all visible
	// ones when at most d.TopK are: MLAttention's selection) as a bit mask
	// mask [rows, MaskWords(seq.Start+rows)]: bit t%32 of word t/32 of a
	// row is position t, the words stored as float32 bit patterns. It
	// reports false, having done nothing, where the backend has no kernel
	// for the selection.
	DSAMask(mask Buf, d *DSA, p KVPool, layer int, seq AttnSeq, rows int) bool
	// MLAExpandSpeedup is how many times faster than the absorbed
	// attention's this backend does the expanded form's multiply-adds
	// (the expansion GEMM and the attention), for the model's choice of
	// form: 1 where both run on the same cores (the CPU), more where the
	// expanded form has tensor cores.
	MLAExpandSpeedup() float64
}

// MLAExpanded is the shape of one MLAExpandedAttention call.
type MLAExpanded struct {
	Rows, Start   int
	Heads, H0, HN int
	Dn, Dr, Dv    int
	Scale         float32
	// Mask, when set, is DSAMask's selection for these rows (nil: every
	// position up to a row's own).
	Mask Buf
}

// MaskWords is the number of 32-bit words a row of a DSAMask of ctx
// positions takes.
func MaskWords(ctx int) int { return (ctx + 31) / 32 }

// HeadMatMul is an optional extension of Backend: the per-head products of
// MLA's absorbed form (W_UK_hᵀ on the query side, W_UV_h on the output
// side) in one call for all heads, where a backend with a launch cost
// would otherwise pay a GEMV and two column moves a head (128 heads: ~770
// launches a layer a decode step).
type HeadMatMul interface {
	// HeadMatMulTakes reports whether MatMulHeads takes a stacked weight
	// of w's format and shape (checked once, at build time).
	HeadMatMulTakes(w *Weight) bool
	// MatMulHeads computes, for rows r < a.Rows, heads h < a.Heads and
	// outputs o < a.Out,
	//
	//	dst[r·a.DstRow + h·a.DstHead + o] = Σ_i w[h·a.Out + o, i] · x[r·a.XRow + h·a.XHead + i]
	//
	// where w [Heads·Out, In] is the heads' matrices stacked (StackRows).
	// Strides are in elements, multiples of 4.
	MatMulHeads(dst, x Buf, w Tensor, a HeadProduct)
}

// HeadProduct is the shape of one MatMulHeads call.
type HeadProduct struct {
	Rows, Heads, Out, In int
	XRow, XHead          int
	DstRow, DstHead      int
}
