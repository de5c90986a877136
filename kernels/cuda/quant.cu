// GGUF block-format kernels of the CUDA backend (quant.go): the weights stay
// in device memory exactly as the file stores them and are decoded in
// registers by quant_blocks.cuh's sub32 (shared with moe_quant.cu), so
// Embed and the prefill dequantization are bit-identical to the CPU, and
// the GEMV computes Σ w·x = Σ_g a[g]·Σ q·x − b[g]·Σ x in fp32 (qdot32, the
// factored form the CPU's DotRow uses too).
//
// Compiled to compute_90 PTX by `go generate` (quant.go); the PTX is
// committed and embedded.
#include "common.cuh"  // warpSum
#include "quant_blocks.cuh"
#include "qround.cuh"

// ---------------------------------------------------------------- GEMV
// y[r, o] = Σ_k x[r, k] w[o, k] for NR activation rows. A block of 256
// threads is 8/wpg groups of wpg warps; each group computes R output rows,
// its threads striding over the row's 32-element sub-blocks, so that x is
// loaded once per sub-block for R rows. Sums are fp32.
#define R 2
template <int F, int NR>
__device__ __forceinline__ void qgemv(float* __restrict__ y, const float* __restrict__ x, const uint8_t* __restrict__ w,
                                      int out, int in, long rowBytes, int wpg) {
    __shared__ float lutS[16];
    __shared__ float red[8][NR * R];
    const float* lut = loadLUT<F>(lutS);
    const int gs = 32 * wpg, G = 8 / wpg;
    const int grp = threadIdx.x / gs, t0 = threadIdx.x % gs;
    const int o0 = (blockIdx.x * G + grp) * R;
    const int nsub = in >> 5;
    float acc[NR][R];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int i = 0; i < R; i++) acc[r][i] = 0.f;
    const uint8_t* rows[R];
#pragma unroll
    for (int i = 0; i < R; i++) rows[i] = w + (long)min(o0 + i, out - 1) * rowBytes;
    if (o0 < out) {
        // Ask L2 for every byte this thread will read before decoding any
        // of it, so that all of its DRAM reads are in flight at once (each
        // thread has several sub-blocks; without this each is a separate
        // round trip).
        const int bpt = Fmt<F>::BB * 32 / Fmt<F>::BE; // bytes per sub-block, rounded down
        for (int t = t0; t < nsub; t += gs) {
#pragma unroll
            for (int i = 0; i < R; i++) {
                const uint8_t* p = rows[i] + (long)t * bpt;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p + bpt));
            }
        }
        for (int t = t0; t < nsub; t += gs) {
            float q[R][32], a[R][2], b[R][2];
#pragma unroll
            for (int i = 0; i < R; i++) {
                int s;
                const uint8_t* blk = subAddr<F>(rows[i], t, s);
                sub32<F>(blk, s, q[i], a[i], b[i], lut);
            }
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const float4* xr = (const float4*)(x + (long)r * in + 32 * t);
                float xv[32];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float4 v = __ldg(xr + j);
                    xv[4 * j] = v.x;
                    xv[4 * j + 1] = v.y;
                    xv[4 * j + 2] = v.z;
                    xv[4 * j + 3] = v.w;
                }
                float sx0, sx1;
                xsum16<F>(xv, sx0, sx1);
#pragma unroll
                for (int i = 0; i < R; i++) acc[r][i] += qdot32<F>(q[i], a[i], b[i], xv, sx0, sx1);
            }
        }
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int i = 0; i < R; i++) {
            float v = warpSum(acc[r][i]);
            if (lane == 0) red[warp][r * R + i] = v;
        }
    __syncthreads();
    if (warp % wpg == 0 && lane < NR * R) {
        int r = lane / R, i = lane % R;
        float v = 0.f;
        for (int k = 0; k < wpg; k++) v += red[warp + k][lane];
        if (o0 + i < out) y[(long)r * out + o0 + i] = v;
    }
}

