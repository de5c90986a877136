// Mixture-of-experts kernels (kernels.MoEOps): routing on the device and
// SwiGLU experts whose weights are found through the routed ids, so a
// decode step needs no host round trip and can be captured as a graph.
// Compiled to compute_90 PTX (see moe.go's go:generate line); the PTX is
// committed and embedded.
//
// Routing buffer layout (kernels.RouteLen): per row, K expert ids stored
// as exact floats, then their K combine weights.
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "moe_common.cuh"
#include "moe_route.cuh"

// ---------------------------------------------------------------- experts
// moe_gateup_*: h[r,k,o] = silu(gate_e·x[r]) * (up_e·x[r]) for e the k-th
// expert of row r. Grid (ceil(inter/8), rows*K), 8 warps, one output per
// warp; the weight rows of gate and up stream together.
extern "C" __global__ void __launch_bounds__(256) moe_gateup_bf16(float* __restrict__ h, const float* __restrict__ x,
                                                                  const float* __restrict__ sel,
                                                                  const uint64_t* __restrict__ gp,
                                                                  const uint64_t* __restrict__ up, int inter,
                                                                  int hidden, int K, int E) {
    int r = blockIdx.y / K, k = blockIdx.y % K;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= inter) return;
    int e = expertOf(sel, r, K, k, E);
    float g = 0.f, u = 0.f;
    if (e >= 0) {
        const uint4* gw = (const uint4*)((const uint16_t*)gp[e] + (long)o * hidden);
        const uint4* uw = (const uint4*)((const uint16_t*)up[e] + (long)o * hidden);
        const float4* xr = (const float4*)(x + (long)r * hidden);
        int chunks = hidden >> 3;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            uint4 a = ldstream(gw + c), b = ldstream(uw + c);
            float4 x0 = __ldg(xr + 2 * c), x1 = __ldg(xr + 2 * c + 1);
            const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            const uint32_t ua[4] = {a.x, a.y, a.z, a.w}, ub[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                g += __uint_as_float(ua[j] << 16) * xv[2 * j] + __uint_as_float(ua[j] & 0xffff0000u) * xv[2 * j + 1];
                u += __uint_as_float(ub[j] << 16) * xv[2 * j] + __uint_as_float(ub[j] & 0xffff0000u) * xv[2 * j + 1];
            }
        }
        g = warpSum(g);
        u = warpSum(u);
    }
    if (lane == 0) h[((long)r * K + k) * inter + o] = e >= 0 ? silu_mul(g, u) : 0.f;
}

// fp8dot16 is the dot product of 16 FP8 weights with 16 activations.
__device__ __forceinline__ float fp8dot16(uint4 a, const float4* xr) {
    const uint32_t ua[4] = {a.x, a.y, a.z, a.w};
    float t = 0.f;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float4 xv = __ldg(xr + q);
        float w[4];
        fp8x4f(ua[q], w);
        t += w[0] * xv.x + w[1] * xv.y + w[2] * xv.z + w[3] * xv.w;
    }
    return t;
}

// FP8 E4M3 with [b0, b1] block scales (nsc scales per row of blocks):
// hidden % 16 == 0 and b1 % 16 == 0, so a 16-byte chunk has one scale.
extern "C" __global__ void __launch_bounds__(256) moe_gateup_fp8(float* __restrict__ h, const float* __restrict__ x,
                                                                 const float* __restrict__ sel,
                                                                 const uint64_t* __restrict__ gp,
                                                                 const uint64_t* __restrict__ up,
                                                                 const uint64_t* __restrict__ gs,
                                                                 const uint64_t* __restrict__ us, int inter,
                                                                 int hidden, int K, int E, int b0, int b1, int nsc) {
    int r = blockIdx.y / K, k = blockIdx.y % K;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= inter) return;
    int e = expertOf(sel, r, K, k, E);
    float g = 0.f, u = 0.f;
    if (e >= 0) {
        const uint4* gw = (const uint4*)((const uint8_t*)gp[e] + (long)o * hidden);
        const uint4* uw = (const uint4*)((const uint8_t*)up[e] + (long)o * hidden);
        const float* gsr = (const float*)gs[e] + (long)(o / b0) * nsc;
        const float* usr = (const float*)us[e] + (long)(o / b0) * nsc;
        const float4* xr = (const float4*)(x + (long)r * hidden);
        int chunks = hidden >> 4;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            uint4 a = ldstream(gw + c), b = ldstream(uw + c);
            int sb = (c * 16) / b1;
            g += fp8dot16(a, xr + 4 * c) * __ldg(gsr + sb);
            u += fp8dot16(b, xr + 4 * c) * __ldg(usr + sb);
        }
        g = warpSum(g);
        u = warpSum(u);
    }
    if (lane == 0) h[((long)r * K + k) * inter + o] = e >= 0 ? silu_mul(g, u) : 0.f;
}

