// Kernels of the CUDA backend. Activations are float32; weights stay in
// their stored format (bf16, f16, f32, FP8 E4M3 with block scales) and are
// converted in registers. Compiled to compute_90 PTX by `go generate`
// (see gen.go); the PTX is committed and embedded.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"
#include "tc.cuh"

// Weight dtypes, as kernels.DType numbers them.
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_F8 3

// Weight view: generic element access for any dtype. Kernels take it as
// flat parameters (WPARAMS) so that every launch argument is one word.
struct W {
    const void* p;
    const float* scale;
    int dt, b0, b1, nsc; // FP8: scale block rows, cols, scales per row of blocks
};

#define WPARAMS const void *wp, const float *wsc, int wdt, int wb0, int wb1, int wnsc
#define WMAKE W w = {wp, wsc, wdt, wb0, wb1, wnsc}

__device__ __forceinline__ float wload(const W& w, long r, long c, long cols) {
    long i = r * cols + c;
    switch (w.dt) {
    case DT_F32: return ((const float*)w.p)[i];
    case DT_F16: return __half2float(((const __half*)w.p)[i]);
    case DT_BF16: return bf16f(((const uint16_t*)w.p)[i]);
    default: return fp8f(((const uint8_t*)w.p)[i]) * w.scale[(r / w.b0) * w.nsc + c / w.b1];
    }
}

// ---------------------------------------------------------------- Embed
// Row blockIdx.x, its columns spread over gridDim.y blocks: with one block
// a row, a thread's loads of a 5120-column row ran one after another (each
// store waits for its load), ~8 µs at the start of every Qwen3.5-27B decode
// step (probe); a load or two a thread instead.
extern "C" __global__ void embed(float* dst, WPARAMS, const int* ids, int cols) { PROBE_KERNEL();
    WMAKE;
    int row = blockIdx.x;
    long id = ids[row];
    for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < cols; c += gridDim.y * blockDim.x)
        dst[(long)row * cols + c] = wload(w, id, c, cols);
}

// ---------------------------------------------------------------- GEMV
// wpr warps per output row (1, 2, 4 or 8; more for short outputs so the
// grid still fills the GPU), NR activation rows at once (NR small): every
// lane streams 16-byte chunks of the weight row, four loads in flight,
// bypassing L1 (the weights are read once), and keeps NR fp32 sums.
// bf16: in % 8 == 0. 8 warps (256 threads) per block.
template <int NR>
__device__ __forceinline__ void bf16dot(float* acc, uint4 a, const float* __restrict__ x, int in, int c) {
    float wa[8];
    const uint32_t ua[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        wa[2 * j] = __uint_as_float(ua[j] << 16);
        wa[2 * j + 1] = __uint_as_float(ua[j] & 0xffff0000u);
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const float4* xr = (const float4*)(x + (long)r * in);
        float4 x0 = __ldg(xr + 2 * c), x1 = __ldg(xr + 2 * c + 1);
        acc[r] += wa[0] * x0.x + wa[1] * x0.y + wa[2] * x0.z + wa[3] * x0.w + wa[4] * x1.x + wa[5] * x1.y +
                  wa[6] * x1.z + wa[7] * x1.w;
    }
}

// reduceRows sums each row's partial sums over its wpr warps and stores them.
template <int NR>
__device__ __forceinline__ void reduceRows(float* y, float* acc, int o, int out, int wpr) {
    __shared__ float red[8][NR];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float s = warpSum(acc[r]);
        if (lane == 0) red[warp][r] = s;
    }
    __syncthreads();
    if (warp % wpr == 0 && lane < NR && o < out) {
        float s = 0.f;
        for (int w = 0; w < wpr; w++) s += red[warp + w][lane];
        y[(long)lane * out + o] = s;
    }
}

template <int NR>
__device__ __forceinline__ void gemv_bf16(float* __restrict__ y, const float* __restrict__ x,
                                          const uint16_t* __restrict__ w, int out, int in, int wpr, int blk) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int o = blk * (8 / wpr) + warp / wpr;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.f;
    if (o < out) {
        const uint4* wr = (const uint4*)(w + (long)o * in);
        int chunks = in >> 3, stride = 32 * wpr;
        int c = (warp % wpr) * 32 + lane;
        for (; c + 3 * stride < chunks; c += 4 * stride) {
            uint4 a0 = ldstream(wr + c), a1 = ldstream(wr + c + stride);
            uint4 a2 = ldstream(wr + c + 2 * stride), a3 = ldstream(wr + c + 3 * stride);
            bf16dot<NR>(acc, a0, x, in, c);
            bf16dot<NR>(acc, a1, x, in, c + stride);
            bf16dot<NR>(acc, a2, x, in, c + 2 * stride);
            bf16dot<NR>(acc, a3, x, in, c + 3 * stride);
        }
        for (; c < chunks; c += stride) bf16dot<NR>(acc, ldstream(wr + c), x, in, c);
    }
    reduceRows<NR>(y, acc, o, out, wpr);
}

