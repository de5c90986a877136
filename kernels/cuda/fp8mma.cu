// One-row FP8 GEMVs on the tensor cores (fp8mma.go): E4M3 weights with
// 128-column block scales, float32 activations, fp32 results.
//
// A warp computes a tile of 16 weight rows with mma.sync m16n8k16 (f16
// operands, fp32 accumulation). A lane (g = lane>>2, t = lane&3) holds, per
// 128-column unit (one scale block), 16 bytes of "row g" and of "row g+8" at
// columns u*128 + 16t (piece 0) and u*128 + 64 + 16t (piece 1): one
// ld.global.v4 each. Every byte pair converts exactly to an f16 pair
// (cvt.rn.f16x2.e4m3x2) and is an A register as it stands. Only the row sums
// Σ_k A[m][k]·x[k] are wanted, so the k-slot → column mapping is free as
// long as A and B agree: in k-step j of a piece, lane t's slots 2t, 2t+1
// (a0/a1, b0) are its columns 4j, 4j+1 and slots 2t+8, 2t+9 (a2/a3, b1) its
// columns 4j+2, 4j+3, i.e. word j of its 16 weight bytes and half2 words
// 2j, 2j+1 of its 16 activations. B (the activation) is the same in all 8
// n columns, so every c register of a row holds that row's sum: c0 is row
// g, c2 row g+8.
//
// "Row g" and "row g+8" are two half-tiles with their own pointers and scale
// rows: rows base+g and base+8+g of one matrix (the GEMVs), or gate and up
// row base+g (SwiGLU, whose activation is then formed in the lane).
//
// The activation is converted once per block into shared memory as f16,
// scaled by a power of two that puts max|x| (times the norm weight when
// fused) in [2^13, 2^14): f16 keeps 11 significant bits over that range, and
// the scale is undone exactly on the result. Weights and block scales are
// streamed; a unit's products are summed over its 128 columns in a fresh
// fragment and added times the block scale.
//
// Programmatic dependent launch as in decode.cu: each warp issues its first
// two units' loads (weights, never written during a step), then waits for
// the predecessor (griddepcontrol.wait) before it reads the activation.
//
// Compiled to compute_90 PTX by `go generate` (fp8mma.go).
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"
#include "f16mma.cuh"

__device__ __forceinline__ void pdlWait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    PROBE_WAITED();
}
__device__ __forceinline__ void pdlLaunchDependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Shared-memory capacities (halves) of the activation: the small kernels
// take in ≤ 8192 (16 KiB), the large ones in ≤ 24064 (47 KiB of the 48 KiB
// of static shared memory). fp8mma.go declines wider inputs.
#define XS_S 8192
#define XS_L 24064
#define UNIT 128

// kstep is k-step J (0-3) of a 64-column piece: weight word J of the
// lane's 16 bytes of rows g (wa) and g+8 (wb), activation half2 words 2J,
// 2J+1 of its 16 activations (x0: halves 0-7, x1: 8-15).
template <int J>
__device__ __forceinline__ void kstep(float* d, uint4 wa, uint4 wb, uint4 x0, uint4 x1) {
    const uint32_t* a = (const uint32_t*)&wa;
    const uint32_t* b = (const uint32_t*)&wb;
    const uint32_t* x = (const uint32_t*)(J < 2 ? &x0 : &x1);
    uint32_t a0, a1, a2, a3;
    e4m3x4(a[J], a0, a2);
    e4m3x4(b[J], a1, a3);
    mma16816(d, a0, a1, a2, a3, x[2 * (J & 1)], x[2 * (J & 1) + 1]);
}

// piece is 64 columns of the tile (16 per lane: four k-steps): wa and wb
// are the lane's 16 bytes of rows g and g+8, x0 and x1 its 16 activations
// (halves 0-7 and 8-15).
__device__ __forceinline__ void piece(float* d, uint4 wa, uint4 wb, uint4 x0, uint4 x1) {
    kstep<0>(d, wa, wb, x0, x1);
    kstep<1>(d, wa, wb, x0, x1);
    kstep<2>(d, wa, wb, x0, x1);
    kstep<3>(d, wa, wb, x0, x1);
}

