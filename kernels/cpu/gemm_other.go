//go:build !amd64

package cpu

// matMulChunked is amd64's chunked prefill GEMM (gemm_amd64.go); the
// portable loops take MatMul's plain blocks.
func (b *Backend) matMulChunked(d, xs []float32, t *tensor, rows, out, in int) bool { return false }