// ------------------------------------------------ int8-activation GEMV
// Batch-1 decode path for Q4_K, Q6_K and Q8_0 (llama.cpp's mmvq scheme):
// qx_quant rounds the activation row to int8 once per GEMV, per 32-element
// group (xs[g] = {d = max|x|/127, Σq}), and the GEMV kernels take dot
// products of the packed weight quants with it by __dp4a, applying the
// block's scales once per group. One warp per output row, 4 warps per
// block, each lane reading whole 16-byte (Q4_K) or aligned 4-byte words
// (Q6_K, Q8_0: 2-byte aligned blocks, realigned by funnel shifts).
// The rounding of x makes this path approximate (NMSE ~1e-5 against the
// exact fp32 result); POCKET_QGEMV=exact keeps the fp32 GEMV.

// qx_quant is qRound (qround.cuh) alone.
extern "C" __global__ void __launch_bounds__(256) qx_quant(uint32_t* xq, float2* xs, const float* x, int n) { PROBE_KERNEL();
    const int i = blockIdx.x * blockDim.x + threadIdx.x; // 4 elements each; 8 threads per group
    const bool ok = i < (n >> 2);
    qRound(xq, xs, ok ? __ldg((const float4*)x + i) : make_float4(0.f, 0.f, 0.f, 0.f), i, ok);
}

__device__ __forceinline__ int dp4(uint32_t a, int b, int c) { return __dp4a((int)a, b, c); }

