// GGUF block decoding shared by the modules that read block-format weights
// in registers (quant.cu's GEMVs, Embed and prefill dequantization;
// moe_quant.cu's indexed expert GEMVs). Every format is described by one
// function, sub32, that decodes 32 consecutive elements of a row (one
// "sub-block") into two groups of 16:
//
//     w[i] = a[g]*q[i] - b[g]      (g = i/16, every product rounded, no FMA)
//
// which is exactly how kernels/quant's dequantizers compute each element
// (ggml's dequantize_row_*), so a decoded element is bit-identical to the
// CPU's, and a dot product with fp32 activations is taken in the factored
// form Σ w·x = Σ_g a[g]·Σ q·x − b[g]·Σ x (qdot32; the form the CPU's DotRow
// uses too).
//
// Blocks are only 1-, 2-, 4-, 8- or 16-byte aligned (Q6_K is 210 bytes,
// MXFP4 17), so bytes are read as aligned 32-bit words and realigned with
// funnel shifts; the upload pads every tensor so the extra word past the
// last block is inside the allocation.
//
// A module that includes this header gets its own copies of the lattice
// codebooks (quant_iq.cuh), which its loader fills (uploadLattices).
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

// kernels.DType numbers.
#define Q8_0 4
#define Q4_0 5
#define Q4_1 6
#define Q5_0 7
#define Q5_1 8
#define Q2_K 9
#define Q3_K 10
#define Q4_K 11
#define Q5_K 12
#define Q6_K 13
#define IQ1_S 14
#define IQ1_M 15
#define IQ2_XXS 16
#define IQ2_XS 17
#define IQ2_S 18
#define IQ3_XXS 19
#define IQ3_S 20
#define IQ4_NL 21
#define IQ4_XS 22
#define MXFP4 23
// Q6_KG, Q8_0G and Q4_KG are no file formats: Q6_K, Q8_0 and Q4_K
// regrouped by the CUDA backend, four blocks to an 840-byte group, eight to
// a 272-byte one and eight to a 1152-byte one (regroup.go has the layouts
// and why).
#define Q6_KG 64
#define Q8_0G 65
#define Q4_KG 66

__device__ __forceinline__ float h2f(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)h)); }

// u2f converts 0 <= n < 2^23 to float exactly without an I2F (quarter rate).
__device__ __forceinline__ float u2f(uint32_t n) { return __uint_as_float(0x4B000000u | n) - 8388608.f; }
// s2f converts -2^15 <= v < 2^15 exactly.
__device__ __forceinline__ float s2f(int v) { return __uint_as_float(0x4B000000u | (uint32_t)(v + 32768)) - 8421376.f; }

// bf2f is u2f of byte K of v, scaled by 2^(2·(E-0x4B)): E = 0x4B gives
// the byte, 0x49 the byte / 16, exactly. One PRMT and one FADD (the
// Q4_K dots, quant.cu).
template <int K, uint32_t E>
__device__ __forceinline__ float bf2f(uint32_t v) {
    return __uint_as_float(__byte_perm(v, E << 24, 0x7440 + K)) - __uint_as_float(E << 24);
}

__device__ __forceinline__ uint32_t ldw(const uint32_t* p) { return __ldg(p); }

// ldu reads N 32-bit little-endian words starting at any byte address.
template <int N>
__device__ __forceinline__ void ldu(const uint8_t* p, uint32_t (&o)[N]) {
    uintptr_t a = (uintptr_t)p;
    const uint32_t* w = (const uint32_t*)(a & ~(uintptr_t)3);
    uint32_t sh = (uint32_t)(a & 3) * 8;
    uint32_t t[N + 1];
#pragma unroll
    for (int i = 0; i <= N; i++) t[i] = ldw(w + i);
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = __funnelshift_r(t[i], t[i + 1], sh);
}

__device__ __forceinline__ uint32_t byteAt(const uint32_t* w, int i) { return (w[i >> 2] >> (8 * (i & 3))) & 0xffu; }

// kvalues of IQ4_NL/IQ4_XS and doubled FP4 of MXFP4, indexed by nibble.
__constant__ float kIQ4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
__constant__ float kFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

