// Device helpers shared by the CUDA modules (kernels.cu, decode.cu, moe.cu,
// and others: each .cu that includes it).
#pragma once
#include <stdint.h>

#include "probe.cuh"

__device__ __forceinline__ float bf16f(uint16_t v) { return __uint_as_float(((uint32_t)v) << 16); }

// fp8e4m3 (fn: no infinities) to float.
__device__ __forceinline__ float fp8f(uint8_t v) {
    uint32_t s = (v & 0x80u) << 24;
    uint32_t e = (v >> 3) & 0xfu;
    uint32_t m = v & 7u;
    if (e == 15 && m == 7) return __uint_as_float(0x7fc00000u);
    if (e == 0) {
        float f = (float)m * (1.0f / 512.0f); // m/8 * 2^-6
        return s ? -f : f;
    }
    return __uint_as_float(s | ((e + 120u) << 23) | (m << 20));
}

// fp8x4f decodes four E4M3 bytes (byte b of v into o[b]) with Hopper's
// converter: two cvt.rn.f16x2.e4m3x2 (exact: every E4M3 value is an f16)
// and four widenings, where fp8f takes ~8 integer instructions a value —
// enough to make the FP8 expert GEMVs issue-bound. Same values as fp8f
// (NaN aside: 0x7f/0xff give a NaN either way).
__device__ __forceinline__ void fp8x4f(uint32_t v, float (&o)[4]) {
    asm("{\n\t.reg .b16 lo, hi, a, b, c, d;\n\t.reg .b32 p, q;\n\t"
        "mov.b32 {lo, hi}, %4;\n\t"
        "cvt.rn.f16x2.e4m3x2 p, lo;\n\t"
        "cvt.rn.f16x2.e4m3x2 q, hi;\n\t"
        "mov.b32 {a, b}, p;\n\t"
        "mov.b32 {c, d}, q;\n\t"
        "cvt.f32.f16 %0, a;\n\t"
        "cvt.f32.f16 %1, b;\n\t"
        "cvt.f32.f16 %2, c;\n\t"
        "cvt.f32.f16 %3, d;\n\t}"
        : "=f"(o[0]), "=f"(o[1]), "=f"(o[2]), "=f"(o[3])
        : "r"(v));
}

// prefetchL2 asks L2 for p's line, holding no register: for constant data
// (norm weights) read after a PDL wait, asked for before it.
__device__ __forceinline__ void prefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// lastArrival reports to every thread of the block whether it is the last
// of n blocks to arrive at *counter after writing their partial results,
// and leaves the counter at zero for the next pass (the last one merges
// the partials). One release-acquire atomic in thread 0: the block barrier
// before it orders every thread's stores ahead of its release, the barrier
// after it the acquire ahead of every thread's loads (the pattern of a grid
// barrier's master thread; the acquire invalidates the SM's L1). It
// replaces a sequentially consistent fence in every thread before the
// atomic and another after it. Qwen3-8B Q4_K_M decode on an H200,
// interleaved builds: 552.8-555.5 tok/s against 544.4-553.8.
__device__ __forceinline__ bool lastArrival(int* counter, int n) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        int old;
        asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
        last = old == n - 1;
        if (last) *counter = 0;
    }
    __syncthreads();
    return last;
}

// ldstream loads 16 bytes of a weight that is read once per pass: not
// kept in L1.
__device__ __forceinline__ uint4 ldstream(const uint4* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