// FP8 E4M3: 16 weights per 16-byte chunk; in % 16 == 0 and b1 % 16 == 0, so
// a chunk never straddles a scale block.
template <int NR>
__device__ __forceinline__ void gemv_fp8(float* __restrict__ y, const float* __restrict__ x,
                                         const uint8_t* __restrict__ w, const float* __restrict__ scale,
                                         int out, int in, int b0, int b1, int nsc, int wpr) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int o = blockIdx.x * (8 / wpr) + warp / wpr;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.f;
    if (o < out) {
        const uint4* wr = (const uint4*)(w + (long)o * in);
        const float* sr = scale + (long)(o / b0) * nsc;
        int chunks = in >> 4, stride = 32 * wpr;
        for (int c = (warp % wpr) * 32 + lane; c < chunks; c += stride) {
            uint4 a = ldstream(wr + c);
            float s = __ldg(sr + (c * 16) / b1);
            const uint32_t ua[4] = {a.x, a.y, a.z, a.w};
            float wv[16];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float f[4];
                fp8x4f(ua[j], f);
#pragma unroll
                for (int b = 0; b < 4; b++) wv[4 * j + b] = f[b];
            }
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const float4* xr = (const float4*)(x + (long)r * in) + 4 * c;
                float t = 0.f;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float4 xv = __ldg(xr + q);
                    t += wv[4 * q] * xv.x + wv[4 * q + 1] * xv.y + wv[4 * q + 2] * xv.z + wv[4 * q + 3] * xv.w;
                }
                acc[r] += t * s;
            }
        }
    }
    reduceRows<NR>(y, acc, o, out, wpr);
}

#define GEMV(N)                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) gemv_bf16_##N(float* y, const float* x,             \
                                                                    const uint16_t* w, int out, int in, int wpr) { PROBE_KERNEL(); \
        gemv_bf16<N>(y, x, w, out, in, wpr, blockIdx.x);                                                                   \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) gemv_fp8_##N(float* y, const float* x, const uint8_t* w, \
                                                                   const float* scale, int out, int in,    \
                                                                   int b0, int b1, int nsc, int wpr) { PROBE_KERNEL();     \
        gemv_fp8<N>(y, x, w, scale, out, in, b0, b1, nsc, wpr);                                                 \
    }
GEMV(1)
GEMV(2)
GEMV(3)
GEMV(4)
GEMV(5)
GEMV(6)
GEMV(7)
GEMV(8)

// Up to four single-row bf16 GEMVs that share their input x (q/k/v, or
// gate/up) in one launch: blocks [0,n0) do the first matrix, [n0,n1) the
// second, and so on.
extern "C" __global__ void __launch_bounds__(256) gemv_bf16_multi(const float* x, int in, int wpr,
    float* y0, const uint16_t* w0, int out0, int n0, float* y1, const uint16_t* w1, int out1, int n1,
    float* y2, const uint16_t* w2, int out2, int n2, float* y3, const uint16_t* w3, int out3) { PROBE_KERNEL();
    int b = blockIdx.x;
    if (b < n0) gemv_bf16<1>(y0, x, w0, out0, in, wpr, b);
    else if (b < n1) gemv_bf16<1>(y1, x, w1, out1, in, wpr, b - n0);
    else if (b < n2) gemv_bf16<1>(y2, x, w2, out2, in, wpr, b - n1);
    else gemv_bf16<1>(y3, x, w3, out3, in, wpr, b - n2);
}

// Any dtype and shape: one warp per output row, looping over the rows.
extern "C" __global__ void matmul_generic(float* y, const float* x, WPARAMS, int rows, int out, int in) { PROBE_KERNEL();
    WMAKE;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int o = blockIdx.x * 8 + warp;
    if (o >= out) return;
    for (int r = 0; r < rows; r++) {
        float s = 0.f;
        for (int c = lane; c < in; c += 32) s += wload(w, o, c, in) * x[(long)r * in + c];
        s = warpSum(s);
        if (lane == 0) y[(long)r * out + o] = s;
    }
}

