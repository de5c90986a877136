//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
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

// fp8PrefillRows is the least number of rows that takes this path. Below
// it the tf32 kernel, which reads each weight byte once, wins: the chunked
// path moves ~5 bytes per weight element (FP8 read, bf16 written and read
// back), which at ~3 TB/s costs as much as ~40 rows of the tf32 kernel's
// arithmetic. Small groups (an MoE expert's tokens in a prefill) stay there.
const fp8PrefillRows = 64

type fp8Prefill struct {
	scratch cu.DevicePtr // bf16 rows of the current chunk
	scrN    int64
	tmp     cu.DevicePtr // float32 output of a chunk narrower than the matrix
	tmpN    int64
}

// fp8GEMM computes y[rows×out] = x·wᵀ for an FP8 block-scaled weight
// through dequantized bf16 chunks and cuBLASLt; false (nothing done) when
// cuBLASLt is missing or the shape is not one it takes (the caller runs
// gemm_fp8). Called with the backend entered, deferred GEMVs flushed.
func (b *Backend) fp8GEMM(y, x cu.DevicePtr, t *tensor, rows int) bool {
	out, in := t.w.Rows(), t.w.Cols()
	if !b.lt.ok || switches.noFP8Prefill || rows < fp8PrefillRows || in%16 != 0 || t.w.ScaleBlock[1]%16 != 0 {
		return false
	}
	f := &b.f8
	// Whole scale blocks per chunk, so that a chunk's scales start at a
	// row of the scale matrix.
	b0 := t.w.ScaleBlock[0]
	chunk := min(out, max(b0, fp8Scratch/(2*in)/b0*b0))
	if need := int64(chunk) * int64(in) * 2; need > f.scrN {
		// The old scratch is not freed: queued work may still read it.
		f.scratch, f.scrN = b.alloc(need), need
	}
	for c0 := 0; c0 < out && b.err == nil; c0 += chunk {
		n := min(chunk, out-c0)
		b.run(fDeqFP8, cdiv(n*in/16, 256), 1, 256, ptr(f.scratch), ptr(t.data+cu.DevicePtr(c0*in)),
			ptr(t.scale+cu.DevicePtr(c0/b0*t.nsc*4)), i32(n), i32(in), i32(b0),
			i32(t.w.ScaleBlock[1]), i32(t.nsc))
		yc := y
		if n != out {
			if tn := int64(rows) * int64(chunk) * 4; tn > f.tmpN {
				f.tmp, f.tmpN = b.alloc(tn), tn
			}
			yc = f.tmp
		}
		if !b.ltGemm(yc, x, f.scratch, rows, n, in) {
			b.run(fGemmBF16, cdiv(n, 64), cdiv(rows, 64), 128, ptr(yc), ptr(x), ptr(f.scratch), 0,
				uint64(kernels.BF16), 0, 0, 0, i32(rows), i32(n), i32(in))
		}
		if n != out {
			b.run(fCopyColsF32, cdiv(rows*n, 256), 1, 256, ptr(y), ptr(yc), i32(rows), i32(n), i32(out), i32(c0))
		}
	}
	return true
}
