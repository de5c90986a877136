// Tensor-core and asynchronous-copy helpers shared by the modules that
// include it (kernels.cu's prefill attention, the FP8 ring GEMVs, the MLA
// kernels): one definition of each instead of one a module.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

// packbf rounds a and b to bf16 and packs them, a in the low half (the
// lower k index of an mma fragment register).
__device__ __forceinline__ uint32_t packbf(float a, float b) {
    __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    return *(uint32_t*)&p;
}

// tf32 rounds f to tf32 (to nearest, ties away), as mma's tf32 operands.
__device__ __forceinline__ uint32_t tf32(float f) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

// mma_bf16 is c += A·B for one m16n8k16 bf16 step with fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// lds128 loads 16 bytes from shared memory at a (a shared-window address).
__device__ __forceinline__ uint4 lds128(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

// cpAsync16 copies 16 bytes to shared memory at dst (a shared-window
// address), the first bytes of them from src and zeros for the rest
// (bytes 0: all zeros, src unread).
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, uint32_t bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cpCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cpWait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