// ---------------------------------------------------------------- GEMM
// Prefill: y[M,N] = x[M,K] · w[N,K]ᵀ on the tensor cores (mma.sync
// m16n8k8 tf32, fp32 accumulation). 64×64 tile per block of 4 warps, each
// warp 32×32; K in steps of 32 through shared memory. Weights are decoded
// (bf16 exactly, FP8 times its block scale) while the tile is staged.
#define BM 64
#define BN 64
#define BK 32
#define LDS (BK + 4)

template <int WT> // 0 generic, 1 bf16 (K % 8 == 0), 2 fp8 (K % 16 == 0, b1 % 16 == 0)
__device__ __forceinline__ void gemm_tf32(float* __restrict__ y, const float* __restrict__ x, W w, int M, int N, int K) {
    __shared__ uint32_t As[BM][LDS];
    __shared__ uint32_t Bs[BN][LDS];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    int g = lane >> 2, t = lane & 3;
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.f;
    bool xvec = (K & 3) == 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        // A: 64×32 floats, 128 threads × 4 float4.
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int e = (tid + i * 128) * 4; // element in tile
            int r = e / BK, c = e % BK;
            int gm = m0 + r, gk = k0 + c;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if (gm < M) {
                if (xvec && gk + 3 < K) {
                    float4 f = *(const float4*)(x + (long)gm * K + gk);
                    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
                } else {
                    for (int q = 0; q < 4; q++)
                        if (gk + q < K) v[q] = x[(long)gm * K + gk + q];
                }
            }
#pragma unroll
            for (int q = 0; q < 4; q++) As[r][c + q] = tf32(v[q]);
        }
        // B: 64×32 weights.
        if (WT == 1) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int e = (tid + i * 128) * 8;
                int r = e / BK, c = e % BK;
                int gn = n0 + r, gk = k0 + c;
                uint32_t u[4] = {0, 0, 0, 0};
                if (gn < N && gk < K) {
                    uint4 a = __ldg((const uint4*)((const uint16_t*)w.p + (long)gn * K + gk));
                    u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w;
                }
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    Bs[r][c + 2 * q] = u[q] << 16;
                    Bs[r][c + 2 * q + 1] = u[q] & 0xffff0000u;
                }
            }
        } else if (WT == 2) {
            int e = tid * 16;
            int r = e / BK, c = e % BK;
            int gn = n0 + r, gk = k0 + c;
            uint32_t u[4] = {0, 0, 0, 0};
            float s = 0.f;
            if (gn < N && gk < K) {
                uint4 a = __ldg((const uint4*)((const uint8_t*)w.p + (long)gn * K + gk));
                u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w;
                s = w.scale[(gn / w.b0) * w.nsc + gk / w.b1];
            }
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float f[4];
                fp8x4f(u[q], f);
#pragma unroll
                for (int b = 0; b < 4; b++) Bs[r][c + 4 * q + b] = tf32(f[b] * s);
            }
        } else {
            for (int e = tid; e < BN * BK; e += 128) {
                int r = e / BK, c = e % BK;
                int gn = n0 + r, gk = k0 + c;
                Bs[r][c] = tf32((gn < N && gk < K) ? wload(w, gn, gk, K) : 0.f);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            uint32_t a[2][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int r = wm + i * 16 + g;
                a[i][0] = As[r][kk + t];
                a[i][1] = As[r + 8][kk + t];
                a[i][2] = As[r][kk + t + 4];
                a[i][3] = As[r + 8][kk + t + 4];
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int n = wn + j * 8 + g;
                b[j][0] = Bs[n][kk + t];
                b[j][1] = Bs[n][kk + t + 4];
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    asm volatile(
                        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                        "{%0,%1,%2,%3};"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = m0 + wm + i * 16 + g, c = n0 + wn + j * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int rr = r + h * 8;
                if (rr < M) {
                    if (c < N) y[(long)rr * N + c] = acc[i][j][2 * h];
                    if (c + 1 < N) y[(long)rr * N + c + 1] = acc[i][j][2 * h + 1];
                }
            }
        }
}

extern "C" __global__ void __launch_bounds__(128) gemm_generic(float* y, const float* x, WPARAMS, int M, int N, int K) { PROBE_KERNEL();
    WMAKE;
    gemm_tf32<0>(y, x, w, M, N, K);
}
extern "C" __global__ void __launch_bounds__(128) gemm_bf16(float* y, const float* x, WPARAMS, int M, int N, int K) { PROBE_KERNEL();
    WMAKE;
    gemm_tf32<1>(y, x, w, M, N, K);
}
extern "C" __global__ void __launch_bounds__(128) gemm_fp8(float* y, const float* x, WPARAMS, int M, int N, int K) { PROBE_KERNEL();
    WMAKE;
    gemm_tf32<2>(y, x, w, M, N, K);
}

// ---------------------------------------------------------------- elementwise
// One block per row; float4 accesses when dim % 4 == 0 (then one load per
// thread covers a 4096-wide row with 1024 threads).
// bf, when set (prefill rows whose output feeds a GEMM, dim % 8 == 0),
// also receives the output as bf16: the GEMM's input, no to_bf16 pass.
extern "C" __global__ void rmsnorm(float* dst, const float* x, const float* w, int dim, float eps, uint2* bf) { PROBE_KERNEL();
    __shared__ float red[32];
    long base = (long)blockIdx.x * dim;
    bool vec = (dim & 3) == 0;
    float s = 0.f;
    if (vec) {
        const float4* x4 = (const float4*)(x + base);
        for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
            float4 v = x4[i];
            s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            float v = x[base + i];
            s += v * v;
        }
    }
    s = warpSum(s);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < (blockDim.x >> 5) ? red[lane] : 0.f;
        s = warpSum(s);
        if (lane == 0) red[0] = s;
    }
    __syncthreads();
    float inv = rsqrtf(red[0] / dim + eps);
    if (vec) {
        const float4* x4 = (const float4*)(x + base);
        const float4* w4 = (const float4*)w;
        float4* d4 = (float4*)(dst + base);
        for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
            float4 v = x4[i], g = w4[i];
            float4 o = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
            d4[i] = o;
            if (bf) bf[base / 4 + i] = make_uint2(packbf(o.x, o.y), packbf(o.z, o.w));
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[base + i] = x[base + i] * inv * w[i];
    }
}

