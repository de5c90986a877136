// The lattice i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) for quant_blocks.cuh: subIQ decodes sub-block s (32 elements, 8
// per block) into sub32's form w = a[g]*q with b = 0, where q already
// carries the point's sign (IQ2/IQ3) or the IQ1 delta, both exact in
// float, so that a*q rounds exactly like kernels/quant's (scale*grid)*sign
// and scale*(grid+delta).
//
// The codebooks are not written out here: each module that includes them
// (quant.cu, moe_quant.cu) has its own copies, which its loader fills once,
// when the module loads, from kernels/quant.Lattice (uploadLattices; the
// tables the CPU dequantizers read), so the backends cannot disagree on a
// point. They live in global memory rather than __constant__ because
// every thread of a warp looks up a different point: constant memory would
// serialise those reads, the read-only L1 path serves them in parallel, and
// the ~33 KiB of all six stays resident in L1.
//
// One byte per coordinate (int8; point k's coordinate i is byte i of word
// k, little-endian).
__device__ unsigned long long gridIQ1S[2048];  // IQ1_S and IQ1_M: -1, 0, +1
__device__ unsigned long long gridIQ2XXS[256]; // 8..62
__device__ unsigned long long gridIQ2XS[512];
__device__ unsigned long long gridIQ2S[1024];
__device__ uint32_t gridIQ3XXS[256]; // 4..62
__device__ uint32_t gridIQ3S[512];   // 1..15

// ksign expands 7 stored sign bits to 8: the eighth makes the number of
// negative coordinates even (IQ2_XXS, IQ2_XS, IQ3_XXS).
__device__ __forceinline__ uint32_t ksign(uint32_t s7) { return s7 | ((__popc(s7) & 1) << 7); }

// putSigned writes the N coordinates of point g to q, negated where bit j
// of m is set.
template <int N, typename T>
__device__ __forceinline__ void putSigned(float* q, T g, uint32_t m) {
#pragma unroll
    for (int j = 0; j < N; j++) {
        int v = (int)(int8_t)(g >> (8 * j));
        q[j] = s2f((m >> j) & 1 ? -v : v);
    }
}

// putDelta writes the 8 coordinates of IQ1 point g plus delta.
__device__ __forceinline__ void putDelta(float* q, unsigned long long g, float delta) {
#pragma unroll
    for (int j = 0; j < 8; j++) q[j] = s2f((int)(int8_t)(g >> (8 * j))) + delta;
}

// halfStep is d * (0.5 + k) * f, rounded after each product as the CPU
// does (0.5 + k is exact).
__device__ __forceinline__ float halfStep(float d, uint32_t k, float f) {
    return __fmul_rn(__fmul_rn(d, u2f(k) + 0.5f), f);
}