template <int F> struct Fmt;
// BE: elements per block, BB: bytes per block, HASB: whether b can be non-zero.
template <> struct Fmt<Q8_0> { enum { BE = 32, BB = 34, HASB = 0, LUT = 0 }; };
template <> struct Fmt<Q4_0> { enum { BE = 32, BB = 18, HASB = 0, LUT = 0 }; };
template <> struct Fmt<Q4_1> { enum { BE = 32, BB = 20, HASB = 1, LUT = 0 }; };
template <> struct Fmt<Q5_0> { enum { BE = 32, BB = 22, HASB = 0, LUT = 0 }; };
template <> struct Fmt<Q5_1> { enum { BE = 32, BB = 24, HASB = 1, LUT = 0 }; };
template <> struct Fmt<Q2_K> { enum { BE = 256, BB = 84, HASB = 1, LUT = 0 }; };
template <> struct Fmt<Q3_K> { enum { BE = 256, BB = 110, HASB = 0, LUT = 0 }; };
template <> struct Fmt<Q4_K> { enum { BE = 256, BB = 144, HASB = 1, LUT = 0 }; };
template <> struct Fmt<Q5_K> { enum { BE = 256, BB = 176, HASB = 1, LUT = 0 }; };
template <> struct Fmt<Q6_K> { enum { BE = 256, BB = 210, HASB = 0, LUT = 0 }; };
template <> struct Fmt<Q6_KG> { enum { BE = 1024, BB = 840, HASB = 0, LUT = 0 }; };
template <> struct Fmt<Q8_0G> { enum { BE = 256, BB = 272, HASB = 0, LUT = 0 }; };
template <> struct Fmt<Q4_KG> { enum { BE = 2048, BB = 1152, HASB = 1, LUT = 0 }; };
template <> struct Fmt<IQ1_S> { enum { BE = 256, BB = 50, HASB = 0, LUT = 0 }; };
template <> struct Fmt<IQ1_M> { enum { BE = 256, BB = 56, HASB = 0, LUT = 0 }; };
template <> struct Fmt<IQ2_XXS> { enum { BE = 256, BB = 66, HASB = 0, LUT = 0 }; };
template <> struct Fmt<IQ2_XS> { enum { BE = 256, BB = 74, HASB = 0, LUT = 0 }; };
template <> struct Fmt<IQ2_S> { enum { BE = 256, BB = 82, HASB = 0, LUT = 0 }; };
template <> struct Fmt<IQ3_XXS> { enum { BE = 256, BB = 98, HASB = 0, LUT = 0 }; };
template <> struct Fmt<IQ3_S> { enum { BE = 256, BB = 110, HASB = 0, LUT = 0 }; };
template <> struct Fmt<IQ4_NL> { enum { BE = 32, BB = 18, HASB = 0, LUT = 1 }; };
template <> struct Fmt<IQ4_XS> { enum { BE = 256, BB = 136, HASB = 0, LUT = 1 }; };
template <> struct Fmt<MXFP4> { enum { BE = 32, BB = 17, HASB = 0, LUT = 2 }; };

// 6-bit scale and min of sub-block j from Q4_K/Q5_K's 12 packed bytes.
__device__ __forceinline__ void scaleMinK4(int j, const uint32_t* s, uint32_t& d, uint32_t& m) {
    if (j < 4) {
        d = byteAt(s, j) & 63;
        m = byteAt(s, j + 4) & 63;
    } else {
        d = (byteAt(s, j + 4) & 0xF) | ((byteAt(s, j - 4) >> 6) << 4);
        m = (byteAt(s, j + 4) >> 4) | ((byteAt(s, j) >> 6) << 4);
    }
}

#include "quant_iq.cuh"