// deq_fp8_bf16 expands rows [0, n) of an FP8 E4M3 weight (row-major, K
// bytes per row, float32 block scales [rows/b0][nsc], b1 columns per
// scale block, b1 % 16 == 0, K % 16 == 0) times their scales to bf16, 16
// per thread: the prefill GEMM's operand, a bounded scratch of row chunks
// (fp8prefill.go), never a resident copy.
extern "C" __global__ void __launch_bounds__(256) deq_fp8_bf16(uint4* dst, const uint8_t* w, const float* scale, int n,
                                                              int K, int b0, int b1, int nsc) { PROBE_KERNEL();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x; // 16-byte chunk
    int per = K / 16;
    if (i >= (long)n * per) return;
    int r = i / per, c = (int)(i % per) * 16;
    uint4 a = __ldg((const uint4*)(w + (long)r * K + c));
    float s = scale[(r / b0) * nsc + c / b1];
    uint32_t u[4] = {a.x, a.y, a.z, a.w}, o[8];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float f[4];
        fp8x4f(u[q], f);
        o[2 * q] = packbf(f[0] * s, f[1] * s);
        o[2 * q + 1] = packbf(f[2] * s, f[3] * s);
    }
    dst[2 * i] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[2 * i + 1] = make_uint4(o[4], o[5], o[6], o[7]);
}

// copy_cols_f32: y[r, c0+c] = t[r, c] for c < n (a chunked prefill GEMM's
// output columns into the full-width result, ld columns per row of y, tld
// per row of t).
extern "C" __global__ void copy_cols_f32(float* y, const float* t, int rows, int n, int ld, int c0, int tld) { PROBE_KERNEL();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)rows * n) return;
    int r = i / n, c = i % n;
    y[(long)r * ld + c0 + c] = t[(long)r * tld + c];
}

// Elementwise kernels take 4 elements per thread (16-byte accesses when
// every pointer is aligned: prefill's activations, hundreds of MB per
// layer at 4K tokens), a scalar tail otherwise.
__device__ __forceinline__ bool aligned16(const void* a, const void* b, const void* c) {
    return (((unsigned long)a | (unsigned long)b | (unsigned long)c) & 15) == 0;
}

