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
// A chunk of a width cuBLASLt declines (not a multiple of 8: a TP4 rank's
// 12-row in_proj_a/b of Qwen3.5-27B) is padded with zero rows to the next
// multiple of 8 rather than left to the built-in GEMM, whose grid for
// such a width is one block column: 0.2–0.4 ms a call over 5120 inputs,
// ~25 ms of every TP4 prefill pass. Called with the backend entered.
func (b *Backend) deqGEMM(y, x cu.DevicePtr, rows, out, in, chunk int, expand func(dst cu.DevicePtr, c0, n int)) {
	s := &b.deq
	cs := deqChunks(out, chunk)
	if len(cs) == 0 {
		return
	}
	widest := cs[0].np // the first chunk is the widest
	if need := int64(widest) * int64(in) * 2; need > s.bfN {
		s.bf, s.bfN = b.alloc(need), need
	}
	for _, k := range cs {
		if b.err != nil {
			return
		}
		expand(s.bf, k.c0, k.n)
		if k.np != k.n {
			b.fail(cu.MemsetD8Async(s.bf+cu.DevicePtr(k.n*in*2), 0, int64((k.np-k.n)*in*2), b.stream))
		}
		yc := y
		if !k.direct {
			if tn := int64(rows) * int64(widest) * 4; tn > s.tmpN {
				s.tmp, s.tmpN = b.alloc(tn), tn
			}
			yc = s.tmp
		}
		if b.ltGemm(yc, x, s.bf, rows, k.np, in) {
			if yc == b.lt.bfSrc {
				b.lt.bfSrc = 0
			}
		} else {
			b.run(fGemmBF16, cdiv(k.np, 64), cdiv(rows, 64), 128, ptr(yc), ptr(x), ptr(s.bf), 0,
				uint64(kernels.BF16), 0, 0, 0, i32(rows), i32(k.np), i32(in))
		}
		if !k.direct {
			b.run(fCopyColsF32, cdiv(rows*k.n, 256), 1, 256, ptr(y), ptr(yc), i32(rows), i32(k.n), i32(out), i32(k.c0),
				i32(k.np))
		}
	}
}
