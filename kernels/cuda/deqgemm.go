//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Prefill GEMMs over weights cuBLASLt cannot read as stored (GGUF blocks,
// FP8 block-scaled): row chunks of the weight are expanded to bf16 in a
// bounded scratch, one chunk at a time, and multiplied on cuBLASLt (or
// the built-in bf16 GEMM without it). The weight stays in its format in
// memory; only the scratch, shared by every such GEMM of the backend,
// holds bf16.

// deqScratch holds the chunk buffers. They only grow; an old one is not
// freed, because queued work may still read it.
type deqScratch struct {
	bf   cu.DevicePtr // bf16 rows of the current chunk
	bfN  int64
	tmp  cu.DevicePtr // float32 output of a chunk narrower than the matrix
	tmpN int64
}

// deqGEMM computes y[rows×out] = x·wᵀ in chunks of chunk weight rows:
// expand(dst, c0, n) writes rows [c0, c0+n) of the weight to dst as bf16.
// Called with the backend entered.
func (b *Backend) deqGEMM(y, x cu.DevicePtr, rows, out, in, chunk int, expand func(dst cu.DevicePtr, c0, n int)) {
	s := &b.deq
	chunk = min(chunk, out)
	if need := int64(chunk) * int64(in) * 2; need > s.bfN {
		s.bf, s.bfN = b.alloc(need), need
	}
	for c0 := 0; c0 < out && b.err == nil; c0 += chunk {
		n := min(chunk, out-c0)
		expand(s.bf, c0, n)
		yc := y
		if n != out {
			if tn := int64(rows) * int64(chunk) * 4; tn > s.tmpN {
				s.tmp, s.tmpN = b.alloc(tn), tn
			}
			yc = s.tmp
		}
		if b.ltGemm(yc, x, s.bf, rows, n, in) {
			if yc == b.lt.bfSrc {
				b.lt.bfSrc = 0
			}
		} else {
			b.run(fGemmBF16, cdiv(n, 64), cdiv(rows, 64), 128, ptr(yc), ptr(x), ptr(s.bf), 0,
				uint64(kernels.BF16), 0, 0, 0, i32(rows), i32(n), i32(in))
		}
		if n != out {
			b.run(fCopyColsF32, cdiv(rows*n, 256), 1, 256, ptr(y), ptr(yc), i32(rows), i32(n), i32(out), i32(c0))
		}
	}
}
