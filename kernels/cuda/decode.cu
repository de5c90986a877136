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

// A warp computes R weight rows at once (R = 4) against the same chunks of
// the activation, so each x element it loads (and the norm weight) serves
// R rows: a lane reads 32 bytes of float32 x per 16-byte chunk of bf16
// weights, and with one row per warp those L1 reads, not DRAM, limited the
// GEMV. The R rows of a warp are a "group"; wpr warps share a group's
// columns (long rows, short outputs), 8/wpr groups per 256-thread block.
#define R 4

struct X8 {
    float4 a, b;
};

// loadX is the activation of chunk c (8 elements), times the norm weight
// when NORM, adding the squares of the raw x to ss: the warps of a group
// read all of x exactly once, so the norm's sum of squares comes from the
// very loads the dot needs and no pass over x precedes the streaming. The
// norm's 1/rms factor is common to a row, so it is applied to the sum.
template <bool NORM>
__device__ __forceinline__ X8 loadX(const float* __restrict__ x, const float* __restrict__ nw, int c, float& ss) {
    const float4* x4 = (const float4*)x;
    X8 v = {__ldg(x4 + 2 * c), __ldg(x4 + 2 * c + 1)};
    if (NORM) {
        ss += v.a.x * v.a.x + v.a.y * v.a.y + v.a.z * v.a.z + v.a.w * v.a.w + v.b.x * v.b.x + v.b.y * v.b.y +
              v.b.z * v.b.z + v.b.w * v.b.w;
        const float4* n4 = (const float4*)nw;
        float4 n0 = __ldg(n4 + 2 * c), n1 = __ldg(n4 + 2 * c + 1);
        v.a = make_float4(v.a.x * n0.x, v.a.y * n0.y, v.a.z * n0.z, v.a.w * n0.w);
        v.b = make_float4(v.b.x * n1.x, v.b.y * n1.y, v.b.z * n1.z, v.b.w * n1.w);
    }
    return v;
}

// dot8 is 8 bf16 weights (one 16-byte chunk) times the activation.
__device__ __forceinline__ float dot8(uint4 a, const X8& v) {
    return __uint_as_float(a.x << 16) * v.a.x + __uint_as_float(a.x & 0xffff0000u) * v.a.y +
           __uint_as_float(a.y << 16) * v.a.z + __uint_as_float(a.y & 0xffff0000u) * v.a.w +
           __uint_as_float(a.z << 16) * v.b.x + __uint_as_float(a.z & 0xffff0000u) * v.b.y +
           __uint_as_float(a.w << 16) * v.b.z + __uint_as_float(a.w & 0xffff0000u) * v.b.w;
}

// GroupDot is one warp's share of a group's R dot products: lane chunks
// first, first+stride, ... Two chunk steps (2R loads) are in flight; the
// first two are issued by prefetch, before the kernel waits for its
// predecessor (weights are never written during a step).
template <bool NORM>
struct GroupDot {
    const uint4* w[R];
    int chunks, stride, c;
    uint4 p[2][R];
    bool pre;

    // rows are the group's R weight rows (in bf16 elements each); an
    // inactive warp (a group past the output) loads nothing.
    __device__ __forceinline__ void prefetch(const uint16_t* const* rows, int in, int first, int strideChunks,
                                             bool active) {
#pragma unroll
        for (int r = 0; r < R; r++) w[r] = (const uint4*)rows[r];
        chunks = active ? in >> 3 : 0;
        stride = strideChunks;
        c = first;
        pre = c + stride < chunks;
        if (pre) {
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int r = 0; r < R; r++) p[j][r] = ldstream(w[r] + c + j * stride);
        }
    }

    __device__ __forceinline__ void step(const uint4* a, const float* __restrict__ x, const float* __restrict__ nw,
                                         int cc, float* acc, float& ss) {
        X8 v = loadX<NORM>(x, nw, cc, ss);
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] += dot8(a[r], v);
    }

    // finish streams the rest and leaves the warp's partial sums in acc
    // and (NORM) the sum of squares of the x elements it read in ss.
    __device__ __forceinline__ void finish(const float* __restrict__ x, const float* __restrict__ nw, float* acc,
                                           float& ss) {
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
        if (pre) {
            step(p[0], x, nw, c, acc, ss);
            step(p[1], x, nw, c + stride, acc, ss);
            c += 2 * stride;
        }
        for (; c + stride < chunks; c += 2 * stride) {
            uint4 a[2][R];
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int r = 0; r < R; r++) a[j][r] = ldstream(w[r] + c + j * stride);
            step(a[0], x, nw, c, acc, ss);
            step(a[1], x, nw, c + stride, acc, ss);
        }
        if (c < chunks) {
            uint4 a[R];
#pragma unroll
            for (int r = 0; r < R; r++) a[r] = ldstream(w[r] + c);
            step(a, x, nw, c, acc, ss);
        }
    }
};

// groupSums leaves each warp's R sums and its sum of squares in red[warp]
// (every thread may read them after the call).
__device__ __forceinline__ void groupSums(float (*red)[R + 1], const float* acc, float ss) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; r++) {
        float s = warpSum(acc[r]);
        if (lane == 0) red[warp][r] = s;
    }
    ss = warpSum(ss);
    if (lane == 0) red[warp][R] = ss;
    __syncthreads();
}

// groupTotal is entry r of group g summed over its wpr warps.
__device__ __forceinline__ float groupTotal(float (*red)[R + 1], int g, int wpr, int r) {
    float t = 0.f;
    for (int i = 0; i < wpr; i++) t += red[g * wpr + i][r];
    return t;
}

// invRms is rsqrt(mean(x²) + eps) from the sum of squares of x.
__device__ __forceinline__ float invRms(float ss, int in, float eps) { return rsqrtf(ss / in + eps); }

// groupRows fills rows with the R rows of group base (clamped to the last
// row: the extra results are not stored).
__device__ __forceinline__ void groupRows(const uint16_t** rows, const uint16_t* w, int base, int out, int in) {
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = w + (long)min(base + r, out - 1) * in;
}

// gemv_norm_multi: y_i = W_i · rmsnorm(x) for up to four matrices sharing
// the input (q, k, v). Blocks [0,n0) do matrix 0, [n0,n1) matrix 1, ...
extern "C" __global__ void __launch_bounds__(256) gemv_norm_multi(
    const float* __restrict__ x, const float* __restrict__ nw, float eps, int in, int wpr, float* y0,
    const uint16_t* w0, int out0, int n0, float* y1, const uint16_t* w1, int out1, int n1, float* y2,
    const uint16_t* w2, int out2, int n2, float* y3, const uint16_t* w3, int out3) {
    __shared__ float red[8][R + 1];
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
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = 8 / wpr;
    int base = (b * G + warp / wpr) * R;
    const uint16_t* rows[R];
    groupRows(rows, w, base, out, in);
    GroupDot<true> d;
    d.prefetch(rows, in, (warp % wpr) * 32 + lane, 32 * wpr, base < out);
    pdlLaunchDependents();
    pdlWait();
    float acc[R], ss = 0.f;
    d.finish(x, nw, acc, ss);
    groupSums(red, acc, ss);
    int t = threadIdx.x;
    if (t < G * R) {
        int g = t / R, r = t % R, o = (b * G + g) * R + r;
        if (o < out) y[o] = groupTotal(red, g, wpr, r) * invRms(groupTotal(red, g, wpr, R), in, eps);
    }
}

// gemvR is y = W · x (ADD: y += W · x, a projection and the residual add;
// y must not alias x).
template <bool ADD>
__device__ __forceinline__ void gemvR(float* y, const float* __restrict__ x, const uint16_t* w, int out, int in,
                                      int wpr) {
    __shared__ float red[8][R + 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = 8 / wpr;
    int base = (blockIdx.x * G + warp / wpr) * R;
    const uint16_t* rows[R];
    groupRows(rows, w, base, out, in);
    GroupDot<false> d;
    d.prefetch(rows, in, (warp % wpr) * 32 + lane, 32 * wpr, base < out);
    pdlLaunchDependents();
    pdlWait();
    float acc[R], ss = 0.f;
    d.finish(x, nullptr, acc, ss);
    groupSums(red, acc, ss);
    int t = threadIdx.x;
    if (t < G * R) {
        int g = t / R, r = t % R, o = (blockIdx.x * G + g) * R + r;
        if (o < out) {
            float v = groupTotal(red, g, wpr, r);
            y[o] = ADD ? y[o] + v : v;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) gemv_add(float* y, const float* __restrict__ x, const uint16_t* w,
                                                           int out, int in, int wpr) {
    gemvR<true>(y, x, w, out, in, wpr);
}

extern "C" __global__ void __launch_bounds__(256) gemv_r4(float* y, const float* __restrict__ x, const uint16_t* w,
                                                          int out, int in, int wpr) {
    gemvR<false>(y, x, w, out, in, wpr);
}

// gemv_norm_swiglu: act = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)). A
// group is gate rows o, o+1 and up rows o, o+1, so the activation is formed
// where both dots end.
extern "C" __global__ void __launch_bounds__(256) gemv_norm_swiglu(float* act, const float* __restrict__ x,
                                                                   const float* __restrict__ nw, float eps,
                                                                   const uint16_t* wg, const uint16_t* wu, int out,
                                                                   int in, int wpr) {
    __shared__ float red[8][R + 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = 8 / wpr;
    int base = (blockIdx.x * G + warp / wpr) * (R / 2);
    const uint16_t* rows[R];
#pragma unroll
    for (int j = 0; j < R / 2; j++) {
        long o = min(base + j, out - 1);
        rows[j] = wg + o * in;
        rows[R / 2 + j] = wu + o * in;
    }
    GroupDot<true> d;
    d.prefetch(rows, in, (warp % wpr) * 32 + lane, 32 * wpr, base < out);
    pdlLaunchDependents();
    pdlWait();
    float acc[R], ss = 0.f;
    d.finish(x, nw, acc, ss);
    groupSums(red, acc, ss);
    int t = threadIdx.x;
    if (t < G * (R / 2)) {
        int g = t / (R / 2), j = t % (R / 2), o = (blockIdx.x * G + g) * (R / 2) + j;
        if (o < out) {
            float inv = invRms(groupTotal(red, g, wpr, R), in, eps);
            float gv = groupTotal(red, g, wpr, j) * inv, uv = groupTotal(red, g, wpr, R / 2 + j) * inv;
            act[o] = gv / (1.f + expf(-gv)) * uv;
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