// Q4_K: lane = 8*bi + j; lane j of a block holds qs bytes 16j..16j+15:
// low nibbles are elements 16h..16h+15 of sub-block 2c, high nibbles of
// sub-block 2c+1 (c = j/2, h = j%2).
struct LdQ4K {
    uint4 hd, qv;
    int4 x0, x1;
    float4 s;
};
__device__ __forceinline__ void ldq4k(LdQ4K& L, const uint8_t* wr, const uint8_t* xq, const float2* xs, int b, int j) {
    const uint8_t* blk = wr + (long)b * 144;
    const int c = j >> 1, h = j & 1;
    L.hd = __ldg((const uint4*)blk);
    L.qv = __ldg((const uint4*)(blk + 16 + 16 * j));
    const uint8_t* xb = xq + ((long)b << 8) + 64 * c + 16 * h;
    L.x0 = __ldg((const int4*)xb);
    L.x1 = __ldg((const int4*)(xb + 32));
    L.s = __ldg((const float4*)(xs + 8 * (long)b + 2 * c));
}
// dp4u is dp4 with the first operand's bytes unsigned (dp4a.u32.s32):
// Q4_K's high nibbles masked in place are bytes 16q, 0..240.
__device__ __forceinline__ int dp4u(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// q4kPair leaves the 6-bit scales (scp) and mins (mp) of sub-blocks 2c and
// 2c+1 of a Q4_K header in bytes 0 and 1: quant_blocks.cuh's scaleMinK4
// for a pair at once (bytes 2(c&1), 2(c&1)+1 of each scales word; scales
// bytes 0-3 are hd.y, 4-7 hd.z, 8-11 hd.w). c is constant in a lane, so
// masks and selects replace scaleMinK4's branch on j < 4.
__device__ __forceinline__ void q4kPair(uint4 hd, int c, uint32_t& scp, uint32_t& mp) {
    const bool hi = c >= 2;
    const uint32_t shp = 16 * (c & 1), mL = hi ? 0x0F0Fu : 0x3F3Fu, mH = hi ? 0x3030u : 0u;
    const uint32_t Y = hd.y >> shp, Z = hd.z >> shp, W = hd.w >> shp;
    scp = ((hi ? W : Y) & mL) | ((Y >> 2) & mH);
    mp = ((hi ? W >> 4 : Z) & mL) | ((Z >> 2) & mH);
}
// q4kSums are the integer sums of 16 Q4_K quant bytes qv with the
// activation words x0 (low nibbles: sub-block 2c) and x1 (high nibbles:
// 2c+1). The high nibbles are dotted where they lie, as unsigned bytes
// 16q (dp4a.u32.s32): sh is 16 times their sum, the 1/16 is in the scale.
__device__ __forceinline__ void q4kSums(uint4 qv, int4 x0, int4 x1, int& sl, int& sh) {
    const uint32_t M = 0x0F0F0F0Fu, MH = 0xF0F0F0F0u;
    sl = dp4(qv.x & M, x0.x, 0);
    sl = dp4(qv.y & M, x0.y, sl);
    sl = dp4(qv.z & M, x0.z, sl);
    sl = dp4(qv.w & M, x0.w, sl);
    sh = dp4u(qv.x & MH, x1.x, 0);
    sh = dp4u(qv.y & MH, x1.y, sh);
    sh = dp4u(qv.z & MH, x1.z, sh);
    sh = dp4u(qv.w & MH, x1.w, sh);
}
// q4kFinish is a Q4_K sub-block pair's contribution to a row from its
// q4kSums sl and sh (over 32 or, summed over a lane pair, 64 elements),
// the header hd and the activation's {d, Σq} pairs s; the min term only
// where withMin (once per sub-block, over the group's whole sum).
__device__ __forceinline__ float q4kFinish(uint4 hd, int c, int sl, int sh, float4 s, bool withMin) {
    uint32_t scp, mp;
    q4kPair(hd, c, scp, mp);
    const float d = h2f(hd.x & 0xffff), dm = withMin ? h2f(hd.x >> 16) : 0.f;
    float v = d * (bf2f<0, 0x4B>(scp) * s.x * (float)sl + bf2f<1, 0x49>(scp) * s.z * (float)sh);
    v -= dm * (bf2f<0, 0x4B>(mp) * (s.x * s.y) + bf2f<1, 0x4B>(mp) * (s.z * s.w));
    return v;
}
// q4kDot is one lane's share of a Q4_K block times the int8 activation:
// block header hd (d, dmin, packed scales), the lane's 16 quant bytes qv,
// the two sub-blocks' activation words x0, x1 and their {d, Σq} pairs s
// (the v1 kernel qgemv8_q4_k; qmv's qdotQ4K uses its two halves).
//
// Written for few instructions (ncu: the qmv kernels issued ~2.3 of 4
// instructions a cycle, and the scale unpacking with a branch on the
// sub-block index, as get_scale_min_k4 reads, was a third of them): see
// q4kSums and q4kPair; the min term is weighted by 0 in the lanes with
// h = 1. Products and sums in the order of the branchy version: the same
// result bits.
__device__ __forceinline__ float q4kDot(uint4 hd, uint4 qv, int4 x0, int4 x1, float4 s, int j) {
    int sl, sh;
    q4kSums(qv, x0, x1, sl, sh);
    return q4kFinish(hd, j >> 1, sl, sh, s, (j & 1) == 0);
}
__device__ __forceinline__ float cmq4k(const LdQ4K& L, int j) { return q4kDot(L.hd, L.qv, L.x0, L.x1, L.s, j); }

extern "C" __global__ void __launch_bounds__(128) qgemv8_q4_k(float* y, const uint8_t* __restrict__ xq,
                                                             const float2* __restrict__ xs,
                                                             const uint8_t* __restrict__ w, int out, int in, long rb) { PROBE_KERNEL();
    const int lane = threadIdx.x & 31, row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= out) return;
    const uint8_t* wr = w + (long)row * rb;
    const int nb = in >> 8, j = lane & 7;
    float acc = 0.f;
    for (int b = lane >> 3; b < nb; b += 8) {
        LdQ4K A, B;
        const bool hb = b + 4 < nb;
        ldq4k(A, wr, xq, xs, b, j);
        if (hb) ldq4k(B, wr, xq, xs, b + 4, j);
        acc += cmq4k(A, j);
        if (hb) acc += cmq4k(B, j);
    }
    acc = warpSum(acc);
    if (lane == 0) y[row] = acc;
}

