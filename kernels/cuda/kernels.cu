// Kernels of the CUDA backend. Activations are float32; weights stay in
// their stored format (bf16, f16, f32, FP8 E4M3 with block scales) and are
// converted in registers. Compiled to compute_90 PTX by `go generate`
// (see gen.go); the PTX is committed and embedded.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"

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
extern "C" __global__ void embed(float* dst, WPARAMS, const int* ids, int cols) {
    WMAKE;
    int row = blockIdx.x;
    long id = ids[row];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[(long)row * cols + c] = wload(w, id, c, cols);
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
#pragma unroll
                for (int b = 0; b < 4; b++) wv[4 * j + b] = fp8f((ua[j] >> (8 * b)) & 0xff);
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
                                                                    const uint16_t* w, int out, int in, int wpr) { \
        gemv_bf16<N>(y, x, w, out, in, wpr, blockIdx.x);                                                                   \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) gemv_fp8_##N(float* y, const float* x, const uint8_t* w, \
                                                                   const float* scale, int out, int in,    \
                                                                   int b0, int b1, int nsc, int wpr) {     \
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
    float* y2, const uint16_t* w2, int out2, int n2, float* y3, const uint16_t* w3, int out3) {
    int b = blockIdx.x;
    if (b < n0) gemv_bf16<1>(y0, x, w0, out0, in, wpr, b);
    else if (b < n1) gemv_bf16<1>(y1, x, w1, out1, in, wpr, b - n0);
    else if (b < n2) gemv_bf16<1>(y2, x, w2, out2, in, wpr, b - n1);
    else gemv_bf16<1>(y3, x, w3, out3, in, wpr, b - n2);
}

// Any dtype and shape: one warp per output row, looping over the rows.
extern "C" __global__ void matmul_generic(float* y, const float* x, WPARAMS, int rows, int out, int in) {
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

__device__ __forceinline__ uint32_t tf32(float f) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

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
            for (int q = 0; q < 4; q++)
#pragma unroll
                for (int b = 0; b < 4; b++) Bs[r][c + 4 * q + b] = tf32(fp8f((u[q] >> (8 * b)) & 0xff) * s);
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

extern "C" __global__ void __launch_bounds__(128) gemm_generic(float* y, const float* x, WPARAMS, int M, int N, int K) {
    WMAKE;
    gemm_tf32<0>(y, x, w, M, N, K);
}
extern "C" __global__ void __launch_bounds__(128) gemm_bf16(float* y, const float* x, WPARAMS, int M, int N, int K) {
    WMAKE;
    gemm_tf32<1>(y, x, w, M, N, K);
}
extern "C" __global__ void __launch_bounds__(128) gemm_fp8(float* y, const float* x, WPARAMS, int M, int N, int K) {
    WMAKE;
    gemm_tf32<2>(y, x, w, M, N, K);
}

// ---------------------------------------------------------------- elementwise
// One block per row; float4 accesses when dim % 4 == 0 (then one load per
// thread covers a 4096-wide row with 1024 threads).
__device__ __forceinline__ uint32_t packbf(float a, float b) {
    __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    return *(uint32_t*)&p;
}

// bf, when set (prefill rows whose output feeds a GEMM, dim % 8 == 0),
// also receives the output as bf16: the GEMM's input, no to_bf16 pass.
extern "C" __global__ void rmsnorm(float* dst, const float* x, const float* w, int dim, float eps, uint2* bf) {
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
                                                              int K, int b0, int b1, int nsc) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x; // 16-byte chunk
    int per = K / 16;
    if (i >= (long)n * per) return;
    int r = i / per, c = (int)(i % per) * 16;
    uint4 a = __ldg((const uint4*)(w + (long)r * K + c));
    float s = scale[(r / b0) * nsc + c / b1];
    uint32_t u[4] = {a.x, a.y, a.z, a.w}, o[8];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        o[2 * q] = packbf(fp8f(u[q] & 0xff) * s, fp8f((u[q] >> 8) & 0xff) * s);
        o[2 * q + 1] = packbf(fp8f((u[q] >> 16) & 0xff) * s, fp8f(u[q] >> 24) * s);
    }
    dst[2 * i] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[2 * i + 1] = make_uint4(o[4], o[5], o[6], o[7]);
}

// copy_cols_f32: y[r, c0+c] = t[r, c] for c < n (a chunked prefill GEMM's
// output columns into the full-width result, ld columns per row).
extern "C" __global__ void copy_cols_f32(float* y, const float* t, int rows, int n, int ld, int c0) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)rows * n) return;
    int r = i / n, c = i % n;
    y[(long)r * ld + c0 + c] = t[i];
}