extern "C" __global__ void add(float* dst, const float* a, const float* b, long n) { PROBE_KERNEL();
    long i = 4 * ((long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n && aligned16(dst, a, b)) {
        float4 x = *(const float4*)(a + i), y = *(const float4*)(b + i);
        *(float4*)(dst + i) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        return;
    }
    for (long e = i; e < min(i + 4, n); e++) dst[e] = a[e] + b[e];
}

extern "C" __global__ void add_bias(float* x, const float* bias, long n, int dim) { PROBE_KERNEL();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += bias[i % dim];
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// bf as in rmsnorm (the down projection's input; n % 8 == 0 when set).
extern "C" __global__ void swiglu(float* dst, const float* g, const float* u, long n, uint2* bf) { PROBE_KERNEL();
    long i = 4 * ((long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n && aligned16(dst, g, u)) {
        float4 a = *(const float4*)(g + i), b = *(const float4*)(u + i);
        float4 o = make_float4(silu_mul(a.x, b.x), silu_mul(a.y, b.y), silu_mul(a.z, b.z), silu_mul(a.w, b.w));
        *(float4*)(dst + i) = o;
        if (bf) bf[i / 4] = make_uint2(packbf(o.x, o.y), packbf(o.z, o.w));
        return;
    }
    for (long e = i; e < min(i + 4, n); e++) {
        dst[e] = silu_mul(g[e], u[e]);
        if (bf) ((__nv_bfloat16*)bf)[e] = __float2bfloat16_rn(dst[e]);
    }
}

// One thread per (row, head, pair).
extern "C" __global__ void rope(float* x, const int* pos, const float* invf, int rows, int heads, int hd, int half,
                                int neox, float scale) { PROBE_KERNEL();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long total = (long)rows * heads * half;
    if (i >= total) return;
    int p = i % half;
    long rh = i / half;
    int row = rh / heads;
    float ang = (float)pos[row] * invf[p];
    float c = cosf(ang) * scale, s = sinf(ang) * scale;
    float* v = x + rh * hd;
    int i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
    float a = v[i0], b = v[i1];
    v[i0] = a * c - b * s;
    v[i1] = b * c + a * s;
}

extern "C" __global__ void gather(float* dst, const float* src, const int* idx, int dim) { PROBE_KERNEL();
    long r = blockIdx.x;
    long s = idx[r];
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[r * dim + i] = src[s * dim + i];
}

extern "C" __global__ void scatter_add(float* dst, const float* src, const int* idx, const float* w, int dim) { PROBE_KERNEL();
    long r = blockIdx.x;
    long d = idx[r];
    float wt = w[r];
    for (int i = threadIdx.x; i < dim; i += blockDim.x) atomicAdd(dst + d * dim + i, wt * src[r * dim + i]);
}

// Greedy sampling on the device: out[0] = argmax(x[0:n]) over gridDim.x
// blocks of 256 threads. Each block scans a stripe of x (four float4s a
// thread in flight where x is 16-byte aligned, vec) and leaves its best in
// pv/pi; the last block to arrive merges them. It replaced a one-block
// kernel that read a vocabulary of 150-250K logits one load a thread at a
// time: ~1 MB through one SM after every decode step. Ties go to the
// lowest index and NaN never wins. Where ring is not null (a recorded step
// that feeds the next: graph.go) the token also goes to ring[*slot & mask],
// page-locked host memory the host reads once the step is done, and
// out[0], the next step's token id, is kept in range. Launched after its
// predecessor by programmatic dependent launch inside a recorded step.
__device__ __forceinline__ void argmaxPick(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
}
// argmaxGrid scans x[0:n] over the grid as argmax_mb does and merges the
// blocks' bests in the last block to arrive; it returns true in that
// block's thread 0 only, which then holds the grid's best value and index
// (idx ≥ n where nothing won: every value NaN).
__device__ __forceinline__ bool argmaxGrid(const float* x, int n, int vec, float* pv, int* pi, int* arrive, float& best,
                                           int& idx) {
    best = -INFINITY;
    idx = 0x7fffffff;
    int stride = gridDim.x * blockDim.x;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int done = 0;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        int n4 = n >> 2;
#pragma unroll 4
        for (int i = t; i < n4; i += stride) {
            float4 v = x4[i];
            argmaxPick(best, idx, v.x, 4 * i);
            argmaxPick(best, idx, v.y, 4 * i + 1);
            argmaxPick(best, idx, v.z, 4 * i + 2);
            argmaxPick(best, idx, v.w, 4 * i + 3);
        }
        done = n4 << 2;
    }
#pragma unroll 4
    for (int i = done + t; i < n; i += stride) argmaxPick(best, idx, x[i], i);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) argmaxPick(best, idx, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, idx, o));
    __shared__ float sv[8];
    __shared__ int si[8];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { sv[warp] = best; si[warp] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < 8; w++) argmaxPick(best, idx, sv[w], si[w]);
        pv[blockIdx.x] = best;
        pi[blockIdx.x] = idx;
    }
    if (!lastArrival(arrive, gridDim.x)) return false;
    best = -INFINITY;
    idx = 0x7fffffff;
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) argmaxPick(best, idx, __ldcg(pv + b), __ldcg(pi + b));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) argmaxPick(best, idx, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, idx, o));
    __syncthreads();
    if (lane == 0) { sv[warp] = best; si[warp] = idx; }
    __syncthreads();
    if (threadIdx.x != 0) return false;
    for (int w = 1; w < 8; w++) argmaxPick(best, idx, sv[w], si[w]);
    return true;
}
extern "C" __global__ void __launch_bounds__(256) argmax_mb(int* out, int* ring, const int* slot, int mask, const float* x, int n,
                                                             int vec, float* pv, int* pi, int* arrive) { PROBE_KERNEL();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    float best;
    int idx;
    if (!argmaxGrid(x, n, vec, pv, pi, arrive, best, idx)) return;
    if (ring) {
        ring[*slot & mask] = idx;
        // The next step embeds it: a token even where nothing won
        // (all NaN), 0 as the host's argmax answers then.
        out[0] = idx < n ? idx : 0;
    } else {
        out[0] = idx;
    }
}

