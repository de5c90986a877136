package kernels

// FusedOps is an optional extension of Backend: the decode step's chains
// of small ops as single launches. On a GPU a batch-1 decode step is a few
// hundred kernels whose fixed cost (launch, ramp-up, drain) is what keeps
// it from the memory-bandwidth roofline; each method here replaces two to
// four of them. Every method reports whether it handled the call: a
// backend declines shapes or weight formats it has no fused kernel for
// (false, nothing done), and the caller runs the unfused sequence, which
// computes the same values. Widths come from the weights: x holds at
// least a weight's Cols elements, outputs at least its Rows.
type FusedOps interface {
	// NormMatMul computes dst[i] = ws[i] · rmsnorm(x) for up to four
	// weights that share the input (q, k, v), where rmsnorm(x) =
	// x/rms(x)*norm over rows rows of width dim. x is not modified and
	// the normed vector is not stored.
	NormMatMul(dst []Buf, x Buf, norm Tensor, eps float32, ws []Tensor, rows int) bool
	// NormSwiGLU computes act = silu(gate · rmsnorm(x)) * (up · rmsnorm(x))
	// (a SwiGLU MLP's input projections and activation).
	NormSwiGLU(act, x Buf, norm Tensor, eps float32, gate, up Tensor, rows int) bool
	// MatMulAdd computes acc += w · x (a projection and the residual add).
	MatMulAdd(acc, x Buf, w Tensor, rows int) bool
	// RoPEStoreKV applies the optional per-head RMSNorm (qNorm, kNorm of
	// headDim elements, as Qwen3's q_norm/k_norm) and rotary embedding at
	// positions pos to q [rows, heads*headDim] and k [rows,
	// kvHeads*headDim] in place, then stores k and v in the pool at slots,
	// as RMSNorm, RoPE and StoreKV would in sequence.
	RoPEStoreKV(q, k, v Buf, qNorm, kNorm Tensor, eps float32, p KVPool, layer int, pos, slots []int32,
		heads, kvHeads, headDim int, r *RoPE) bool
}

// FusedAttention is an optional extension of FusedOps: a one-token decode
// step's attention with its q/k norms, rotary embedding and KV store in
// one launch (on a GPU those were three launches per layer for a few
// microseconds of traffic).
type FusedAttention interface {
	// RoPEAttention is RoPEStoreKV for one row followed by Attention of
	// that row over seq (dst = attention output, [heads*headDim]). q and
	// k are scratch: their contents afterwards are unspecified. The norms
	// may also be one RMSNorm over each whole row (qNorm of heads*headDim
	// and kNorm of kvHeads*headDim weights, MiniMax-M2's). Like the
	// FusedOps it reports false, having done nothing, for shapes or norms
	// it has no kernel for.
	RoPEAttention(dst, q, k, v Buf, qNorm, kNorm Tensor, eps float32, p KVPool, layer int, pos, slots []int32,
		seq AttnSeq, heads, kvHeads, headDim int, r *RoPE, scale float32) bool
}