// Elementwise kernels take 4 elements per thread (16-byte accesses when
// every pointer is aligned: prefill's activations, hundreds of MB per
// layer at 4K tokens), a scalar tail otherwise.
__device__ __forceinline__ bool aligned16(const void* a, const void* b, const void* c) {
    return (((unsigned long)a | (unsigned long)b | (unsigned long)c) & 15) == 0;
}

extern "C" __global__ void add(float* dst, const float* a, const float* b, long n) {
    long i = 4 * ((long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n && aligned16(dst, a, b)) {
        float4 x = *(const float4*)(a + i), y = *(const float4*)(b + i);
        *(float4*)(dst + i) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        return;
    }
    for (long e = i; e < min(i + 4, n); e++) dst[e] = a[e] + b[e];
}

extern "C" __global__ void add_bias(float* x, const float* bias, long n, int dim) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += bias[i % dim];
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// bf as in rmsnorm (the down projection's input; n % 8 == 0 when set).
extern "C" __global__ void swiglu(float* dst, const float* g, const float* u, long n, uint2* bf) {
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
                                int neox, float scale) {
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

extern "C" __global__ void gather(float* dst, const float* src, const int* idx, int dim) {
    long r = blockIdx.x;
    long s = idx[r];
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[r * dim + i] = src[s * dim + i];
}

extern "C" __global__ void scatter_add(float* dst, const float* src, const int* idx, const float* w, int dim) {
    long r = blockIdx.x;
    long d = idx[r];
    float wt = w[r];
    for (int i = threadIdx.x; i < dim; i += blockDim.x) atomicAdd(dst + d * dim + i, wt * src[r * dim + i]);
}

// ---------------------------------------------------------------- KV and attention
// grid (rows, element blocks): one thread per element of k and v.
extern "C" __global__ void store_kv(float* K, float* V, const float* k, const float* v, const int* slots, int kw,
                                    int vw) {
    long r = blockIdx.x;
    long s = slots[r];
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i < kw) K[s * kw + i] = k[r * kw + i];
    if (i < vw) V[s * vw + i] = v[r * vw + i];
}

// combineSplits merges the splits of one (row, head) with the block's 128
// threads: every warp finds the global max, each split's weight is
// computed once into shared memory. splits ≤ 256.
// Partials are read with ld.global.cg (L2): other blocks wrote them.
__device__ void combineSplits(float* dst, const float* part, long rh, int splits, int dv) {
    __shared__ float fac[256];
    const float* p = part + rh * splits * (dv + 2);
    int lane = threadIdx.x & 31;
    float M = -INFINITY;
    for (int s = lane; s < splits; s += 32) M = fmaxf(M, __ldcg(p + s * (dv + 2) + dv));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        float ms = __ldcg(p + s * (dv + 2) + dv);
        fac[s] = ms == -INFINITY ? 0.f : expf(ms - M);
    }
    __syncthreads();
    float L = 0.f;
    for (int s = lane; s < splits; s += 32) L += fac[s] * __ldcg(p + s * (dv + 2) + dv + 1);
    L = warpSum(L);
    float inv = 1.f / L;
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float o = 0.f;
        for (int s = 0; s < splits; s++) o += fac[s] * __ldcg(p + s * (dv + 2) + d);
        dst[rh * dv + d] = o * inv;
    }
}

