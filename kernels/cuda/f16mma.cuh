// Tensor-core helpers of the FP8 kernels (fp8mma.cu, fp8pipe.cuh,
// fp8gemm.cu): E4M3 bytes widened to f16 pairs, exactly (every E4M3 value
// is an f16), and the m16n8k16 f16 mma with fp32 accumulation they feed.
#pragma once
#include <stdint.h>

// e4m3x4 converts the four E4M3 bytes of w to two f16 pairs: lo = bytes 0
// (low half), 1; hi = bytes 2, 3.
__device__ __forceinline__ void e4m3x4(uint32_t w, uint32_t& lo, uint32_t& hi) {
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
}

// mma16816 is d += A·B for one m16n8k16 f16 step with fp32 accumulation.
__device__ __forceinline__ void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