// Rows are a lane's two half-tile rows: byte offsets from their matrices
// wa and wb (to the lane's first column, 16t) and element offsets of their
// block-scale rows from sca and scb (32-bit: fp8mma.go declines a matrix
// of 4 GiB or more). The bases are kernel parameters (uniform).
struct Rows {
    const uint8_t *wa, *wb;
    const float *sca, *scb;
    uint32_t a, b, sa, sb;
};

// Unit is one 128-column unit of a lane's two rows.
struct Unit {
    uint4 a0, a1, b0, b1;
};

// loadUnit loads unit u. Piece 0 always lies inside the row (in % 64 ==
// 0); piece 1 is zero past a 64-column tail.
__device__ __forceinline__ void loadUnit(Unit& p, const Rows& r, int u, int in) {
    uint32_t c = u * UNIT;
    p.a0 = ldstream((const uint4*)(r.wa + (r.a + c)));
    p.b0 = ldstream((const uint4*)(r.wb + (r.b + c)));
    if (c + UNIT <= (uint32_t)in) {
        p.a1 = ldstream((const uint4*)(r.wa + (r.a + c + 64)));
        p.b1 = ldstream((const uint4*)(r.wb + (r.b + c + 64)));
    } else {
        p.a1 = p.b1 = make_uint4(0u, 0u, 0u, 0u);
    }
}

// MmaDot is one warp's share of a tile: units first, first+stride, ...
// Two units' weights are loaded ahead of the one computed; the first two
// before the kernel waits for its predecessor.
struct MmaDot {
    Rows r;
    int u, stride, nu, in;
    Unit p0, p1;

    __device__ __forceinline__ void prefetch(const Rows& rows, int inCols, int first, int strideUnits, bool active) {
        r = rows;
        in = inCols;
        nu = active ? (inCols + UNIT - 1) / UNIT : 0;
        u = first;
        stride = strideUnits;
        if (u < nu) loadUnit(p0, r, u, in);
        if (u + stride < nu) loadUnit(p1, r, u + stride, in);
    }

    // finish streams the rest against the f16 activation xs (padded with
    // zeros to a whole unit) and leaves rows g and g+8 of the warp's
    // columns in accA and accB (unscaled).
    __device__ __forceinline__ void finish(const __half* xs, float& accA, float& accB) {
        int t = threadIdx.x & 3;
        accA = accB = 0.f;
        for (; u < nu; u += stride) {
            Unit nx;
            if (u + 2 * stride < nu) loadUnit(nx, r, u + 2 * stride, in);
            // The block scales when they are needed: a scale row's 128-byte
            // line serves 32 units, so most of these hit L1 (prefetching
            // them with the weights cost registers, and spills).
            float sa = __ldg(r.sca + (r.sa + u)), sb = __ldg(r.scb + (r.sb + u));
            const uint4* xp = (const uint4*)(xs + u * UNIT + 16 * t);
            // Two independent mma chains (one per piece).
            float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
            piece(d0, p0.a0, p0.b0, xp[0], xp[1]);
            piece(d1, p0.a1, p0.b1, xp[8], xp[9]);
            accA = fmaf(sa, d0[0] + d1[0], accA);
            accB = fmaf(sb, d0[2] + d1[2], accB);
            p0 = p1;
            p1 = nx;
        }
    }
};

// XB is the float4s of x a thread loads at once in xPrologue.
#define XB 4