// Q6_K: lane = 8*bi + t, n = t/4 (128-element half), l8 = t%4: elements
// 128n + 32k + 8*l8 + (0..7) for k = 0..3.
struct LdQ6K {
    uint32_t a[2], b[2], h[2], sc[2];
    uint32_t d;
    int2 x[4];
    float4 s01, s23;
};
__device__ __forceinline__ void ldq6k(LdQ6K& L, const uint8_t* wr, const uint8_t* xq, const float2* xs, int b, int t) {
    const uint8_t* blk = wr + (long)b * 210;
    const int n = t >> 2, l8 = t & 3;
    ldu<2>(blk + 64 * n + 8 * l8, L.a);
    ldu<2>(blk + 64 * n + 32 + 8 * l8, L.b);
    ldu<2>(blk + 128 + 32 * n + 8 * l8, L.h);
    ldu<2>(blk + 192 + 8 * n, L.sc);
    L.d = __ldg((const unsigned short*)(blk + 208));
    const uint8_t* xb = xq + ((long)b << 8) + 128 * n + 8 * l8;
#pragma unroll
    for (int k = 0; k < 4; k++) L.x[k] = __ldg((const int2*)(xb + 32 * k));
    const float2* sp = xs + 8 * (long)b + 4 * n;
    L.s01 = __ldg((const float4*)sp);
    L.s23 = __ldg((const float4*)(sp + 2));
}
// q6kZero leaves in z[k] -32 times the sum of the 8 activation bytes
// x[k]: the 6-bit quants are dotted as they are (0..63) and this offset
// starts each sum, so the -32 of Q6_K costs nothing per weight row (the
// activation is shared by the rows of a warp).
__device__ __forceinline__ void q6kZero(const int2* x, int (&z)[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) z[k] = -32 * dp4(0x01010101u, x[k].x, dp4(0x01010101u, x[k].y, 0));
}
// q6kDot is one lane's share of a Q6_K block times the int8 activation
// (quant bytes a, b, high bits h, scales sc, d; activation words x, their
// q6kZero offsets z and their {d, Σq} pairs s01, s23). Shared by
// qgemv8_q6_k and qmv. The integer sums equal those of the quants minus
// 32 dotted one by one; the float part is unchanged.
__device__ __forceinline__ float q6kDot(const uint32_t* a, const uint32_t* b, const uint32_t* h, const uint32_t* sc,
                                        uint32_t dd, const int2* x, const int (&z)[4], float4 s01, float4 s23,
                                        int t) {
    const uint32_t M = 0x0F0F0F0Fu, H = 0x30303030u;
    int d0 = z[0], d1 = z[1], d2 = z[2], d3 = z[3];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int xi0 = i ? x[0].y : x[0].x, xi1 = i ? x[1].y : x[1].x, xi2 = i ? x[2].y : x[2].x,
                  xi3 = i ? x[3].y : x[3].x;
        d0 = dp4((a[i] & M) | ((h[i] << 4) & H), xi0, d0);
        d1 = dp4((b[i] & M) | ((h[i] << 2) & H), xi1, d1);
        d2 = dp4(((a[i] >> 4) & M) | (h[i] & H), xi2, d2);
        d3 = dp4(((b[i] >> 4) & M) | ((h[i] >> 2) & H), xi3, d3);
    }
    const uint32_t sh = 8 * ((t & 3) >> 1);
    const float c0 = (float)(int8_t)(sc[0] >> sh), c1 = (float)(int8_t)(sc[0] >> (16 + sh)),
                c2 = (float)(int8_t)(sc[1] >> sh), c3 = (float)(int8_t)(sc[1] >> (16 + sh));
    return h2f(dd) * (c0 * s01.x * (float)d0 + c1 * s01.z * (float)d1 + c2 * s23.x * (float)d2 + c3 * s23.z * (float)d3);
}
__device__ __forceinline__ float cmq6k(const LdQ6K& L, int t) {
    int z[4];
    q6kZero(L.x, z);
    return q6kDot(L.a, L.b, L.h, L.sc, L.d, L.x, z, L.s01, L.s23, t);
}