// Split-K attention (flash-decoding): block (row·head, split) covers
// positions [split·chunk, min(+chunk, ctx)) of query row `row` with 4 warps
// (one position per warp at a time, online softmax), and writes a partial
// (acc[dv], max, sum); the last split to finish merges them into dst.
// Head dims up to 256.
#define MAXD 8
extern "C" __global__ void __launch_bounds__(128) attn_partial(float* dst, float* part, int* counters,
                                                               const float* q, const float* K, const float* V,
                                                               const int* table, const int* startp, int heads, int kvh,
                                                               int dk, int dv, int bs, int chunk, float scale) {
    __shared__ float sm[4], sl[4], sacc[4][MAXD * 32];
    int rh = blockIdx.x, row = rh / heads, h = rh % heads, kh = h / (heads / kvh);
    int splits = gridDim.y;
    int ctx = *startp + row + 1;
    int lo = blockIdx.y * chunk, hi = min(lo + chunk, ctx);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float qv[MAXD], acc[MAXD];
    const float* qr = q + (long)rh * dk;
#pragma unroll
    for (int i = 0; i < MAXD; i++) {
        int d = lane + 32 * i;
        qv[i] = d < dk ? qr[d] * scale : 0.f;
        acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    long kw = (long)kvh * dk, vw = (long)kvh * dv;
    for (int p = lo + warp; p < hi; p += 4) {
        long slot = (long)table[p / bs] * bs + p % bs;
        const float* kp = K + slot * kw + (long)kh * dk;
        const float* vp = V + slot * vw + (long)kh * dv;
        float vv[MAXD];
#pragma unroll
        for (int i = 0; i < MAXD; i++) {
            int d = lane + 32 * i;
            vv[i] = d < dv ? vp[d] : 0.f;
        }
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < MAXD; i++) {
            int d = lane + 32 * i;
            if (d < dk) s += qv[i] * kp[d];
        }
        s = warpSum(s);
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), e = expf(s - mn);
        l = l * corr + e;
#pragma unroll
        for (int i = 0; i < MAXD; i++) acc[i] = acc[i] * corr + e * vv[i];
        m = mn;
    }
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int i = 0; i < MAXD; i++) {
        int d = lane + 32 * i;
        if (d < dv) sacc[warp][d] = acc[i];
    }
    __syncthreads();
    float M = fmaxf(fmaxf(sm[0], sm[1]), fmaxf(sm[2], sm[3]));
    float f[4];
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        f[w] = sm[w] == -INFINITY ? 0.f : expf(sm[w] - M);
        L += sl[w] * f[w];
    }
    float* out = part + ((long)rh * splits + blockIdx.y) * (dv + 2);
    for (int d = threadIdx.x; d < dv; d += blockDim.x)
        out[d] = sacc[0][d] * f[0] + sacc[1][d] * f[1] + sacc[2][d] * f[2] + sacc[3][d] * f[3];
    if (threadIdx.x == 0) { out[dv] = M; out[dv + 1] = L; }
    // The last split of this (row, head) to finish merges them all (the
    // threadfence-reduction pattern), which saves a second launch per
    // layer; it leaves the counter at zero for the next pass.
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counters + rh, 1) == splits - 1;
        if (last) counters[rh] = 0;
    }
    __syncthreads();
    if (last) {
        __threadfence();
        combineSplits(dst, part, rh, splits, dv);
    }
}

// ---------------------------------------------------------------- GQA decode attention
// attn_gqa is the decode attention (any rows, but meant for few): block
// (row·kv head·head subgroup, split) covers positions
// [split·chunk, min(+chunk, ctx)) for all hg ≤ 8 query heads of its subgroup
// of the GQA group at once, so each K/V row is read from DRAM once per
// group rather than once per query head. Positions go in tiles of T (32;
// 16 when a head dim is over 128):
//   - K rows by cp.async into shared memory (row stride dk+4 floats: the
//     score threads' 16-byte reads of 8 different rows hit distinct banks),
//     the next tile's issued as soon as the scores of this one are done;
//   - V rows straight into registers (16-byte loads, not kept in L1), the
//     thread that multiplies them owns their columns;
//   - scores: thread (t, j) dots position t with all hg heads over the
//     float4 columns j, j+128/T, ... (each K element read from shared memory
//     once), the 128/T slices summed by the softmax warps;
//   - online softmax per head: warp w owns heads w and w+4, lane = position;
//   - P·V: thread (column group cg of 4, slice sl) accumulates its
//     columns of all hg heads over positions sl, sl+nsl, ... of the tile;
//     the slices are summed once at the end through shared memory.
// Each block writes one partial per head (acc[dv], max, sum; the layout
// of attn_partial's, so combine is the same arithmetic); the last split of
// the block row to finish (counter per (row, kv head, subgroup), left at
// zero) merges them. One split writes dst directly.
// ctx comes from the device (*startp + row + 1), so under graph capture
// (splits sized from the table's capacity) the chunk is recomputed from
// the real context: chunk = max(ceil(ctx/splits), minchunk) and splits
// past ctx are empty (no partial; the merge reads the first ceil(ctx/chunk)).
// Positions ≥ ctx are never read. dk, dv ≤ 256 and multiples of 4;
// heads % kvh == 0; hg = ceil(G / ceil(G/8)) for G = heads/kvh, with
// ceil(G/hg) subgroups.
#define GQ_HG 8
#define GQ_T 32
#define GQ_KS 4224 // floats: a K tile T·(dk+4) ≤ 32·132 or 16·260; the slice sums; the merge factors

__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

