// Fused decode-step kernels (kernels.FusedOps): a batch-1 decode step is
// a few hundred kernels, and what keeps it from the bandwidth roofline is
// each kernel's fixed cost, not its work. These kernels fold the small ops
// (RMSNorm, SwiGLU, the residual add, q/k norm + RoPE + KV store) into the
// GEMVs and one another, and take part in programmatic dependent launch
// (PDL): launched with the programmatic-serialization attribute, a kernel
// starts while its predecessor drains, streams its first weights (which no
// kernel of a step writes), and only then waits for the predecessor's
// results (griddepcontrol.wait). Launched without the attribute the wait
// returns at once, so the kernels are correct either way.
//
// Activations are float32, weights bf16 (in % 8 == 0), one activation row.
// Compiled to compute_90 PTX by `go generate` (decode.go).
#include <stdint.h>

#include "common.cuh"

__device__ __forceinline__ void pdlWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdlLaunchDependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// chunkDot is one 16-byte chunk c (8 bf16 weights) against the activation
// x[8c..8c+8), times the norm weight when NORM. The norm's 1/rms factor is
// common to the whole row, so it is applied to the finished sum; its sum
// of squares is gathered on the way (ss), from the very x elements the
// dot reads: the warps of a row together read all of x once, so no pass
// over x precedes the streaming.
template <bool NORM>
__device__ __forceinline__ float chunkDot(uint4 a, const float* __restrict__ x, const float* __restrict__ nw, int c,
                                          float& ss) {
    const float4* x4 = (const float4*)x;
    float4 x0 = __ldg(x4 + 2 * c), x1 = __ldg(x4 + 2 * c + 1);
    if (NORM) {
        ss += x0.x * x0.x + x0.y * x0.y + x0.z * x0.z + x0.w * x0.w + x1.x * x1.x + x1.y * x1.y + x1.z * x1.z +
              x1.w * x1.w;
        const float4* n4 = (const float4*)nw;
        float4 n0 = __ldg(n4 + 2 * c), n1 = __ldg(n4 + 2 * c + 1);
        x0 = make_float4(x0.x * n0.x, x0.y * n0.y, x0.z * n0.z, x0.w * n0.w);
        x1 = make_float4(x1.x * n1.x, x1.y * n1.y, x1.z * n1.z, x1.w * n1.w);
    }
    return __uint_as_float(a.x << 16) * x0.x + __uint_as_float(a.x & 0xffff0000u) * x0.y +
           __uint_as_float(a.y << 16) * x0.z + __uint_as_float(a.y & 0xffff0000u) * x0.w +
           __uint_as_float(a.z << 16) * x1.x + __uint_as_float(a.z & 0xffff0000u) * x1.y +
           __uint_as_float(a.w << 16) * x1.z + __uint_as_float(a.w & 0xffff0000u) * x1.w;
}

// RowDot is one warp's share of a weight row's dot product: lane chunks
// first, first+stride, ... The first four loads are issued by prefetch,
// before the kernel waits for its predecessor.
template <bool NORM>
struct RowDot {
    const uint4* w;
    int chunks, stride, c;
    uint4 p[4];
    bool pre;

    __device__ __forceinline__ void prefetch(const uint16_t* row, int in, int first, int strideChunks, bool valid) {
        w = (const uint4*)row;
        chunks = in >> 3;
        stride = strideChunks;
        c = first;
        pre = valid && c + 3 * stride < chunks;
        if (pre) {
#pragma unroll
            for (int j = 0; j < 4; j++) p[j] = ldstream(w + c + j * stride);
        }
    }

