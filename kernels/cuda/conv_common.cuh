// The conv1d weight access and the double-precision sigmoid shared by the
// Gated DeltaNet kernels (hybrid_common.cuh) and the FP8 in-projection
// that runs a decode step's convolution in its store (fp8pipe.cuh).
#pragma once
#include <cuda_fp16.h>

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
