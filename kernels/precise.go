package kernels

// PreciseMatMul is an optional extension of Backend: a MatMul whose
// activations are kept at tf32 precision or better. A backend's MatMul may
// round the activations to bf16 for a faster GEMM (the CUDA backend's
// cuBLASLt prefill path does); that is harmless for ordinary projections,
// whose errors average out, but not ahead of a hard selection such as
// DeepSeek sparse attention's top-k over index scores, where near-tie
// scores flip and the rounding turns into different attended tokens.
// Callers fall back to MatMul on a backend without it (the CPU backend's
// MatMul is fp32 throughout and needs none).
type PreciseMatMul interface {
	// MatMulPrecise computes dst = x · wᵀ over rows rows, as MatMul,
	// without rounding x below tf32 (weights stay in their stored format).
	MatMulPrecise(dst, x Buf, w Tensor, rows int)
}

// MatMulPrecise runs be's PreciseMatMul when it has one, else MatMul.
func MatMulPrecise(be Backend, dst, x Buf, w Tensor, rows int) {
	if p, ok := be.(PreciseMatMul); ok {
		p.MatMulPrecise(dst, x, w, rows)
		return
	}
	be.MatMul(dst, x, w, rows)
}