    // finish streams the rest of the row; ss collects the sum of squares
    // of the x elements read (NORM).
    __device__ __forceinline__ float finish(const float* __restrict__ x, const float* __restrict__ nw, bool valid,
                                            float& ss) {
        float acc = 0.f;
        if (!valid) return acc;
        if (pre) {
            acc += chunkDot<NORM>(p[0], x, nw, c, ss) + chunkDot<NORM>(p[1], x, nw, c + stride, ss) +
                   chunkDot<NORM>(p[2], x, nw, c + 2 * stride, ss) + chunkDot<NORM>(p[3], x, nw, c + 3 * stride, ss);
            c += 4 * stride;
        }
        for (; c + 3 * stride < chunks; c += 4 * stride) {
            uint4 a0 = ldstream(w + c), a1 = ldstream(w + c + stride);
            uint4 a2 = ldstream(w + c + 2 * stride), a3 = ldstream(w + c + 3 * stride);
            acc += chunkDot<NORM>(a0, x, nw, c, ss) + chunkDot<NORM>(a1, x, nw, c + stride, ss) +
                   chunkDot<NORM>(a2, x, nw, c + 2 * stride, ss) + chunkDot<NORM>(a3, x, nw, c + 3 * stride, ss);
        }
        for (; c < chunks; c += stride) acc += chunkDot<NORM>(ldstream(w + c), x, nw, c, ss);
        return acc;
    }
};

// rowSums leaves each warp's total of v in red[warp] (every thread may
// read them after the call).
__device__ __forceinline__ void rowSums(float* red, float v) {
    float s = warpSum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
}

// invRms is rsqrt(mean(x²) + eps) from the sum of squares of x.
__device__ __forceinline__ float invRms(float ss, int in, float eps) { return rsqrtf(ss / in + eps); }

