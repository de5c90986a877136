//go:build cuda

package cuda

import (
	"gorgonia.org/cu"
)

// FP8 prefill. The one-token GEMVs read FP8 E4M3 block-scaled weights as
// they are; a prefill GEMM on the built-in tf32 kernel (gemm_fp8) ran at
// tens of TFLOP/s, which made a Qwen3.5-27B FP8 prefill ~700 tok/s on an
// H200. Here row chunks of the weight are expanded times their scales to
// bf16 in a bounded scratch (fp8Scratch bytes at most, reused by every
// matrix; the weights stay FP8 in memory) and multiplied by cuBLASLt on
// the bf16 tensor cores. At prefill sizes the GEMM's arithmetic dwarfs the
// extra pass over the weight (1 byte read, 2 written and read again per
// element against 2·rows flops).

// fp8Scratch bounds the bf16 scratch of one chunk of an FP8 weight.
const fp8Scratch = 256 << 20

// fp8PrefillRows is the least number of rows that takes the chunked path.
// Below it the tf32 kernel, which reads each weight byte once, wins: the
// chunked path moves ~5 bytes per weight element (FP8 read, bf16 written
// and read back), which at ~3 TB/s costs as much as ~40 rows of the tf32
// kernel's arithmetic. cuBLASLt's FP8 GEMM (fp8LtGEMM) reads the weight
// once as well and takes every row count past the GEMVs' (switches'
// fp8LtRows): measured on an H200, a MiniMax-M2-shaped slice whose expert
// groups have ~16 rows at a 512-token prefill ran 3952 tok/s with it from
// 9 rows, 3514 from 24, 3134 from 64 and 3259 on the chunks.
const fp8PrefillRows = 64

// fp8GEMM computes y[rows×out] = x·wᵀ for an FP8 block-scaled weight on
// cuBLASLt's FP8 GEMM (fp8LtGEMM) where it takes the shape, on fp8gemm.cu's
// kernels where those are switched on, else through dequantized bf16
// chunks and cuBLASLt; false (nothing done) when cuBLASLt is missing or
// the shape is not one it takes (the caller runs gemm_fp8). Called with
// the backend entered, deferred GEMVs flushed.
func (b *Backend) fp8GEMM(y, x cu.DevicePtr, t *tensor, rows int) bool {
	if rows >= fp8PrefillRows && b.fp8MMAGEMM(y, x, t, rows) || rows >= switches.fp8LtRows && b.fp8LtGEMM(y, x, t, rows) {
		return true
	}
	out, in := t.w.Rows(), t.w.Cols()
	if !b.lt.ok || switches.noFP8Prefill || rows < fp8PrefillRows || in%16 != 0 || t.w.ScaleBlock[1]%16 != 0 {
		return false
	}
	// Whole scale blocks per chunk, so that a chunk's scales start at a
	// row of the scale matrix.
	b0 := t.w.ScaleBlock[0]
	b.deqGEMM(y, x, rows, out, in, max(b0, fp8Scratch/(2*in)/b0*b0), func(dst cu.DevicePtr, c0, n int) {
		b.run(fDeqFP8, cdiv(n*in/16, 256), 1, 256, ptr(dst), ptr(t.data+cu.DevicePtr(c0*in)),
			ptr(t.scale+cu.DevicePtr(c0/b0*t.nsc*4)), i32(n), i32(in), i32(b0), i32(t.w.ScaleBlock[1]), i32(t.nsc))
	})
	return true
}