// xLoad loads x4[i0 + j·blockDim.x] for j < XB (zero past nv).
__device__ __forceinline__ void xLoad(float4* v, const float4* __restrict__ x4, int i0, int nv) {
#pragma unroll
    for (int j = 0; j < XB; j++) {
        int i = i0 + j * blockDim.x;
        v[j] = i < nv ? __ldg(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// xPre sets f[j] = pre(i0 + j·blockDim.x) for j < XB: the factors of a
// multiplier that loads its own (the norm weight), issued right after x's
// loads so that both arrive in one L2 round trip. (Loaded inside the
// multiply, each behind a branch on its bounds, the norm weight's float4s
// were loads of their own after x's sums, one round trip each.)
template <class Pre>
__device__ __forceinline__ void xPre(float4* f, int i0, Pre pre) {
#pragma unroll
    for (int j = 0; j < XB; j++) f[j] = pre(i0 + j * blockDim.x);
}

// xAccum adds the float4s v (those of x at i0 + j·blockDim.x) to the sum
// of squares s and replaces them by mul(v, i, f) (f: xPre's factors),
// whose largest magnitude goes into m.
template <class Mul>
__device__ __forceinline__ void xAccum(float4* v, const float4* f, int i0, float& s, float& m, Mul mul) {
#pragma unroll
    for (int j = 0; j < XB; j++) {
        s += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        v[j] = mul(v[j], i0 + j * blockDim.x, f[j]);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
    }
}

// xStore writes the scaled f16 of the float4s v (mul already applied) at
// i0 + j·blockDim.x below nv into xs.
__device__ __forceinline__ void xStore(__half* xs, const float4* v, int i0, int nv, float sc) {
    __half2* x2 = (__half2*)xs;
#pragma unroll
    for (int j = 0; j < XB; j++) {
        int i = i0 + j * blockDim.x;
        if (i >= nv) break;
        x2[2 * i] = __floats2half2_rn(v[j].x * sc, v[j].y * sc);
        x2[2 * i + 1] = __floats2half2_rn(v[j].z * sc, v[j].w * sc);
    }
}

// pow2f is 2^k for |k| ≤ 126 (a normal float).
__device__ __forceinline__ float pow2f(int k) { return __uint_as_float((uint32_t)(127 + k) << 23); }

// stagePower is the power of two that scales an activation whose largest
// magnitude is m into [2^13, 2^14), f16's top octaves: m < 2^e for e = its
// biased exponent - 126 (m normal; a zero, subnormal or infinite m only
// meets the clamp to ±100).
__device__ __forceinline__ int stagePower(float m) {
    const int e = (int)((__float_as_uint(m) >> 23) & 0xffu) - 126;
    return min(max(14 - e, -100), 100);
}

// xPrologueRed holds xPrologueBy's per-warp sums and maxima, and the ring
// kernels' per-warp sums of squares (pipeStageBy; blocks of up to 32
// warps). Outside the templates: each instantiation would have its own
// array, and its static shared memory comes out of every ring kernel's
// budget (loadPipe).
__shared__ float xPrologueRed[32][2];

// noPre is xPrologueBy's pre for a multiplier that loads nothing.
__device__ __forceinline__ float4 noPre(int) { return make_float4(0.f, 0.f, 0.f, 0.f); }

// xPrologueBy writes f16(mul(x4[i], i, pre(i))·2^sh) for the float4s i of
// x into xs[0, in) and zeros to the next whole unit, with sh chosen so that
// the largest magnitude lies in [2^13, 2^14), and returns 2^-sh; ss is the
// sum of squares of the raw x (the RMSNorm's). mul is a norm weight, whose
// float4s pre loads (xPrologue); it is called with zeros past the end.
// Every thread of the block calls it; xs is complete on return.
//
// x is loaded twice, the second time after the block's sums (at 256
// threads and 3 blocks an SM, keeping it in registers made the norm
// kernels spill 144 bytes). The ring kernels of fp8pipe*.cuh stage theirs
// a unit at a time instead (pipeStageBy), with no block reduction.
template <class Mul, class Pre>
__device__ __forceinline__ float xPrologueBy(__half* xs, const float* __restrict__ x, int in, float& ss, Mul mul,
                                             Pre pre) {
    float(*red)[2] = xPrologueRed;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const float4* x4 = (const float4*)x;
    const int nv = in / 4, step = XB * blockDim.x;
    float m = 0.f, s = 0.f;
    // Each pass loads XB float4s per thread before using any, so a pass
    // over a wide x waits for a few L2 round trips, not one per float4.
    // The sums stay in the order of i (out-of-range loads add zero).
    for (int i0 = tid; i0 < nv; i0 += step) {
        float4 v[XB], f[XB];
        xLoad(v, x4, i0, nv);
        xPre(f, i0, pre);
        xAccum(v, f, i0, s, m, mul);
    }
    s = warpSum(s);
    m = warpMax(m);
    if (lane == 0) {
        red[warp][0] = s;
        red[warp][1] = m;
    }
    __syncthreads();
    s = 0.f;
    m = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
        s += red[w][0];
        m = fmaxf(m, red[w][1]);
    }
    ss = s;
    const int sh = stagePower(m);
    const float sc = pow2f(sh);
    for (int i0 = tid; i0 < nv; i0 += step) {
        float4 v[XB], f[XB];
        xLoad(v, x4, i0, nv);
        xPre(f, i0, pre);
#pragma unroll
        for (int j = 0; j < XB; j++) v[j] = mul(v[j], i0 + j * blockDim.x, f[j]);
        xStore(xs, v, i0, nv, sc);
    }
    int pad = (in + UNIT - 1) / UNIT * UNIT;
    for (int i = in + tid; i < pad; i += blockDim.x) xs[i] = __float2half_rn(0.f);
    __syncthreads();
    return pow2f(-sh);
}

// xPrologue is xPrologueBy times the norm weight nw (NORM; without it, 1).
template <bool NORM = false>
__device__ __forceinline__ float xPrologue(__half* xs, const float* __restrict__ x, const float* __restrict__ nw,
                                           int in, float& ss) {
    const float4* n4 = (const float4*)nw;
    const int nv = in / 4;
    if constexpr (NORM)
        return xPrologueBy(
            xs, x, in, ss, [](float4 v, int, float4 n) { return make_float4(v.x * n.x, v.y * n.y, v.z * n.z, v.w * n.w); },
            [=](int i) { return i < nv ? __ldg(n4 + i) : make_float4(0.f, 0.f, 0.f, 0.f); });
    else
        return xPrologueBy(xs, x, in, ss, [](float4 v, int, float4) { return v; }, noPre);
}

// Red is where a block's warps leave their 16 partial row sums: row w at
// p + w·stride floats (a static [warps][16] array, or the first stage of
// each warp's own ring in fp8pipe.cuh, drained by then).
struct Red {
    float* p;
    int stride;
    __device__ __forceinline__ float* operator[](int w) const { return p + w * stride; }
};

// tileSums leaves the warps' partial sums of rows g / g+8 in red[warp][g]
// and red[warp][8+g] (every thread may read them after the call).
__device__ __forceinline__ void tileSums(Red red, float accA, float accB) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if ((lane & 3) == 0) {
        red[warp][lane >> 2] = accA;
        red[warp][8 + (lane >> 2)] = accB;
    }
    __syncthreads();
}

// tileTotal is entry r of tile i of the block summed over its wpr warps.
__device__ __forceinline__ float tileTotal(Red red, int i, int wpr, int r) {
    float v = 0.f;
    for (int k = 0; k < wpr; k++) v += red[i * wpr + k][r];
    return v;
}

// gemvRows are a lane's rows of the 16-row tile at base (clamped to the
// last row: the extra sums are not stored).
__device__ __forceinline__ Rows gemvRows(const uint8_t* w, const float* sc, int base, int out, int in, int b0,
                                         int nsc) {
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int ra = min(base + g, out - 1), rb = min(base + 8 + g, out - 1);
    return Rows{w, w, sc, sc, (uint32_t)ra * in + 16 * t, (uint32_t)rb * in + 16 * t, (uint32_t)(ra / b0) * nsc,
                (uint32_t)(rb / b0) * nsc};
}

// gemvPrologue stages x in xs (xPrologue) and returns the factor that
// undoes its scaling, times 1/rms(x) for MODE 2 (y = W·rmsnorm(x)).
template <int MODE>
__device__ __forceinline__ float gemvPrologue(__half* xs, const float* __restrict__ x, const float* __restrict__ nw,
                                              float eps, int in) {
    float ss;
    float k = xPrologue<MODE == 2>(xs, x, nw, in, ss);
    if (MODE == 2) k *= rsqrtf(ss / in + eps);
    return k;
}

// gemvStore sums the warps' rows of the block's G tiles (block b of its
// matrix) and stores them times k: y = (MODE 1: y +) W·x.
// MODE 1's storing threads load y before the block's barrier, so that the
// load overlaps the wait for the other warps (as quant_mmv.cuh's qmv).
template <int MODE>
__device__ __forceinline__ void gemvStore(float* y, Red red, float accA, float accB, float k, int b, int G,
                                          int wpr, int out) {
    const int i = threadIdx.x, o = (b * G + i / 16) * 16 + i % 16;
    const bool st = i < G * 16 && o < out;
    const float y0 = MODE == 1 && st ? y[o] : 0.f;
    tileSums(red, accA, accB);
    if (st) {
        float v = tileTotal(red, i / 16, wpr, i % 16) * k;
        y[o] = MODE == 1 ? y0 + v : v;
    }
}

// gemv: y = W·x (MODE 0), y += W·x (MODE 1: y must not alias x), or
// y = W·rmsnorm(x) (MODE 2, the block's matrix of NormMatMul). Tiles of 16
// rows, wpr warps per tile, 8/wpr tiles per block; b is the block's index
// within its matrix.
template <int XS, int MODE>
__device__ __forceinline__ void gemv(float* y, const float* __restrict__ x, const float* __restrict__ nw, float eps,
                                     const uint8_t* w, const float* sc, int out, int in, int wpr, int b0, int nsc,
                                     int b) {
    __shared__ __align__(16) __half xs[XS];
    __shared__ float red[8][16];
    int warp = threadIdx.x >> 5, G = 8 / wpr;
    int base = (b * G + warp / wpr) * 16;
    MmaDot d;
    d.prefetch(gemvRows(w, sc, base, out, in, b0, nsc), in, warp % wpr, wpr, base < out);
    pdlLaunchDependents();
    pdlWait();
    float k = gemvPrologue<MODE>(xs, x, nw, eps, in);
    float accA, accB;
    d.finish(xs, accA, accB);
    gemvStore<MODE>(y, Red{&red[0][0], 16}, accA, accB, k, b, G, wpr, out);
}

#define GEMV_ARGS \
    float *y, const float *__restrict__ x, const uint8_t *w, const float *sc, int out, int in, int wpr, int b0, int nsc
#define GEMV_KERNEL(NAME, XS, MODE)                                                                   \
    extern "C" __global__ void __launch_bounds__(256, 3) NAME(GEMV_ARGS) { PROBE_KERNEL();                            \
        gemv<XS, MODE>(y, x, nullptr, 0.f, w, sc, out, in, wpr, b0, nsc, blockIdx.x);                 \
    }
GEMV_KERNEL(f8mma_r_s, XS_S, 0)
GEMV_KERNEL(f8mma_r_l, XS_L, 0)
GEMV_KERNEL(f8mma_add_s, XS_S, 1)
GEMV_KERNEL(f8mma_add_l, XS_L, 1)

// NormMatMul: y_i = W_i · rmsnorm(x) for up to four matrices sharing x (q,
// k, v); blocks [0,n0) do matrix 0, [n0,n1) matrix 1, ... (an if-chain: an
// indexed parameter array would live in local memory).
#define NORM_ARGS                                                                                              \
    const float *__restrict__ x, const float *__restrict__ nw, float eps, int in, int wpr, int b0, int nsc,    \
        float *y0, const uint8_t *w0, const float *s0, int out0, int n0, float *y1, const uint8_t *w1,          \
        const float *s1, int out1, int n1, float *y2, const uint8_t *w2, const float *s2, int out2, int n2,     \
        float *y3, const uint8_t *w3, const float *s3, int out3
#define NORM_KERNEL(NAME, XS)                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 3) NAME(NORM_ARGS) { PROBE_KERNEL();                         \
        int b = blockIdx.x;                                                                        \
        if (b < n0)                                                                                \
            gemv<XS, 2>(y0, x, nw, eps, w0, s0, out0, in, wpr, b0, nsc, b);                        \
        else if (b < n1)                                                                           \
            gemv<XS, 2>(y1, x, nw, eps, w1, s1, out1, in, wpr, b0, nsc, b - n0);                   \
        else if (b < n2)                                                                           \
            gemv<XS, 2>(y2, x, nw, eps, w2, s2, out2, in, wpr, b0, nsc, b - n1);                   \
        else                                                                                       \
            gemv<XS, 2>(y3, x, nw, eps, w3, s3, out3, in, wpr, b0, nsc, b - n2);                   \
    }
