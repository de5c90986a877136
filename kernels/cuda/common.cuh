// Device helpers shared by the CUDA modules (kernels.cu, decode.cu, moe.cu,
// and others: each .cu that includes it).
#pragma once
#include <stdint.h>

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

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
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