extern "C" __global__ void __launch_bounds__(128) qgemv8_q6_k(float* y, const uint8_t* __restrict__ xq,
                                                             const float2* __restrict__ xs,
                                                             const uint8_t* __restrict__ w, int out, int in, long rb) { PROBE_KERNEL();
    const int lane = threadIdx.x & 31, row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= out) return;
    const uint8_t* wr = w + (long)row * rb;
    const int nb = in >> 8, t = lane & 7;
    float acc = 0.f;
    for (int b = lane >> 3; b < nb; b += 8) {
        LdQ6K A, B;
        const bool hb = b + 4 < nb;
        ldq6k(A, wr, xq, xs, b, t);
        if (hb) ldq6k(B, wr, xq, xs, b + 4, t);
        acc += cmq6k(A, t);
        if (hb) acc += cmq6k(B, t);
    }
    acc = warpSum(acc);
    if (lane == 0) y[row] = acc;
}

// Q8_0: two lanes per 34-byte block, 16 quants each.
struct LdQ80 {
    uint32_t q[4];
    uint32_t d;
    int4 x;
    float2 s;
};
__device__ __forceinline__ void ldq80(LdQ80& L, const uint8_t* wr, const uint8_t* xq, const float2* xs, int b, int hf) {
    const uint8_t* blk = wr + (long)b * 34;
    ldu<4>(blk + 2 + 16 * hf, L.q);
    L.d = __ldg((const unsigned short*)blk);
    L.x = __ldg((const int4*)(xq + 32 * (long)b + 16 * hf));
    L.s = __ldg(xs + b);
}
__device__ __forceinline__ float cmq80(const LdQ80& L) {
    int s = dp4(L.q[0], L.x.x, 0);
    s = dp4(L.q[1], L.x.y, s);
    s = dp4(L.q[2], L.x.z, s);
    s = dp4(L.q[3], L.x.w, s);
    return h2f(L.d) * L.s.x * (float)s;
}

extern "C" __global__ void __launch_bounds__(128) qgemv8_q8_0(float* y, const uint8_t* __restrict__ xq,
                                                             const float2* __restrict__ xs,
                                                             const uint8_t* __restrict__ w, int out, int in, long rb) { PROBE_KERNEL();
    const int lane = threadIdx.x & 31, row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= out) return;
    const uint8_t* wr = w + (long)row * rb;
    const int nb = in >> 5, hf = lane & 1;
    float acc = 0.f;
    for (int b = lane >> 1; b < nb; b += 32) {
        LdQ80 A, B;
        const bool hb = b + 16 < nb;
        ldq80(A, wr, xq, xs, b, hf);
        if (hb) ldq80(B, wr, xq, xs, b + 16, hf);
        acc += cmq80(A);
        if (hb) acc += cmq80(B);
    }
    acc = warpSum(acc);
    if (lane == 0) y[row] = acc;
}

#include "attn_merge.cuh"
#include "quant_mmv.cuh"

// ---------------------------------------------------------------- decode
// One thread per 32-element sub-block: exactly the CPU's values.
template <int F>
__device__ __forceinline__ void decode32(const uint8_t* row, int t, float (&v)[32], const float* lut) {
    float q[32], a[2], b[2];
    int s;
    const uint8_t* blk = subAddr<F>(row, t, s);
    sub32<F>(blk, s, q, a, b, lut);
#pragma unroll
    for (int j = 0; j < 32; j++) v[j] = __fsub_rn(__fmul_rn(a[j >> 4], q[j]), b[j >> 4]);
}