// sub32 decodes sub-block s of the block at blk: q[32], a[2], b[2].
// lut: the block's shared-memory codebook for the LUT formats.
template <int F>
__device__ __forceinline__ void sub32(const uint8_t* blk, int s, float (&q)[32], float (&a)[2], float (&b)[2],
                                      const float* lut) {
    b[0] = b[1] = 0.f;
    if (F == Q8_0) {
        uint32_t w[9];
        ldu<9>(blk, w); // d (2 bytes) then 32 int8
        float d = h2f(w[0] & 0xffff);
        a[0] = a[1] = d;
#pragma unroll
        for (int i = 0; i < 32; i++) q[i] = s2f((int)(int8_t)byteAt(w, i + 2));
    } else if (F == Q8_0G) {
        // Block s of the group: its quants at 32s, its d at 256 + 2s.
        uint32_t w[8], dd[1];
        ldu<8>(blk + 32 * s, w);
        ldu<1>(blk + 256 + 2 * s, dd);
        a[0] = a[1] = h2f(dd[0] & 0xffff);
#pragma unroll
        for (int i = 0; i < 32; i++) q[i] = s2f((int)(int8_t)byteAt(w, i));
    } else if (F == Q4_0 || F == IQ4_NL || F == Q5_0 || F == MXFP4) {
        // [scale][qh: Q5_0][16 bytes of nibbles]
        const int off = F == Q5_0 ? 6 : (F == MXFP4 ? 1 : 2);
        uint32_t w[4], h[2];
        ldu<4>(blk + off, w);
        float d;
        if (F == MXFP4) {
            uint32_t e = blk[0];
            d = e < 2 ? __uint_as_float(0x00200000u << e) : __uint_as_float((e - 1) << 23);
        } else {
            ldu<2>(blk, h);
            d = h2f(h[0] & 0xffff);
        }
        uint32_t qh = F == Q5_0 ? __funnelshift_r(h[0], h[1], 16) : 0;
        a[0] = a[1] = d;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            uint32_t lo = byteAt(w, j) & 15, hi = byteAt(w, j) >> 4;
            if (F == Q4_0) {
                q[j] = s2f((int)lo - 8);
                q[j + 16] = s2f((int)hi - 8);
            } else if (F == Q5_0) {
                uint32_t h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
                q[j] = s2f((int)(lo | h0) - 16);
                q[j + 16] = s2f((int)(hi | h1) - 16);
            } else {
                q[j] = lut[lo];
                q[j + 16] = lut[hi];
            }
        }
    } else if (F == Q4_1 || F == Q5_1) {
        // [d][m][qh: Q5_1][16 bytes]: y = q*d + m
        const int off = F == Q5_1 ? 8 : 4;
        uint32_t h[2], w[4];
        ldu<2>(blk, h);
        ldu<4>(blk + off, w);
        float d = h2f(h[0] & 0xffff), m = h2f(h[0] >> 16);
        a[0] = a[1] = d;
        b[0] = b[1] = -m;
        uint32_t qh = h[1];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            uint32_t lo = byteAt(w, j) & 15, hi = byteAt(w, j) >> 4;
            if (F == Q5_1) {
                lo |= ((qh >> j) << 4) & 0x10;
                hi |= (qh >> (j + 12)) & 0x10;
            }
            q[j] = u2f(lo);
            q[j + 16] = u2f(hi);
        }
    } else if (F == Q4_K || F == Q5_K || F == Q4_KG) {
        uint32_t hd[4], w[8];
        if (F == Q4_KG) {
            // Block s/8 of the group: its header at 16(s/8), its quants at
            // 128 + 128(s/8); then sub-block s%8 of it.
            const int k = s >> 3;
            s &= 7;
            ldu<4>(blk + 16 * k, hd);
            ldu<8>(blk + 128 + 128 * k + 32 * (s >> 1), w);
        } else {
            ldu<4>(blk, hd); // d, dmin, scales[12]
            const int qoff = F == Q5_K ? 48 : 16;
            ldu<8>(blk + qoff + 32 * (s >> 1), w);
        }
        uint32_t sc, mn;
        scaleMinK4(s, hd + 1, sc, mn);
        float d = h2f(hd[0] & 0xffff), dmin = h2f(hd[0] >> 16);
        a[0] = a[1] = d * u2f(sc);
        b[0] = b[1] = dmin * u2f(mn);
        uint32_t qh[8];
        if (F == Q5_K) ldu<8>(blk + 16, qh);
        const int shift = (s & 1) * 4;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            uint32_t v = (byteAt(w, l) >> shift) & 15;
            if (F == Q5_K) v |= ((byteAt(qh, l) >> s) & 1) << 4;
            q[l] = u2f(v);
        }
    } else if (F == Q6_K || F == Q6_KG) {
        const int n = (s >> 2) & 1, k = s & 3;
        uint32_t ql[8], qh[8], sc[4], dd[1];
        if (F == Q6_K) {
            ldu<8>(blk + 64 * n + 32 * (k & 1), ql);
            ldu<8>(blk + 128 + 32 * n, qh);
            ldu<4>(blk + 192, sc); // 16 scales; d at 208 follows
            ldu<1>(blk + 208, dd);
        } else {
            // Sub-block s of a group: block s/8 of it, sub-block s%8 of that
            // block; its ql runs are the 8-byte halves of four lanes.
            const int g = s >> 3;
            const uint8_t* q = blk + 192 * g;
#pragma unroll
            for (int c = 0; c < 4; c++) ldu<2>(q + 64 * n + 16 * c + 8 * (k & 1), *(uint32_t(*)[2])(ql + 2 * c));
            ldu<8>(q + 128 + 32 * n, qh);
            ldu<4>(blk + 768 + 16 * g, sc);
            ldu<1>(blk + 832 + 2 * g, dd);
        }
        float d = h2f(dd[0] & 0xffff);
        a[0] = d * s2f((int)(int8_t)byteAt(sc, 8 * n + 2 * k));
        a[1] = d * s2f((int)(int8_t)byteAt(sc, 8 * n + 2 * k + 1));
        const int lsh = (k >> 1) * 4, hsh = 2 * k;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int v = (int)(((byteAt(ql, l) >> lsh) & 15) | (((byteAt(qh, l) >> hsh) & 3) << 4)) - 32;
            q[l] = s2f(v);
        }
    } else if (F == Q2_K) {
        // scales[16], qs[64], d, dmin
        const int n = s >> 2, k = s & 3;
        uint32_t sc[4], w[8], dd[1];
        ldu<4>(blk, sc);
        ldu<8>(blk + 16 + 32 * n, w);
        ldu<1>(blk + 80, dd);
        float d = h2f(dd[0] & 0xffff), mn = h2f(dd[0] >> 16);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t v = byteAt(sc, 8 * n + 2 * k + h);
            a[h] = d * u2f(v & 15);
            b[h] = mn * u2f(v >> 4);
        }
