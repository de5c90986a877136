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
	chunk = min(chunk, out)
	pad8 := func(n int) int { return (n + 7) &^ 7 }
	if need := int64(pad8(chunk)) * int64(in) * 2; need > s.bfN {
		s.bf, s.bfN = b.alloc(need), need
	}
	for c0 := 0; c0 < out && b.err == nil; c0 += chunk {
		n := min(chunk, out-c0)
		np := pad8(n)
		expand(s.bf, c0, n)
		if np != n {
			b.fail(cu.MemsetD8Async(s.bf+cu.DevicePtr(n*in*2), 0, int64((np-n)*in*2), b.stream))
		}
		yc := y // the output itself only for one unpadded chunk of the whole matrix
		if n != out || np != n {
			if tn := int64(rows) * int64(pad8(chunk)) * 4; tn > s.tmpN {
				s.tmp, s.tmpN = b.alloc(tn), tn
			}
			yc = s.tmp
		}
		if b.ltGemm(yc, x, s.bf, rows, np, in) {
			if yc == b.lt.bfSrc {
				b.lt.bfSrc = 0
			}
		} else {
			b.run(fGemmBF16, cdiv(np, 64), cdiv(rows, 64), 128, ptr(yc), ptr(x), ptr(s.bf), 0,
				uint64(kernels.BF16), 0, 0, 0, i32(rows), i32(np), i32(in))
		}
		if yc != y {
			b.run(fCopyColsF32, cdiv(rows*n, 256), 1, 256, ptr(y), ptr(yc), i32(rows), i32(n), i32(out), i32(c0), i32(np))
		}
	}
}
