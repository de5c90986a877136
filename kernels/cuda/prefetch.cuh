// l2Prefetch: a decode kernel that reads little from DRAM (the attention,
// the DeltaNet mix) asks L2 for the bytes the launch after it streams (the
// output projection's weights), so that those arrive while it runs
// (kernels.L2Hinter; POCKET_L2_HINT). Block blk of nblk takes a
// contiguous share of [p, p+bytes), one 128-byte line per thread at a time.
#pragma once
#include <stdint.h>

__device__ __forceinline__ void l2Prefetch(const uint8_t* p, long bytes, int blk, int nblk) {
    if (p == nullptr || bytes <= 0) return;
    const long chunk = ((bytes + nblk - 1) / nblk + 127) & ~127L;
    const long hi = min((long)(blk + 1) * chunk, bytes);
    for (long o = (long)blk * chunk + (long)threadIdx.x * 128; o < hi; o += (long)blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
}