#pragma unroll
        for (int l = 0; l < 32; l++) q[l] = u2f((byteAt(w, l) >> (2 * k)) & 3);
    } else if (F == Q3_K) {
        // hmask[32], qs[64], scales[12], d
        const int n = s >> 2, k = s & 3;
        uint32_t hm[8], w[8], p[3], dd[1];
        ldu<8>(blk, hm);
        ldu<8>(blk + 32 + 32 * n, w);
        ldu<3>(blk + 96, p);
        ldu<1>(blk + 108, dd);
        float d = h2f(dd[0] & 0xffff);
        const uint32_t km1 = 0x03030303u, km2 = 0x0f0f0f0fu;
        uint32_t aux[4] = {(p[0] & km2) | (((p[2] >> 0) & km1) << 4), (p[1] & km2) | (((p[2] >> 2) & km1) << 4),
                           ((p[0] >> 4) & km2) | (((p[2] >> 4) & km1) << 4),
                           ((p[1] >> 4) & km2) | (((p[2] >> 6) & km1) << 4)};
#pragma unroll
        for (int h = 0; h < 2; h++) a[h] = d * s2f((int)(int8_t)byteAt(aux, 8 * n + 2 * k + h) - 32);
        const uint32_t m = 1u << (4 * n + k);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int v = (int)((byteAt(w, l) >> (2 * k)) & 3);
            if ((byteAt(hm, l) & m) == 0) v -= 4;
            q[l] = s2f(v);
        }
    } else if (F == IQ4_XS) {
        // d, scales_h (u16), scales_l[4], qs[128]
        uint32_t hd[2], w[4];
        ldu<2>(blk, hd);
        ldu<4>(blk + 8 + 16 * s, w);
        float d = h2f(hd[0] & 0xffff);
        uint32_t sh = hd[0] >> 16;
        int ls = (int)((byteAt(hd + 1, s >> 1) >> (4 * (s & 1))) & 0xf) | (int)(((sh >> (2 * s)) & 3) << 4);
        a[0] = a[1] = d * s2f(ls - 32);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            q[j] = lut[byteAt(w, j) & 15];
            q[j + 16] = lut[byteAt(w, j) >> 4];
        }
    } else if (F >= IQ1_S && F <= IQ3_S) {
        subIQ<F>(blk, s, q, a);
    }
}

template <int F>
__device__ __forceinline__ const float* loadLUT(float* sh) {
    if (Fmt<F>::LUT == 0) return nullptr;
    if (threadIdx.x < 16) sh[threadIdx.x] = Fmt<F>::LUT == 1 ? kIQ4[threadIdx.x] : kFP4[threadIdx.x];
    __syncthreads();
    return sh;
}

// sub-block t of a row: its block's address and the sub index within.
template <int F>
__device__ __forceinline__ const uint8_t* subAddr(const uint8_t* row, int t, int& s) {
    const int spb = Fmt<F>::BE / 32;
    s = t % spb;
    return row + (long)(t / spb) * Fmt<F>::BB;
}

// xsum16 is Σx over each half of a sub-block's 32 activations, which the
// formats with an offset (b != 0) subtract as b[g]·Σx.
template <int F>
__device__ __forceinline__ void xsum16(const float (&xv)[32], float& sx0, float& sx1) {
    sx0 = sx1 = 0.f;
    if (Fmt<F>::HASB) {
#pragma unroll
        for (int j = 0; j < 16; j++) {
            sx0 += xv[j];
            sx1 += xv[j + 16];
        }
    }
}

// qdot32 is one decoded sub-block (q, a, b as sub32 leaves them) times 32
// fp32 activations xv, whose half sums xsum16 gave: fp32 FMAs over q·x in
// four chains, then the scales.
template <int F>
__device__ __forceinline__ float qdot32(const float (&q)[32], const float (&a)[2], const float (&b)[2],
                                        const float (&xv)[32], float sx0, float sx1) {
    float d0 = 0.f, d1 = 0.f, e0 = 0.f, e1 = 0.f;
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
        d0 = fmaf(q[j], xv[j], d0);
        e0 = fmaf(q[j + 1], xv[j + 1], e0);
        d1 = fmaf(q[j + 16], xv[j + 16], d1);
        e1 = fmaf(q[j + 17], xv[j + 17], e1);
    }
    float v = a[0] * (d0 + e0) + a[1] * (d1 + e1);
    if (Fmt<F>::HASB) v -= b[0] * sx0 + b[1] * sx1;
    return v;
}
