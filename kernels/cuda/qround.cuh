// qRound: the int8 rounding of an activation row for quant.cu's GEMVs,
// shared with the decode attention (decode_attn.cuh), which can round its
// output for a block-format o projection. Its own header, not common.cuh:
// an unused inline function there changed nvcc's code for other modules.
#pragma once
#include <stdint.h>

// qRound rounds float4 i of a row (v; ok: i is in the row) to int8 per 32
// elements (8 lanes): xq[i] the four values, xs[i/8] the block's scale and
// the sum of its integers. Every lane of the warp takes part.
__device__ __forceinline__ void qRound(uint32_t* xq, float2* xs, float4 v, int i, bool ok) {
    float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    const float d = am / 127.f, id = am > 0.f ? 127.f / am : 0.f;
    const int q0 = __float2int_rn(v.x * id), q1 = __float2int_rn(v.y * id), q2 = __float2int_rn(v.z * id),
              q3 = __float2int_rn(v.w * id);
    int s = q0 + q1 + q2 + q3;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (ok) {
        xq[i] = (uint32_t)(q0 & 0xff) | ((uint32_t)(q1 & 0xff) << 8) | ((uint32_t)(q2 & 0xff) << 16) |
                ((uint32_t)(q3 & 0xff) << 24);
        if ((i & 7) == 0) xs[i >> 3] = make_float2(d, (float)s);
    }
}