// gemv_norm_multi: y_i = W_i · rmsnorm(x) for up to four matrices sharing
// the input (q, k, v). Blocks [0,n0) do matrix 0, [n0,n1) matrix 1, ...;
// wpr warps per output row, 8/wpr rows per block.
extern "C" __global__ void __launch_bounds__(256) gemv_norm_multi(
    const float* __restrict__ x, const float* __restrict__ nw, float eps, int in, int wpr, float* y0,
    const uint16_t* w0, int out0, int n0, float* y1, const uint16_t* w1, int out1, int n1, float* y2,
    const uint16_t* w2, int out2, int n2, float* y3, const uint16_t* w3, int out3) {
    __shared__ float red[8], red2[8];
    int b = blockIdx.x;
    float* y;
    const uint16_t* w;
    int out;
    if (b < n0) {
        y = y0, w = w0, out = out0;
    } else if (b < n1) {
        y = y1, w = w1, out = out1, b -= n0;
    } else if (b < n2) {
        y = y2, w = w2, out = out2, b -= n1;
    } else {
        y = y3, w = w3, out = out3, b -= n2;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int o = b * (8 / wpr) + warp / wpr;
    bool valid = o < out;
    RowDot<true> d;
    d.prefetch(w + (long)(valid ? o : 0) * in, in, (warp % wpr) * 32 + lane, 32 * wpr, valid);
    pdlLaunchDependents();
    pdlWait();
    float ss = 0.f;
    float dot = d.finish(x, nw, valid, ss);
    rowSums(red2, ss);
    rowSums(red, dot);
    if (lane == 0 && warp % wpr == 0 && valid) {
        float t = 0.f, q = 0.f;
        for (int i = 0; i < wpr; i++) t += red[warp + i], q += red2[warp + i];
        y[o] = t * invRms(q, in, eps);
    }
}

// gemv_add: acc += W · x (a projection and the residual add; acc must not
// alias x).
extern "C" __global__ void __launch_bounds__(256) gemv_add(float* acc, const float* __restrict__ x,
                                                           const uint16_t* w, int out, int in, int wpr) {
    __shared__ float red[8];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int o = blockIdx.x * (8 / wpr) + warp / wpr;
    bool valid = o < out;
    RowDot<false> d;
    d.prefetch(w + (long)(valid ? o : 0) * in, in, (warp % wpr) * 32 + lane, 32 * wpr, valid);
    pdlLaunchDependents();
    pdlWait();
    float ss = 0.f;
    rowSums(red, d.finish(x, nullptr, valid, ss));
    if (lane == 0 && warp % wpr == 0 && valid) {
        float t = 0.f;
        for (int i = 0; i < wpr; i++) t += red[warp + i];
        acc[o] += t;
    }
}

// gemv_norm_swiglu: act = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)). A
// block computes P = 4/wpr outputs: warps [0, 4) do their gate rows and
// warps [4, 8) the same up rows, so the activation is formed in the block
// (wpr ≤ 4).
extern "C" __global__ void __launch_bounds__(256) gemv_norm_swiglu(float* act, const float* __restrict__ x,
                                                                   const float* __restrict__ nw, float eps,
                                                                   const uint16_t* wg, const uint16_t* wu, int out,
                                                                   int in, int wpr) {
    __shared__ float red[8], red2[8];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int P = 4 / wpr, v = warp / wpr;
    int o = blockIdx.x * P + v % P;
    bool valid = o < out;
    const uint16_t* w = v < P ? wg : wu;
    RowDot<true> d;
    d.prefetch(w + (long)(valid ? o : 0) * in, in, (warp % wpr) * 32 + lane, 32 * wpr, valid);
    pdlLaunchDependents();
    pdlWait();
    float ss = 0.f;
    float dot = d.finish(x, nw, valid, ss);
    rowSums(red2, ss);
    rowSums(red, dot);
    if ((int)threadIdx.x < P) {
        int oo = blockIdx.x * P + threadIdx.x;
        if (oo < out) {
            float g = 0.f, u = 0.f, q = 0.f;
            for (int i = 0; i < wpr; i++) {
                g += red[threadIdx.x * wpr + i];
                u += red[(P + threadIdx.x) * wpr + i];
                q += red2[threadIdx.x * wpr + i]; // the gate warps read all of x
            }
            float inv = invRms(q, in, eps);
            g *= inv;
            u *= inv;
            act[oo] = g / (1.f + expf(-g)) * u;
        }
    }
}

// rope_store: grid (heads + kvh, rows), 128 threads. Block h < heads is
// query head h, the others key head h-heads: optional per-head RMSNorm
// (nq/nk, hd elements), rotary embedding (as the rope kernel), written back
// in place; key heads are also stored in the K cache at the row's slot,
// with the matching value head in the V cache. hd ≤ 256; K and V rows are
// kvh*hd wide.
extern "C" __global__ void __launch_bounds__(128) rope_store(float* q, float* k, const float* v, const float* nq,
                                                             const float* nk, float eps, float* K, float* V,
                                                             const int* pos, const int* slots, const float* invf,
                                                             int heads, int kvh, int hd, int half, int neox,
                                                             float scale) {
    __shared__ float sv[256];
    __shared__ float red[4];
    pdlWait();
    int h = blockIdx.x, row = blockIdx.y;
    bool isq = h < heads;
    int kh = h - heads;
    float* vec = isq ? q + ((long)row * heads + h) * hd : k + ((long)row * kvh + kh) * hd;
    const float* nw = isq ? nq : nk;
    float s = 0.f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float e = vec[i];
        sv[i] = e;
        s += e * e;
    }
    if (nw != nullptr) {
        s = warpSum(s);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
        __syncthreads();
        float inv = rsqrtf((red[0] + red[1] + red[2] + red[3]) / hd + eps);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) sv[i] = sv[i] * inv * nw[i];
    }
    __syncthreads();
    float p = (float)pos[row];
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        float ang = p * invf[j];
        float c = cosf(ang) * scale, sn = sinf(ang) * scale;
        int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
        float a = sv[i0], b = sv[i1];
        sv[i0] = a * c - b * sn;
        sv[i1] = b * c + a * sn;
    }
    __syncthreads();
    long kw = (long)kvh * hd;
    long slot = isq ? 0 : slots[row];
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        vec[i] = sv[i];
        if (!isq) {
            K[slot * kw + (long)kh * hd + i] = sv[i];
            V[slot * kw + (long)kh * hd + i] = v[(long)row * kw + (long)kh * hd + i];
        }
    }
}