extern "C" __global__ void __launch_bounds__(128, 4)
    attn_gqa(float* dst, float* part, int* counters, const float* __restrict__ q, const float* __restrict__ K,
             const float* __restrict__ V, const int* __restrict__ table, const int* startp, int heads, int kvh, int dk,
             int dv, int bs, int minchunk, int HG, float scale) {
    __shared__ __align__(16) float Ks[GQ_KS];
    __shared__ __align__(16) float Qs[GQ_HG * 256];
    __shared__ float sp[128 * GQ_HG];  // partial scores [j][g][t], t < T: 128/T·8·T
    __shared__ float P[GQ_HG * GQ_T];  // probabilities [g][t]
    __shared__ float corrS[GQ_HG], mS[GQ_HG], lS[GQ_HG], invS[GQ_HG];
    __shared__ int sslot[2][GQ_T];     // slots of this tile and the next
    __shared__ int last;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int G = heads / kvh, nsub = (G + HG - 1) / HG;
    const int bx = blockIdx.x, sub = bx % nsub, kh = (bx / nsub) % kvh, row = bx / (nsub * kvh);
    const int h0 = kh * G + sub * HG, hg = min(HG, G - sub * HG);
    const int splits = gridDim.y;
    const int ctx = *startp + row + 1;
    const int chunk = max((ctx + splits - 1) / splits, minchunk);
    const int lo = blockIdx.y * chunk, hi = min(lo + chunk, ctx);
    const int T = max(dk, dv) <= 128 ? 32 : 16;
    const int ntiles = lo < hi ? (hi - lo + T - 1) / T : 0;
    const int dk4 = dk >> 2, kp4 = dk4 + 1;
    const long kw = (long)kvh * dk, vw = (long)kvh * dv;
    const float* Kh = K + (long)kh * dk;
    const float* Vh = V + (long)kh * dv;
    // score threads: position tt, column slice j of nds
    const int tt = tid % T, j = tid / T, nds = 128 / T;
    // P·V threads: column group cg (4 floats), position slice sl of nsl
    // (threads past nsl·ncg idle there: 128 % (dv/4) of them)
    const int ncg = dv >> 2, nsl = 128 / ncg, cg = tid % ncg, sl = tid / ncg;

    float acc[GQ_HG][4];
#pragma unroll
    for (int g = 0; g < GQ_HG; g++) acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.f;
    float mw[2] = {-INFINITY, -INFINITY}, lw[2] = {0.f, 0.f}; // heads warp, warp+4

    if (ntiles > 0) {
        const float* qb = q + ((long)row * heads + h0) * dk; // the hg heads are adjacent
        for (int i = tid; i < hg * dk; i += 128) Qs[i] = qb[i] * scale;
        if (tid < min(T, hi - lo)) {
            int p = lo + tid;
            sslot[0][tid] = table[p / bs] * bs + p % bs;
        }
        __syncthreads();
        for (int i = tid, n = min(T, hi - lo); i < n * dk4; i += 128) {
            int t = i / dk4, c = i - t * dk4;
            cpAsync16(&Ks[(t * kp4 + c) * 4], Kh + (long)sslot[0][t] * kw + c * 4);
        }
    }
    for (int it = 0; it < ntiles; it++) {
        const int cur = it & 1, tb = lo + it * T, n = min(T, hi - tb);
        const bool more = it + 1 < ntiles;
        // V rows of this tile into registers (rows ≥ n are zero, never used).
        float4 vr[8];
#pragma unroll
        for (int r = 0; r < 8; r++) {
            int t = sl + nsl * r;
            vr[r] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (sl < nsl && t < n) {
                uint4 u = ldstream((const uint4*)(Vh + (long)sslot[cur][t] * vw + cg * 4));
                vr[r] = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
            }
        }
        // Slots of the next tile, into the buffer of tile it-1, whose
        // loads every thread issued before the previous iteration's S1.
        if (more) {
            int nn = min(T, hi - tb - T);
            if (tid < nn) {
                int p = tb + T + tid;
                sslot[cur ^ 1][tid] = table[p / bs] * bs + p % bs;
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads(); // S1: K tile (and the next slots) visible
        float s[GQ_HG];
#pragma unroll
        for (int g = 0; g < GQ_HG; g++) s[g] = 0.f;
        if (tt < n) {
            const float4* kr = (const float4*)Ks + tt * kp4;
            for (int c = j; c < dk4; c += nds) {
                float4 k = kr[c];
#pragma unroll
                for (int g = 0; g < GQ_HG; g++) {
                    if (g < hg) {
                        float4 x = ((const float4*)Qs)[g * dk4 + c];
                        s[g] += x.x * k.x + x.y * k.y + x.z * k.z + x.w * k.w;
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < GQ_HG; g++)
            if (g < hg) sp[(j * GQ_HG + g) * T + tt] = s[g];
        __syncthreads(); // S2: scores written, Ks free
        if (more) {
            int nn = min(T, hi - tb - T);
            for (int i = tid; i < nn * dk4; i += 128) {
                int t = i / dk4, c = i - t * dk4;
                cpAsync16(&Ks[(t * kp4 + c) * 4], Kh + (long)sslot[cur ^ 1][t] * kw + c * 4);
            }
        }
#pragma unroll
        for (int w = 0; w < 2; w++) {
            int g = warp + 4 * w;
            if (g < hg) { // warp-uniform
                float x = -INFINITY;
                if (lane < n) {
                    x = 0.f;
                    for (int jj = 0; jj < nds; jj++) x += sp[(jj * GQ_HG + g) * T + lane];
                }
                float mn = fmaxf(mw[w], warpMax(x)); // finite: n ≥ 1
                float corr = expf(mw[w] - mn);       // 0 on the first tile
                float e = lane < n ? expf(x - mn) : 0.f;
                lw[w] = lw[w] * corr + warpSum(e);
                mw[w] = mn;
                if (lane < T) P[g * GQ_T + lane] = e;
                if (lane == 0) corrS[g] = corr;
            }
        }
        __syncthreads(); // S3: P and corr visible
        if (sl < nsl) {
#pragma unroll
            for (int g = 0; g < GQ_HG; g++) {
                if (g < hg) {
                    float c = corrS[g];
                    acc[g][0] *= c, acc[g][1] *= c, acc[g][2] *= c, acc[g][3] *= c;
                }
            }
#pragma unroll
            for (int r = 0; r < 8; r++) {
                int t = sl + nsl * r;
                if (t < n) {
#pragma unroll
                    for (int g = 0; g < GQ_HG; g++) {
                        if (g < hg) {
                            float p = P[g * GQ_T + t];
                            acc[g][0] += p * vr[r].x, acc[g][1] += p * vr[r].y;
                            acc[g][2] += p * vr[r].z, acc[g][3] += p * vr[r].w;
                        }
                    }
                }
            }
        }
        // The next iteration's writes of sp, P, corrS and Ks come after its
        // S1/S2, which every thread reaches only after this P·V.
    }
    const bool single = splits == 1; // then ntiles ≥ 1: lo = 0 < ctx
    if (ntiles > 0) {
        // Sum the position slices (Ks is free: the last tile's scores are
        // done and no K load is pending).
        if (sl < nsl) {
#pragma unroll
            for (int g = 0; g < GQ_HG; g++)
                if (g < hg)
                    *(float4*)&Ks[(sl * hg + g) * dv + cg * 4] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
        }
        if (lane == 0) {
#pragma unroll
            for (int w = 0; w < 2; w++) {
                int g = warp + 4 * w;
                if (g < hg) mS[g] = mw[w], lS[g] = lw[w];
            }
        }
        __syncthreads();
        for (int i = tid; i < hg * dv; i += 128) {
            int g = i / dv, d = i - g * dv;
            float o = 0.f;
            for (int z = 0; z < nsl; z++) o += Ks[(z * hg + g) * dv + d];
            long rh = (long)row * heads + h0 + g;
            if (single) {
                dst[rh * dv + d] = o / lS[g];
            } else {
                float* out = part + (rh * splits + blockIdx.y) * (dv + 2);
                out[d] = o;
                if (d == 0) out[dv] = mS[g], out[dv + 1] = lS[g];
            }
        }
    }
    if (single) return;
    // The last split of this block row to finish merges them all (as in
    // attn_partial); empty splits count too, and leave no partial.
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        last = atomicAdd(counters + bx, 1) == splits - 1;
        if (last) counters[bx] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int ns = (ctx + chunk - 1) / chunk; // splits with positions (≤ splits)
    float* fac = Ks;                          // [g][256]
#pragma unroll
    for (int w = 0; w < 2; w++) {
        int g = warp + 4 * w;
        if (g < hg) {
            const float* pg = part + ((long)row * heads + h0 + g) * splits * (dv + 2);
            float M = -INFINITY;
            for (int z = lane; z < ns; z += 32) M = fmaxf(M, __ldcg(pg + z * (dv + 2) + dv));
            M = warpMax(M);
            float L = 0.f;
            for (int z = lane; z < ns; z += 32) {
                float f = expf(__ldcg(pg + z * (dv + 2) + dv) - M);
                fac[g * 256 + z] = f;
                L += f * __ldcg(pg + z * (dv + 2) + dv + 1);
            }
            L = warpSum(L);
            if (lane == 0) invS[g] = 1.f / L;
        }
    }
    __syncthreads();
    for (int i = tid; i < hg * dv; i += 128) {
        int g = i / dv, d = i - g * dv;
        long rh = (long)row * heads + h0 + g;
        const float* pg = part + rh * splits * (dv + 2) + d;
        float o = 0.f;
        for (int z = 0; z < ns; z++) o += fac[g * 256 + z] * __ldcg(pg + z * (dv + 2));
        dst[rh * dv + d] = o * invS[g];
    }
}

// Greedy sampling on the device: out[0] = argmax(x[0:n]) (lowest index on
// ties, as the host argmax does). One block of 1024 threads.
extern "C" __global__ void argmax(int* out, const float* x, int n) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    float best = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[i];
        if (v > best) { best = v; idx = i; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { bv[warp] = best; bi[warp] = idx; }
    __syncthreads();
    if (warp == 0) {
        best = lane < (blockDim.x >> 5) ? bv[lane] : -INFINITY;
        idx = lane < (blockDim.x >> 5) ? bi[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
        }
        if (lane == 0) out[0] = idx;
    }
}

// ---------------------------------------------------------------- prefill (tensor cores)
// fp32 → bf16 for the cuBLASLt GEMM's activation operand; n % 8 == 0.
extern "C" __global__ void to_bf16(uint4* dst, const float4* src, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n / 8) return;
    float4 a = src[2 * i], b = src[2 * i + 1];
    __nv_bfloat162 p0 = __floats2bfloat162_rn(a.x, a.y), p1 = __floats2bfloat162_rn(a.z, a.w);
    __nv_bfloat162 p2 = __floats2bfloat162_rn(b.x, b.y), p3 = __floats2bfloat162_rn(b.z, b.w);
    dst[i] = make_uint4(*(uint32_t*)&p0, *(uint32_t*)&p1, *(uint32_t*)&p2, *(uint32_t*)&p3);
}


__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Flash-style causal prefill attention with GQA: block (64-query tile,
// head), 4 warps of 16 query rows; K/V tiles of 64 positions go through
// shared memory as bf16, S = QKᵀ and O += PV on the tensor
// cores (mma.sync m16n8k16 bf16, fp32 accumulation; V's fragments by
// ldmatrix.trans), online softmax in fp32 registers. dk == dv == D. Heavier (later) query tiles start first.
//
// A few query tiles over a long context (an append to a long session)
// would leave most SMs idle, each block walking thousands of keys: there
// the context is cut into `splits` ranges of whole key tiles (block x =
// split·tiles + tile), each block writes its rows' normalised partial
// output and (max, sum) to part/ml, and attn_merge combines them.
// LU: K and V float4 loads in flight per thread while a tile is staged
// (8 only where the registers allow it without spilling). QS: the query
// fragments live in shared memory (ldmatrix per k-step pair, each tile)
// instead of 32 registers, which buys either 8 loads in flight or a
// fourth block per SM.
template <int D, int LU, bool QS>
__device__ __forceinline__ void attn_prefill(float* __restrict__ dst, const float* __restrict__ q,
                                             const float* __restrict__ K, const float* __restrict__ V,
                                             const int* __restrict__ table, const int* startp, int rows, int heads,
                                             int kvh, int bs, float scale, float* __restrict__ part,
                                             float2* __restrict__ ml, int splits, uint32_t* __restrict__ bf) {
    constexpr int BQ = 64, BKV = 64, KP = D + 8;
    __shared__ __align__(16) __nv_bfloat16 Ks[BKV][KP];
    __shared__ __align__(16) __nv_bfloat16 Vs[BKV][KP];
    __shared__ long rowoff[BKV];
    const int tiles = gridDim.x / splits, split = blockIdx.x / tiles;
    int tile = tiles - 1 - blockIdx.x % tiles, h = blockIdx.y, kh = h / (heads / kvh);
    int start = *startp;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r0 = tile * BQ + warp * 16;
    const float qs = scale * 1.4426950408889634f; // exp2 domain
    constexpr int QF = QS ? 1 : D / 16;
    uint32_t qf[QF][4];
    __shared__ __align__(16) __nv_bfloat16 Qs[QS ? BQ : 1][KP];
    if constexpr (QS) {
        // Each warp stages its own 16 rows; only it reads them.
        for (int e = lane; e < 16 * D / 2; e += 32) {
            int rr = e / (D / 2), c = (e % (D / 2)) * 2, row = r0 + rr;
            float2 v = row < rows ? *(const float2*)(q + ((long)row * heads + h) * D + c) : make_float2(0.f, 0.f);
            *(uint32_t*)&Qs[warp * 16 + rr][c] = packbf(v.x * qs, v.y * qs);
        }
        __syncwarp();
    } else {
#pragma unroll
        for (int ks = 0; ks < QF; ks++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = r0 + g + (i & 1) * 8, col = ks * 16 + 2 * t + (i >> 1) * 8;
                float a = 0.f, b = 0.f;
                if (row < rows) {
                    float2 v = *(const float2*)(q + ((long)row * heads + h) * D + col);
                    a = v.x * qs;
                    b = v.y * qs;
                }
                qf[ks][i] = packbf(a, b);
            }
    }
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    int qlast = min(tile * BQ + BQ, rows) - 1;
    int ctxEnd = start + qlast + 1;
    // This split's keys: whole tiles of the full context, cut evenly.
    const int chunk = (((start + rows + BKV - 1) / BKV + splits - 1) / splits) * BKV;
    const int kLo = split * chunk;
    ctxEnd = min(ctxEnd, kLo + chunk);
    long kw = (long)kvh * D;
    const float* Kh = K + (long)kh * D;
    const float* Vh = V + (long)kh * D;
    for (int k0 = kLo; k0 < ctxEnd; k0 += BKV) {
        __syncthreads();
        // Row offsets of the tile's positions (-1 past the context), then
        // K and V rows as bf16, four 16-byte loads in flight per thread.
        if (threadIdx.x < BKV) {
            int p = k0 + threadIdx.x;
            rowoff[threadIdx.x] = p < ctxEnd ? ((long)table[p / bs] * bs + p % bs) * kw : -1L;
        }
        __syncthreads();
#pragma unroll 1
        for (int it = 0; it < BKV * D / 4 / 128; it += LU) {
            float4 kv[LU], vv[LU];
#pragma unroll
            for (int u = 0; u < LU; u++) {
                int e = threadIdx.x + (it + u) * 128;
                int r = e / (D / 4), c = (e % (D / 4)) * 4;
                long off = rowoff[r];
                kv[u] = vv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (off >= 0) {
                    kv[u] = *(const float4*)(Kh + off + c);
                    vv[u] = *(const float4*)(Vh + off + c);
                }
            }
#pragma unroll
            for (int u = 0; u < LU; u++) {
                int e = threadIdx.x + (it + u) * 128;
                int r = e / (D / 4), c = (e % (D / 4)) * 4;
                *(uint2*)&Ks[r][c] = make_uint2(packbf(kv[u].x, kv[u].y), packbf(kv[u].z, kv[u].w));
                *(uint2*)&Vs[r][c] = make_uint2(packbf(vv[u].x, vv[u].y), packbf(vv[u].z, vv[u].w));
            }
        }
        __syncthreads();
        if (r0 >= rows || start + r0 + 15 < k0) continue; // this warp's rows see none of the tile
        float s[BKV / 8][4];
#pragma unroll
        for (int n = 0; n < BKV / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        // B = Kᵀ: one ldmatrix.x4 of 8 key rows × 32 dims gives the
        // fragments of two k-steps (lane: matrix lane/8, row lane%8).
#pragma unroll
        for (int ks = 0; ks < D / 16; ks += 2) {
            uint32_t qa[4], qb[4];
            const uint32_t *fa, *fb;
            if constexpr (QS) {
                // A fragments of k-steps ks, ks+1: matrices (rows 0-7 / 8-15) × (cols 0-7 / 8-15).
                const int qr = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, qc = (lane >> 4) * 8;
                unsigned qa0 = (unsigned)__cvta_generic_to_shared(&Qs[qr][ks * 16 + qc]);
                unsigned qb0 = (unsigned)__cvta_generic_to_shared(&Qs[qr][ks * 16 + 16 + qc]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(qa[0]), "=r"(qa[1]), "=r"(qa[2]), "=r"(qa[3])
                             : "r"(qa0));
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(qb[0]), "=r"(qb[1]), "=r"(qb[2]), "=r"(qb[3])
                             : "r"(qb0));
                fa = qa;
                fb = qb;
            } else {
                fa = qf[QS ? 0 : ks];
                fb = qf[QS ? 0 : ks + 1];
            }
#pragma unroll
            for (int n = 0; n < BKV / 8; n++) {
                uint32_t b[4];
                unsigned addr = (unsigned)__cvta_generic_to_shared(&Ks[n * 8 + (lane & 7)][ks * 16 + (lane >> 3) * 8]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                             : "r"(addr));
                mma_bf16(s[n], fa, b[0], b[1]);
                mma_bf16(s[n], fb, b[2], b[3]);
            }
        }
        // Tiles wholly before the warp's first row need no causal mask
        // (rows past `rows` are never written).
        const bool masked = k0 + BKV - 1 > start + r0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int row = r0 + g + 8 * i;
            int qpos = row < rows ? start + row : -1;
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < BKV / 8; n++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    int col = k0 + n * 8 + 2 * t + j;
                    if (masked && col > qpos) s[n][2 * i + j] = -INFINITY;
                    mx = fmaxf(mx, s[n][2 * i + j]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mn = fmaxf(m[i], mx);
            float ms = mn == -INFINITY ? 0.f : mn;
            float corr = exp2f(m[i] - ms);
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < BKV / 8; n++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    float p = exp2f(s[n][2 * i + j] - ms);
                    s[n][2 * i + j] = p;
                    sum += p;
                }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l[i] = l[i] * corr + sum;
            m[i] = mn;
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                o[n][2 * i] *= corr;
                o[n][2 * i + 1] *= corr;
            }
        }
#pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++) {
            uint32_t a[4] = {packbf(s[2 * kk][0], s[2 * kk][1]), packbf(s[2 * kk][2], s[2 * kk][3]),
                             packbf(s[2 * kk + 1][0], s[2 * kk + 1][1]), packbf(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                // B = V[kv][d] (k = kv, n = d): ldmatrix.trans of the
                // row-major tile; lanes 0-15 give the 16 kv rows' addresses
                // at columns n, lanes 16-31 at columns n+1.
                uint32_t b[4];
                unsigned addr = (unsigned)__cvta_generic_to_shared(&Vs[kk * 16 + (lane & 15)][(n + (lane >> 4)) * 8]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                             : "r"(addr));
                mma_bf16(o[n], a, b[0], b[1]);
                mma_bf16(o[n + 1], a, b[2], b[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int row = r0 + g + 8 * i;
        if (row >= rows) continue;
        // A split past a row's causal end saw no key: l = 0, weight 0.
        float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
        long ri = (long)row * heads + h;
        float* out = dst + ri * D;
        if (splits > 1) {
            out = part + ((long)split * rows * heads + ri) * D;
            if (t == 0) ml[(long)split * rows * heads + ri] = make_float2(m[i], l[i]);
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *(float2*)(out + n * 8 + 2 * t) = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
        if (bf && splits == 1) // the output projection's bf16 input
#pragma unroll
            for (int n = 0; n < D / 8; n++) bf[(ri * D + n * 8 + 2 * t) / 2] = packbf(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
    }
}

// attn_merge combines attn_prefill's split partials: block per (row,
// head), thread per output column. The maxima are in the exp2 domain.
extern "C" __global__ void attn_merge(float* dst, const float* part, const float2* ml, int n, int splits, int D,
                                      __nv_bfloat16* bf) {
    const long ri = blockIdx.x;
    float M = -INFINITY;
    for (int z = 0; z < splits; z++) {
        float2 v = ml[z * (long)n + ri];
        if (v.y > 0.f) M = fmaxf(M, v.x);
    }
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float num = 0.f, den = 0.f;
        for (int z = 0; z < splits; z++) {
            float2 v = ml[z * (long)n + ri];
            if (v.y <= 0.f) continue;
            float w = exp2f(v.x - M) * v.y;
            num += w * part[(z * (long)n + ri) * D + c];
            den += w;
        }
        dst[ri * D + c] = num / den;
        if (bf) bf[ri * D + c] = __float2bfloat16_rn(num / den);
    }
}

#define ATTN_PREFILL(D, NAME, OCC, LU, QS)                                                                             \
    extern "C" __global__ void __launch_bounds__(128, OCC) NAME(                                               \
        float* dst, const float* q, const float* K, const float* V, const int* table, const int* startp, int rows, \
        int heads, int kvh, int bs, float scale, float* part, float2* ml, int splits, uint32_t* bf) {            \
        attn_prefill<D, LU, QS>(dst, q, K, V, table, startp, rows, heads, kvh, bs, scale, part, ml, splits, bf); \
    }
// Two occupancies of the D=128 kernel: 3 blocks per SM (a 168-register
// cap, the default) and 2 (POCKET_ATTN_OCC=2).
ATTN_PREFILL(64, attn_prefill_64, 3, 4, false)
ATTN_PREFILL(128, attn_prefill_128, 2, 8, false)
ATTN_PREFILL(128, attn_prefill_128_3, 3, 4, false)
// Query fragments in shared memory: 8 loads in flight at 3 blocks per SM,
// or 4 in flight at 4 blocks per SM (POCKET_ATTN_PREFILL=q3 / q4).
ATTN_PREFILL(128, attn_prefill_128_q3, 3, 8, true)
ATTN_PREFILL(128, attn_prefill_128_q4, 4, 4, true)