NORM_KERNEL(f8mma_norm_s, XS_S)
NORM_KERNEL(f8mma_norm_l, XS_L)

// swigluStore sums the warps' gate ("row g") and up ("row g+8") rows of the
// block's G tiles of 8 outputs, times k, and stores silu(gate)·up.
__device__ __forceinline__ void swigluStore(float* act, Red red, float accA, float accB, float k, int G,
                                            int wpr, int out) {
    tileSums(red, accA, accB);
    int i = threadIdx.x;
    if (i < G * 8) {
        int oo = (blockIdx.x * G + i / 8) * 8 + i % 8;
        if (oo < out) {
            float gv = tileTotal(red, i / 8, wpr, i % 8) * k, uv = tileTotal(red, i / 8, wpr, 8 + i % 8) * k;
            act[oo] = gv / (1.f + expf(-gv)) * uv;
        }
    }
}

// normSwiGLU: act = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)). A tile is 8
// outputs: "row g" is gate row base+g, "row g+8" up row base+g.
template <int XS>
__device__ __forceinline__ void normSwiGLU(float* act, const float* __restrict__ x, const float* __restrict__ nw,
                                           float eps, const uint8_t* wg, const float* sg, const uint8_t* wu,
                                           const float* su, int out, int in, int wpr, int b0, int nsc) {
    __shared__ __align__(16) __half xs[XS];
    __shared__ float red[8][16];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = 8 / wpr;
    int base = (blockIdx.x * G + warp / wpr) * 8;
    int o = min(base + (lane >> 2), out - 1), t = lane & 3;
    uint32_t off = (uint32_t)o * in + 16 * t, soff = (uint32_t)(o / b0) * nsc;
    MmaDot d;
    d.prefetch(Rows{wg, wu, sg, su, off, off, soff, soff}, in, warp % wpr, wpr, base < out);
    pdlLaunchDependents();
    pdlWait();
    float k = gemvPrologue<2>(xs, x, nw, eps, in);
    float accA, accB;
    d.finish(xs, accA, accB);
    swigluStore(act, Red{&red[0][0], 16}, accA, accB, k, G, wpr, out);
}

#define SWIGLU_ARGS                                                                                      \
    float *act, const float *__restrict__ x, const float *__restrict__ nw, float eps, const uint8_t *wg, \
        const float *sg, const uint8_t *wu, const float *su, int out, int in, int wpr, int b0, int nsc
extern "C" __global__ void __launch_bounds__(256, 3) f8mma_swiglu_s(SWIGLU_ARGS) { PROBE_KERNEL();
    normSwiGLU<XS_S>(act, x, nw, eps, wg, sg, wu, su, out, in, wpr, b0, nsc);
}
extern "C" __global__ void __launch_bounds__(256, 3) f8mma_swiglu_l(SWIGLU_ARGS) { PROBE_KERNEL();
    normSwiGLU<XS_L>(act, x, nw, eps, wg, sg, wu, su, out, in, wpr, b0, nsc);
}

#include "fp8pipe.cuh"
#include "fp8pipe_moe.cuh"