// Embed: dst[i, :] = row ids[i] of the table, in float32.
template <int F>
__device__ __forceinline__ void qembed(float* dst, const uint8_t* w, const int* ids, int cols, long rowBytes) {
    __shared__ float lutS[16];
    const float* lut = loadLUT<F>(lutS);
    const uint8_t* row = w + (long)ids[blockIdx.x] * rowBytes;
    for (int t = threadIdx.x; t < cols / 32; t += blockDim.x) {
        float v[32];
        decode32<F>(row, t, v, lut);
        float4* d = (float4*)(dst + (long)blockIdx.x * cols + 32 * t);
#pragma unroll
        for (int j = 0; j < 8; j++) d[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    }
}

__device__ __forceinline__ uint32_t bf16bits(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
}

// Dequantize rows [0, rows) to bf16 (row-major [rows, cols]) for the
// prefill GEMM: one thread per sub-block.
template <int F>
__device__ __forceinline__ void qdeq_bf16(uint16_t* dst, const uint8_t* w, int rows, int cols, long rowBytes) {
    __shared__ float lutS[16];
    const float* lut = loadLUT<F>(lutS);
    long nsub = (long)rows * (cols / 32);
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nsub) return;
    int r = (int)(t / (cols / 32)), c = (int)(t % (cols / 32));
    float v[32];
    decode32<F>(w + (long)r * rowBytes, c, v, lut);
    uint4* d = (uint4*)(dst + (long)r * cols + 32 * c);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t p[4];
#pragma unroll
        for (int k = 0; k < 4; k++) p[k] = bf16bits(v[8 * j + 2 * k]) | (bf16bits(v[8 * j + 2 * k + 1]) << 16);
        d[j] = make_uint4(p[0], p[1], p[2], p[3]);
    }
}

#define QFMT(F, name)                                                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                                             \
        qgemv_##name##_1(float* y, const float* x, const uint8_t* w, int out, int in, long rb, int wpg) { PROBE_KERNEL();         \
        qgemv<F, 1>(y, x, w, out, in, rb, wpg);                                                                   \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                                             \
        qgemv_##name##_2(float* y, const float* x, const uint8_t* w, int out, int in, long rb, int wpg) { PROBE_KERNEL();         \
        qgemv<F, 2>(y, x, w, out, in, rb, wpg);                                                                   \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                                             \
        qgemv_##name##_4(float* y, const float* x, const uint8_t* w, int out, int in, long rb, int wpg) { PROBE_KERNEL();         \
        qgemv<F, 4>(y, x, w, out, in, rb, wpg);                                                                   \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                                             \
        qgemv_##name##_8(float* y, const float* x, const uint8_t* w, int out, int in, long rb, int wpg) { PROBE_KERNEL();         \
        qgemv<F, 8>(y, x, w, out, in, rb, wpg);                                                                   \
    }                                                                                                             \
    extern "C" __global__ void qembed_##name(float* dst, const uint8_t* w, const int* ids, int cols, long rb) { PROBE_KERNEL();   \
        qembed<F>(dst, w, ids, cols, rb);                                                                         \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                                             \
        qdeq_##name(uint16_t* dst, const uint8_t* w, int rows, int cols, long rb) { PROBE_KERNEL();                              \
        qdeq_bf16<F>(dst, w, rows, cols, rb);                                                                     \
    }

QFMT(Q8_0, q8_0)
QFMT(Q4_0, q4_0)
QFMT(Q4_1, q4_1)
QFMT(Q5_0, q5_0)
QFMT(Q5_1, q5_1)
QFMT(Q2_K, q2_k)
QFMT(Q3_K, q3_k)
QFMT(Q4_K, q4_k)
QFMT(Q5_K, q5_k)
QFMT(Q6_K, q6_k)
QFMT(Q6_KG, q6_kg)
QFMT(Q8_0G, q8_0g)
QFMT(Q4_KG, q4_kg)
QFMT(IQ1_S, iq1_s)
QFMT(IQ1_M, iq1_m)
QFMT(IQ2_XXS, iq2_xxs)
QFMT(IQ2_XS, iq2_xs)
QFMT(IQ2_S, iq2_s)
QFMT(IQ3_XXS, iq3_xxs)
QFMT(IQ3_S, iq3_s)
QFMT(IQ4_NL, iq4_nl)
QFMT(IQ4_XS, iq4_xs)
QFMT(MXFP4, mxfp4)