// argmax_pair is a tensor-parallel rank's half of a distributed argmax
// (kernels.ArgmaxOps): x[0:n] is its vocabulary slice, starting at token
// offset, and the grid's best goes to dst[2·slot] (value) and
// dst[2·slot+1] (offset + index as a float, exact below 2^24), the other
// slots' pairs to zero, for the group's all-reduce of the 2·slots floats.
// Where nothing won (every value NaN) the pair is (NaN, offset), which the
// pick never takes.
extern "C" __global__ void __launch_bounds__(256) argmax_pair(float* dst, const float* x, int n, int vec, float* pv, int* pi,
                                                               int* arrive, int offset, int slot, int slots) { PROBE_KERNEL();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    float best;
    int idx;
    if (!argmaxGrid(x, n, vec, pv, pi, arrive, best, idx)) return;
    for (int s = 0; s < slots; s++) {
        if (s != slot) dst[2 * s] = 0.f, dst[2 * s + 1] = 0.f;
    }
    const bool won = idx < n;
    dst[2 * slot] = won ? best : __int_as_float(0x7fffffff);
    dst[2 * slot + 1] = (float)(offset + (won ? idx : 0));
}

// argmax_pairs picks a fed step's token from the group's argmax pairs
// (models.PickPairs' rule: the first pair of the largest value, NaN never
// winning, 0 where none has one or the index is not a token) and writes
// it as argmax_mb's fed tail does: out[0] for the next replay, ring[*slot]
// for the host. One thread; slots is the group's size.
extern "C" __global__ void argmax_pairs(int* out, int* ring, const int* slot, int mask, const float* pairs, int slots,
                                        int vocab) { PROBE_KERNEL();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int best = -1;
    float bv = 0.f;
    for (int s = 0; s < slots; s++) {
        const float v = pairs[2 * s];
        if (!isnan(v) && (best < 0 || v > bv)) best = s, bv = v;
    }
    int id = 0;
    if (best >= 0) {
        const float f = pairs[2 * best + 1];
        if (f >= 0.f && f < (float)vocab) id = (int)f;
    }
    if (ring) ring[*slot & mask] = id;
    out[0] = id;
}

// fp32 → bf16 for the cuBLASLt GEMM's activation operand; n % 8 == 0.
extern "C" __global__ void to_bf16(uint4* dst, const float4* src, long n) { PROBE_KERNEL();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n / 8) return;
    float4 a = src[2 * i], b = src[2 * i + 1];
    __nv_bfloat162 p0 = __floats2bfloat162_rn(a.x, a.y), p1 = __floats2bfloat162_rn(a.z, a.w);
    __nv_bfloat162 p2 = __floats2bfloat162_rn(b.x, b.y), p3 = __floats2bfloat162_rn(b.z, b.w);
    dst[i] = make_uint4(*(uint32_t*)&p0, *(uint32_t*)&p1, *(uint32_t*)&p2, *(uint32_t*)&p3);
}

#include "kv_attn.cuh"
#include "prefill_attn.cuh"
#include "mla_prefill.cuh"