// moe_down_*: y[r,o] = Σ_k w[r,k] · down_e[o,:]·h[r,k,:]. Grid
// (ceil(hidden/8), rows), one output per warp; the lanes walk the K×inter
// products flattened, so all K experts' loads are in flight together, and
// the sum over k is in registers (no atomics: deterministic).
extern "C" __global__ void __launch_bounds__(256) moe_down_bf16(float* __restrict__ y, const float* __restrict__ h,
                                                                const float* __restrict__ sel,
                                                                const uint64_t* __restrict__ dp, int hidden, int inter,
                                                                int K, int E) {
    int r = blockIdx.y;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= hidden) return;
    int chunks = inter >> 3;
    const float* ws = sel + (long)r * 2 * K + K;
    float acc = 0.f;
#pragma unroll 4
    for (int j = lane; j < K * chunks; j += 32) {
        int k = j / chunks, c = j - k * chunks;
        int e = expertOf(sel, r, K, k, E);
        if (e < 0) continue;
        uint4 a = ldstream((const uint4*)((const uint16_t*)dp[e] + (long)o * inter) + c);
        const float4* hr = (const float4*)(h + ((long)r * K + k) * inter) + 2 * c;
        float4 x0 = hr[0], x1 = hr[1];
        float t = __uint_as_float(a.x << 16) * x0.x + __uint_as_float(a.x & 0xffff0000u) * x0.y +
                  __uint_as_float(a.y << 16) * x0.z + __uint_as_float(a.y & 0xffff0000u) * x0.w +
                  __uint_as_float(a.z << 16) * x1.x + __uint_as_float(a.z & 0xffff0000u) * x1.y +
                  __uint_as_float(a.w << 16) * x1.z + __uint_as_float(a.w & 0xffff0000u) * x1.w;
        acc += ws[k] * t;
    }
    acc = warpSum(acc);
    if (lane == 0) y[(long)r * hidden + o] = acc;
}

extern "C" __global__ void __launch_bounds__(256) moe_down_fp8(float* __restrict__ y, const float* __restrict__ h,
                                                               const float* __restrict__ sel,
                                                               const uint64_t* __restrict__ dp,
                                                               const uint64_t* __restrict__ ds, int hidden, int inter,
                                                               int K, int E, int b0, int b1, int nsc) {
    int r = blockIdx.y;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= hidden) return;
    int chunks = inter >> 4;
    const float* ws = sel + (long)r * 2 * K + K;
    float acc = 0.f;
#pragma unroll 4
    for (int j = lane; j < K * chunks; j += 32) {
        int k = j / chunks, c = j - k * chunks;
        int e = expertOf(sel, r, K, k, E);
        if (e < 0) continue;
        uint4 a = ldstream((const uint4*)((const uint8_t*)dp[e] + (long)o * inter) + c);
        float s = __ldg((const float*)ds[e] + (long)(o / b0) * nsc + (c * 16) / b1);
        const float4* hr = (const float4*)(h + ((long)r * K + k) * inter) + 4 * c;
        acc += ws[k] * (fp8dot16(a, hr) * s);
    }
    acc = warpSum(acc);
    if (lane == 0) y[(long)r * hidden + o] = acc;
}

// moe_add_gated: dst[r,:] += sigmoid(gate[r]) * src[r,:]. The product is
// rounded before the add (no FMA), as the CPU reference does it.
extern "C" __global__ void moe_add_gated(float* dst, const float* src, const float* gate, int rows, int dim) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)rows * dim) return;
    float w = (float)(1.0 / (1.0 + exp(-(double)gate[i / dim])));
    dst[i] = dst[i] + __fmul_rn(w, src[i]);
}
