// Device helpers shared by the MoE modules (moe.cu, moe_quant.cu): the
// routing buffer's layout (kernels.RouteLen: per row, K expert ids stored as
// exact floats, then their K combine weights) and the SwiGLU product.
#pragma once
#include <math.h>

// expertOf reads the id of routing slot k of row r; -1 when it is not an
// expert of this layer (the slot then contributes nothing).
__device__ __forceinline__ int expertOf(const float* sel, int r, int K, int k, int E) {
    float f = sel[(long)r * 2 * K + k];
    return (f >= 0.f && f < (float)E) ? (int)f : -1;
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }
