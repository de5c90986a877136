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
// Activations are float32, weights bf16 (in % 8 == 0) or FP8 E4M3 with
// block scales (in % 16 == 0), one activation row.
// Compiled to compute_90 PTX by `go generate` (decode.go).
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"
#include "kv_elem.cuh"

// The format branches of GroupDot end in returns, which leaves the other
// format's code unreachable in each instantiation: expected.
#pragma nv_diag_suppress 128

__device__ __forceinline__ void pdlWait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    PROBE_WAITED();
}
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

// e4m3x2 converts two FP8 E4M3 values (low byte first) to floats with the
// hardware conversion (exact: every E4M3 value is an f16).
__device__ __forceinline__ float2 e4m3x2(uint32_t v16) {
    uint32_t h;
    uint16_t in = (uint16_t)v16;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(in));
    return __half22float2(*(__half2*)&h);
}

// dot4fp8 is t plus 4 FP8 weights (one word) times 4 activations, by the
// hardware conversion to f16 pairs.
__device__ __forceinline__ float dot4fp8(uint32_t a, float4 v, float t) {
    float2 lo = e4m3x2(a), hi = e4m3x2(a >> 16);
    t = fmaf(lo.x, v.x, t);
    t = fmaf(lo.y, v.y, t);
    t = fmaf(hi.x, v.z, t);
    return fmaf(hi.y, v.w, t);
}

// Wt is a weight as the grouped GEMVs read it: bf16 (8 per 16-byte chunk)
// or FP8 E4M3 (16 per chunk) with float32 block scales [rows/b0, nsc],
// b1 columns per scale block (b1 % 16 == 0: a chunk never straddles one).
struct Wt {
    const uint8_t* p;
    const float* scale;
    int b0, b1, nsc;
};

// GroupDot is one warp's share of a group's R dot products: lane chunks
// first, first+stride, ... Two chunk steps (2R loads) are in flight; the
// first two are issued by prefetch, before the kernel waits for its
// predecessor (weights are never written during a step).
// WF is the weight format: 0 bf16, 1 FP8 E4M3.
template <int WF, bool NORM>
struct GroupDot {
    static constexpr bool FP8 = WF != 0;
    const uint4* w[R];
    const float* srow[R]; // FP8: each row's block scales
    int chunks, stride, c, b1;
    bool sameScale[R]; // FP8: row r's scale row is row r-1's
    uint4 p[2][R]; // the next two steps' weights

    // rows are the group's R row indices (clamped into the matrix): rows
    // [0, split) of m, the others of m2 (SwiGLU's gate and up); an inactive
    // warp (a group past the output) loads nothing.
    __device__ __forceinline__ void prefetch(const Wt& m, const Wt& m2, int split, const int* rows, int in, int first,
                                             int strideChunks, bool active) {
        long rowBytes = FP8 ? in : 2L * in;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const Wt& mr = r < split ? m : m2;
            w[r] = (const uint4*)(mr.p + rows[r] * rowBytes);
            if (FP8) srow[r] = mr.scale + (long)(rows[r] / mr.b0) * mr.nsc;
        }
        b1 = m.b1;
#pragma unroll
        for (int r = 0; r < R; r++) sameScale[r] = FP8 && r > 0 && srow[r] == srow[r - 1];
        chunks = active ? in / (FP8 ? 16 : 8) : 0;
        stride = strideChunks;
        c = first;
        if (!FP8) {
            // bf16: both steps or none (the burst schedule of finish).
            if (c + stride < chunks) {
                load(p[0], c);
                load(p[1], c + stride);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < 2; j++)
            if (c + j * stride < chunks) load(p[j], c + j * stride);
    }

    __device__ __forceinline__ void load(uint4* a, int cc) {
#pragma unroll
        for (int r = 0; r < R; r++) a[r] = ldstream(w[r] + cc);
    }

    __device__ __forceinline__ void step(const uint4* a, const float* __restrict__ x, const float* __restrict__ nw,
                                         int cc, float* acc, float& ss) {
        if (!FP8) {
            X8 v = loadX<NORM>(x, nw, cc, ss);
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] += dot8(a[r], v);
            return;
        }
        // 16 activations: chunks 2cc and 2cc+1 of 8.
        X8 v0 = loadX<NORM>(x, nw, 2 * cc, ss), v1 = loadX<NORM>(x, nw, 2 * cc + 1, ss);
        int col = cc * 16 / b1;
        float sc = 0.f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (!sameScale[r]) sc = __ldg(srow[r] + col);
            // Four independent chains of four (a chain of sixteen would
            // serialise on the FMA latency).
            // (An integer-op decode of the bytes instead of the e4m3x2
            // conversion measured no faster on an H200: 86.3 vs 89.0 tok/s
            // on the Qwen3.5-27B FP8 shape.)
            float t = (dot4fp8(a[r].x, v0.a, 0.f) + dot4fp8(a[r].y, v0.b, 0.f)) +
                      (dot4fp8(a[r].z, v1.a, 0.f) + dot4fp8(a[r].w, v1.b, 0.f));
            acc[r] = fmaf(t, sc, acc[r]);
        }
    }

    // finish streams the rest and leaves the warp's partial sums in acc
    // and (NORM) the sum of squares of the x elements it read in ss. Two
    // load schedules, each the faster one measured on an H200 for its
    // format: bf16 loads two steps, then computes both (Llama-3-8B 227 vs
    // 218 tok/s); FP8, whose arithmetic per byte is heavier, keeps the
    // loads running two steps ahead of it, continuously (ncu had shown its
    // DRAM queue at 43% with the first schedule).
    __device__ __forceinline__ void finish(const float* __restrict__ x, const float* __restrict__ nw, float* acc,
                                           float& ss) {
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
        if (!FP8) {
            if (c + stride < chunks) {
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
            return;
        }
        for (; c < chunks; c += stride) {
            uint4 next[R];
            bool more = c + 2 * stride < chunks;
            if (more) load(next, c + 2 * stride);
            step(p[0], x, nw, c, acc, ss);
#pragma unroll
            for (int r = 0; r < R; r++) {
                p[0][r] = p[1][r];
                p[1][r] = next[r];
            }
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

// groupRows fills rows with the R rows of group base, clamped to the last
// row (the extra results are not stored).
__device__ __forceinline__ void groupRows(int* rows, int base, int out) {
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = min(base + r, out - 1);
}

// NormMulti: y_i = W_i · rmsnorm(x) for up to four matrices sharing the
// input (q, k, v). Blocks [0,n0) do matrix 0, [n0,n1) matrix 1, ...
template <int WF>
__device__ __forceinline__ void normMulti(const float* __restrict__ x, const float* __restrict__ nw, float eps, int in,
                                          int wpr, Wt wt, float* y, int out, int b) {
    __shared__ float red[8][R + 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = 8 / wpr;
    int base = (b * G + warp / wpr) * R;
    int rows[R];
    groupRows(rows, base, out);
    GroupDot<WF, true> d;
    d.prefetch(wt, wt, R, rows, in, (warp % wpr) * 32 + lane, 32 * wpr, base < out);
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

#define NORM_MULTI_ARGS                                                                                             \
    const float *__restrict__ x, const float *__restrict__ nw, float eps, int in, int wpr, int b0, int b1, int nsc, \
        float *y0, const uint8_t *w0, const float *s0, int out0, int n0, float *y1, const uint8_t *w1,               \
        const float *s1, int out1, int n1, float *y2, const uint8_t *w2, const float *s2, int out2, int n2,          \
        float *y3, const uint8_t *w3, const float *s3, int out3
// The block's matrix by if-chain (an indexed array of the parameters would
// live in local memory).
#define NORM_MULTI_CALL(WF)                                                                                        \
    int b = blockIdx.x;                                                                                             \
    if (b < n0)                                                                                                     \
        normMulti<WF>(x, nw, eps, in, wpr, Wt{w0, s0, b0, b1, nsc}, y0, out0, b);                                  \
    else if (b < n1)                                                                                                \
        normMulti<WF>(x, nw, eps, in, wpr, Wt{w1, s1, b0, b1, nsc}, y1, out1, b - n0);                             \
    else if (b < n2)                                                                                                \
        normMulti<WF>(x, nw, eps, in, wpr, Wt{w2, s2, b0, b1, nsc}, y2, out2, b - n1);                             \
    else                                                                                                            \
        normMulti<WF>(x, nw, eps, in, wpr, Wt{w3, s3, b0, b1, nsc}, y3, out3, b - n2)

extern "C" __global__ void __launch_bounds__(256) gemv_norm_multi(NORM_MULTI_ARGS) { PROBE_KERNEL(); NORM_MULTI_CALL(0); }
extern "C" __global__ void __launch_bounds__(256) gemv_norm_multi8(NORM_MULTI_ARGS) { PROBE_KERNEL(); NORM_MULTI_CALL(1); }

// gemvR is y = W · x (ADD: y += W · x, a projection and the residual add;
// y must not alias x). HEADS: gemv_heads' per-head form (below): block
// (head · blocks a head, row), W the heads' matrices stacked, head h of row
// r reading x + r·xRow + h·xHead and writing y + r·yRow + h·yHead.
template <int WF, bool ADD, bool HEADS = false>
__device__ __forceinline__ void gemvR(float* y, const float* __restrict__ x, Wt wt, int out, int in, int wpr,
                                      int heads = 1, long xRow = 0, long xHead = 0, long yRow = 0, long yHead = 0) {
    __shared__ float red[8][R + 1];
    int b = blockIdx.x, h = 0;
    if (HEADS) {
        const int bph = gridDim.x / heads;
        h = blockIdx.x / bph;
        b = blockIdx.x % bph;
        x += blockIdx.y * xRow + h * xHead;
        y += blockIdx.y * yRow + h * yHead;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = 8 / wpr;
    int base = (b * G + warp / wpr) * R;
    int rows[R];
    groupRows(rows, base, out);
    if (HEADS)
#pragma unroll
        for (int r = 0; r < R; r++) rows[r] += h * out;
    GroupDot<WF, false> d;
    d.prefetch(wt, wt, R, rows, in, (warp % wpr) * 32 + lane, 32 * wpr, base < out);
    pdlLaunchDependents();
    pdlWait();
    float acc[R], ss = 0.f;
    d.finish(x, nullptr, acc, ss);
    // ADD's storing threads load y before the block's barrier: the load
    // overlaps the wait for the other warps (as quant_mmv.cuh's qmv).
    const int t = threadIdx.x, g = t / R, r = t % R, o = (b * G + g) * R + r;
    const bool st = t < G * R && o < out;
    const float y0 = ADD && st ? y[o] : 0.f;
    groupSums(red, acc, ss);
    if (st) {
        float v = groupTotal(red, g, wpr, r);
        y[o] = ADD ? y0 + v : v;
    }
}

#define GEMV_ARGS \
    float *y, const float *__restrict__ x, const uint8_t *w, const float *sc, int out, int in, int wpr, int b0, int b1, int nsc
// The bf16 kernels take the compiler's register choice; the FP8 ones are
// held to three blocks per SM (their measured configurations).
#define GEMV_KERNEL(NAME, WF, ADD, BOUNDS)                                                 \
    extern "C" __global__ void BOUNDS NAME(GEMV_ARGS) { PROBE_KERNEL();                                    \
        gemvR<WF, ADD>(y, x, Wt{w, sc, b0, b1, nsc}, out, in, wpr);                        \
    }
GEMV_KERNEL(gemv_add, 0, true, __launch_bounds__(256))
GEMV_KERNEL(gemv_r4, 0, false, __launch_bounds__(256))
GEMV_KERNEL(gemv_add8, 1, true, __launch_bounds__(256, 3))
GEMV_KERNEL(gemv_r48, 1, false, __launch_bounds__(256, 3))

// gemv_heads: y_h = W_h · x_h for the heads of a per-head projection
// (DeepSeek MLA's W_UK_hᵀ and W_UV_h), all heads in one launch: gemvR's
// HEADS form (16-byte aligned offsets). Grid (heads × blocks a head, rows).
#define GEMV_HEADS_ARGS                                                                                        \
    float *y, const float *__restrict__ x, const uint8_t *w, const float *sc, int out, int in, int wpr, int b0, \
        int b1, int nsc, int heads, long xRow, long xHead, long yRow, long yHead
extern "C" __global__ void __launch_bounds__(256) gemv_heads(GEMV_HEADS_ARGS) { PROBE_KERNEL();
    gemvR<0, false, true>(y, x, Wt{w, sc, b0, b1, nsc}, out, in, wpr, heads, xRow, xHead, yRow, yHead);
}
extern "C" __global__ void __launch_bounds__(256) gemv_heads8(GEMV_HEADS_ARGS) { PROBE_KERNEL();
    gemvR<1, false, true>(y, x, Wt{w, sc, b0, b1, nsc}, out, in, wpr, heads, xRow, xHead, yRow, yHead);
}

// normSwiGLU: act = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)). A group is
// gate rows o, o+1 and up rows o, o+1, so the activation is formed where
// both dots end.
template <int WF>
__device__ __forceinline__ void normSwiGLU(float* act, const float* __restrict__ x, const float* __restrict__ nw,
                                           float eps, Wt gate, Wt up, int out, int in, int wpr) {
    __shared__ float red[8][R + 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = 8 / wpr;
    int base = (blockIdx.x * G + warp / wpr) * (R / 2);
    int rows[R];
    // Rows: gate o, o+1, then up o, o+1 (one GroupDot of R rows: two would
    // double the registers).
#pragma unroll
    for (int j = 0; j < R / 2; j++) rows[j] = rows[R / 2 + j] = min(base + j, out - 1);
    GroupDot<WF, true> d;
    d.prefetch(gate, up, R / 2, rows, in, (warp % wpr) * 32 + lane, 32 * wpr, base < out);
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

#define SWIGLU_ARGS                                                                                              \
    float *act, const float *__restrict__ x, const float *__restrict__ nw, float eps, const uint8_t *wg,         \
        const float *sg, const uint8_t *wu, const float *su, int out, int in, int wpr, int b0, int b1, int nsc
// The bf16 one is held to four blocks per SM (64 registers, no spills):
// measured on an H200 against the compiler's 70 (three blocks), Llama-3-8B
// decode 248.4 against 240.3-240.9 tok/s at 512 tokens, 197.8 against 192
// at 8000, TP2 349.5 against 321.6: the gate/up GEMV is a third of the
// step, and a fourth block per SM keeps more of its loads in flight.
extern "C" __global__ void __launch_bounds__(256, 4) gemv_norm_swiglu(SWIGLU_ARGS) { PROBE_KERNEL();
    normSwiGLU<0>(act, x, nw, eps, Wt{wg, sg, b0, b1, nsc}, Wt{wu, su, b0, b1, nsc}, out, in, wpr);
}
extern "C" __global__ void __launch_bounds__(256, 3) gemv_norm_swiglu8(SWIGLU_ARGS) { PROBE_KERNEL();
    normSwiGLU<1>(act, x, nw, eps, Wt{wg, sg, b0, b1, nsc}, Wt{wu, su, b0, b1, nsc}, out, in, wpr);
}

// ropePair rotates pair j of the head vector sv (shared memory) by the
// factors c, sn: NeoX pairs (j, j+half) or interleaved ones (2j, 2j+1).
__device__ __forceinline__ void ropePair(float* sv, int j, int half, int neox, float c, float sn) {
    int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
    float a = sv[i0], b = sv[i1];
    sv[i0] = a * c - b * sn;
    sv[i1] = b * c + a * sn;
}

// ropePairs rotates the pairs j = first, first+step, ... < half of sv by
// position p, cos and sin times scale.
__device__ __forceinline__ void ropePairs(float* sv, float p, const float* invf, int half, int neox, float scale,
                                          int first, int step) {
    for (int j = first; j < half; j += step) {
        float ang = p * invf[j];
        ropePair(sv, j, half, neox, cosf(ang) * scale, sinf(ang) * scale);
    }
}

// rope_store: grid (heads + kvh, rows), 128 threads. Block h < heads is
// query head h, the others key head h-heads: optional per-head RMSNorm
// (nq/nk, hd elements), rotary embedding (as the rope kernel), written back
// in place; key heads are also stored in the K cache at the row's slot,
// with the matching value head in the V cache. hd ≤ 256; K and V rows are
// kvh*hd wide.
// KT is the cache's element type (kv_elem.cuh): rope_store and
// rope_store_h.
template <class KT>
__device__ __forceinline__ void ropeStore(float* q, float* k, const float* v, const float* nq, const float* nk,
                                          float eps, KT* K, KT* V, const int* pos, const int* slots,
                                          const float* invf, int heads, int kvh, int hd, int half, int neox,
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
    ropePairs(sv, (float)pos[row], invf, half, neox, scale, threadIdx.x, blockDim.x);
    __syncthreads();
    long kw = (long)kvh * hd;
    long slot = isq ? 0 : slots[row];
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        vec[i] = sv[i];
        if (!isq) {
            kvSt(K + slot * kw + (long)kh * hd + i, sv[i]);
            kvSt(V + slot * kw + (long)kh * hd + i, v[(long)row * kw + (long)kh * hd + i]);
        }
    }
}
#define ROPE_STORE_KERNEL(NAME, KT)                                                                                \
    extern "C" __global__ void __launch_bounds__(128)                                                             \
        NAME(float* q, float* k, const float* v, const float* nq, const float* nk, float eps, KT* K, KT* V,      \
             const int* pos, const int* slots, const float* invf, int heads, int kvh, int hd, int half, int neox, \
             float scale) {                                                                                       \
        PROBE_KERNEL();                                                                                           \
        ropeStore(q, k, v, nq, nk, eps, K, V, pos, slots, invf, heads, kvh, hd, half, neox, scale);               \
    }
ROPE_STORE_KERNEL(rope_store, float)
ROPE_STORE_KERNEL(rope_store_h, __half)

#include "decode_attn.cuh"
