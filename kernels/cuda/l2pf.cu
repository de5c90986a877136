// l2_prefetch: asks L2 for weight bytes a later GEMV of a captured decode
// step will read (l2pf.go has the why and the host side). It runs on a
// side branch of the graph beside the step's kernels and computes
// nothing: every instruction is a hint, so a dropped or late prefetch
// costs only speed.
//
// Up to three ranges; range m is rows r = 0, 1, ... of stride s[m] bytes
// from p[m], of which the first take[m] bytes are asked for, within
// total[m] bytes. A whole matrix is one range of 64 KiB "rows"; a matrix
// too large for the budget is its real rows, each row's first bytes (the
// GEMVs stream every row from its start, all rows at once).
//
// mode 0: cp.async.bulk.prefetch.L2 (the copy engine walks the bytes; one
// instruction per piece). PTX ISA 8.0: nvcc 11.8 does not know it, so the
// instruction is inline assembly and `go generate` raises the module's
// .version to 8.0 (l2pf.go); the driver's JIT on the GPU host assembles it.
// mode 1: prefetch.global.L2::evict_last, one per 128-byte line.
//
// Compiled to compute_90 PTX by `go generate` (l2pf.go).
#include <stdint.h>

#define PF_PIECE 65536 // most bytes one bulk prefetch is asked for

__device__ __forceinline__ void bulkPrefetch(const char* p, uint32_t n) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
}

__device__ __forceinline__ void linePrefetch(const char* p) {
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p));
}

// prefetchBytes asks for [p, p+n), n a multiple of 16 and p 16-aligned.
__device__ __forceinline__ void prefetchBytes(const char* p, long long n, int mode) {
    for (long long o = 0; o < n; o += PF_PIECE) {
        uint32_t k = (uint32_t)min((long long)PF_PIECE, n - o);
        if (mode == 0) {
            bulkPrefetch(p + o, k);
        } else {
            for (uint32_t l = 0; l < k; l += 128) linePrefetch(p + o + l);
        }
    }
}

__device__ __forceinline__ void prefetchRange(const char* p, long long total, long long stride, long long take,
                                              int mode) {
    if (p == nullptr || stride <= 0) return;
    const long long T = (long long)gridDim.x * blockDim.x, nr = (total + stride - 1) / stride;
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < nr; r += T) {
        long long at = r * stride, n = min(take, total - at) & ~15LL;
        if (n > 0) prefetchBytes(p + at, n, mode);
    }
}

extern "C" __global__ void l2_prefetch(const char* p0, long long total0, long long stride0, long long take0,
                                       const char* p1, long long total1, long long stride1, long long take1,
                                       const char* p2, long long total2, long long stride2, long long take2,
                                       int mode) {
    prefetchRange(p0, total0, stride0, take0, mode);
    prefetchRange(p1, total1, stride1, take1, mode);
    prefetchRange(p2, total2, stride2, take2, mode);
}
