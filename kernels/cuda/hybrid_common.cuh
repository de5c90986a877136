// Helpers shared by hybrid.cu and hybrid_chunk.cu (the Gated DeltaNet
// kernels): the scalar functions the CPU evaluates in float64 are
// evaluated in double here too.
#pragma once
#include <cuda_fp16.h>

#include "common.cuh"  // warpSum

// kernels.DType numbers of the formats a conv1d weight may be stored in.
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

__device__ __forceinline__ float loadW(const void* w, int dt, long i) {
    if (dt == DT_F32) return ((const float*)w)[i];
    if (dt == DT_F16) return __half2float(((const __half*)w)[i]);
    return __uint_as_float((unsigned)((const unsigned short*)w)[i] << 16);
}

__device__ __forceinline__ float sigmoidD(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

__device__ __forceinline__ double warpSumD(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}


// Programmatic dependent launch as in decode.cu: with POCKET_HYBRID_PDL=1
// the one-token DeltaNet kernels are launched so that they may start while
// their predecessor drains; each reads nothing its predecessor writes
// before pdlWait. Launched without the attribute the wait returns at once.
__device__ __forceinline__ void pdlWait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    PROBE_WAITED();
}
__device__ __forceinline__ void pdlLaunchDependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