template <int F>
__device__ __forceinline__ void subIQ(const uint8_t* blk, int s, float (&q)[32], float (&a)[2]) {
    if (F == IQ2_XXS) {
        // d, then per sub-block 4 grid indices and a word of 4×7 sign bits
        // over a 4-bit scale.
        uint32_t hd[1], w[2];
        ldu<1>(blk, hd);
        ldu<2>(blk + 2 + 8 * s, w);
        a[0] = a[1] = halfStep(h2f(hd[0] & 0xffff), w[1] >> 28, 0.25f);
#pragma unroll
        for (int l = 0; l < 4; l++)
            putSigned<8>(q + 8 * l, __ldg(&gridIQ2XXS[byteAt(w, l)]), ksign((w[1] >> (7 * l)) & 127));
    } else if (F == IQ2_XS) {
        // d, qs[32] u16 (9-bit index, 7 sign bits), scales[8] (two nibbles).
        uint32_t hd[1], w[2], sc[1];
        ldu<1>(blk, hd);
        ldu<2>(blk + 2 + 8 * s, w);
        ldu<1>(blk + 66 + s, sc);
        const float d = h2f(hd[0] & 0xffff);
        a[0] = halfStep(d, sc[0] & 15, 0.25f);
        a[1] = halfStep(d, (sc[0] >> 4) & 15, 0.25f);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t v = (w[l >> 1] >> (16 * (l & 1))) & 0xffff;
            putSigned<8>(q + 8 * l, __ldg(&gridIQ2XS[v & 511]), ksign(v >> 9));
        }
    } else if (F == IQ2_S) {
        // d, qs[32], signs[32], qh[8] (2 index bits per point), scales[8].
        uint32_t hd[1], w[1], sg[1], qh[1], sc[1];
        ldu<1>(blk, hd);
        ldu<1>(blk + 2 + 4 * s, w);
        ldu<1>(blk + 34 + 4 * s, sg);
        ldu<1>(blk + 66 + s, qh);
        ldu<1>(blk + 74 + s, sc);
        const float d = h2f(hd[0] & 0xffff);
        a[0] = halfStep(d, sc[0] & 15, 0.25f);
        a[1] = halfStep(d, (sc[0] >> 4) & 15, 0.25f);
        const uint32_t h = qh[0] & 0xff;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t idx = byteAt(w, l) | ((h << (8 - 2 * l)) & 0x300);
            putSigned<8>(q + 8 * l, __ldg(&gridIQ2S[idx]), byteAt(sg, l));
        }
    } else if (F == IQ3_XXS) {
        // d, qs[64] (8 indices of 4-coordinate points per sub-block), then
        // per sub-block a word of 4×7 sign bits over a 4-bit scale.
        uint32_t hd[1], w[2], aux[1];
        ldu<1>(blk, hd);
        ldu<2>(blk + 2 + 8 * s, w);
        ldu<1>(blk + 66 + 4 * s, aux);
        a[0] = a[1] = halfStep(h2f(hd[0] & 0xffff), aux[0] >> 28, 0.5f);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t m = ksign((aux[0] >> (7 * l)) & 127);
            putSigned<4>(q + 8 * l, __ldg(&gridIQ3XXS[byteAt(w, 2 * l)]), m);
            putSigned<4>(q + 8 * l + 4, __ldg(&gridIQ3XXS[byteAt(w, 2 * l + 1)]), m >> 4);
        }
    } else if (F == IQ3_S) {
        // d, qs[64], qh[8] (1 index bit per point), signs[32], scales[4].
        uint32_t hd[1], w[2], qh[1], sg[1], sc[1];
        ldu<1>(blk, hd);
        ldu<2>(blk + 2 + 8 * s, w);
        ldu<1>(blk + 66 + s, qh);
        ldu<1>(blk + 74 + 4 * s, sg);
        ldu<1>(blk + 106 + (s >> 1), sc);
        const uint32_t k = (sc[0] >> (4 * (s & 1))) & 15;
        a[0] = a[1] = __fmul_rn(h2f(hd[0] & 0xffff), u2f(1 + 2 * k));
        const uint32_t h = qh[0] & 0xff;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t i1 = byteAt(w, 2 * l) | ((h << (8 - 2 * l)) & 256);
            const uint32_t i2 = byteAt(w, 2 * l + 1) | ((h << (7 - 2 * l)) & 256);
            const uint32_t m = byteAt(sg, l);
            putSigned<4>(q + 8 * l, __ldg(&gridIQ3S[i1]), m);
            putSigned<4>(q + 8 * l + 4, __ldg(&gridIQ3S[i2]), m >> 4);
        }
    } else if (F == IQ1_S) {
        // d, qs[32], qh[8] u16: 3 index bits per point, a 3-bit scale and
        // the delta's sign.
        uint32_t hd[1], w[1], hw[1];
        ldu<1>(blk, hd);
        ldu<1>(blk + 2 + 4 * s, w);
        ldu<1>(blk + 34 + 2 * s, hw);
        const uint32_t qh = hw[0] & 0xffff;
        a[0] = a[1] = __fmul_rn(h2f(hd[0] & 0xffff), u2f(2 * ((qh >> 12) & 7) + 1));
        const float delta = qh & 0x8000 ? -0.125f : 0.125f;
#pragma unroll
        for (int l = 0; l < 4; l++)
            putDelta(q + 8 * l, __ldg(&gridIQ1S[byteAt(w, l) | (((qh >> (3 * l)) & 7) << 8)]), delta);
    } else if (F == IQ1_M) {
        // qs[32], qh[16] (per point 3 index bits and the delta's sign),
        // scales: 4 u16 of 3-bit sub-scales whose top nibbles are d.
        uint32_t w[1], hw[1], sc[2];
        ldu<1>(blk + 4 * s, w);
        ldu<1>(blk + 32 + 2 * s, hw);
        ldu<2>(blk + 48, sc);
        const uint32_t dbits = (sc[0] >> 12 & 0xf) | (sc[0] >> 24 & 0xf0) | (sc[1] >> 4 & 0xf00) | (sc[1] >> 16 & 0xf000);
        const float d = h2f(dbits);
        const uint32_t sv = ((sc[s >> 2] >> (16 * ((s >> 1) & 1))) & 0xffff) >> (6 * (s & 1));
        a[0] = __fmul_rn(d, u2f(2 * (sv & 7) + 1));
        a[1] = __fmul_rn(d, u2f(2 * ((sv >> 3) & 7) + 1));
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t h = (hw[0] >> (8 * (l >> 1))) & 0xff; // qh byte of points 2(l/2), 2(l/2)+1
            const uint32_t idx = byteAt(w, l) | ((h << (8 - 4 * (l & 1))) & 0x700);
            const bool neg = h & ((l & 1) ? 0x80 : 0x08);
            putDelta(q + 8 * l, __ldg(&gridIQ1S[idx]), neg ? -0.125f : 0.125f);
        }
    }
}
