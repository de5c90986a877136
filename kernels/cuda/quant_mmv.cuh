// Batch-1 GEMVs of Q4_K, Q6_K and Q8_0 over int8 activations, second
// version (included by quant.cu; quant_mmv.go launches them). The v1
// kernels above (qgemv8_*) give a warp one weight row, so every lane loads
// its 32 int8 activations and their scales per 16 bytes of weights and a
// 4096-wide row leaves a warp with only a few loads in flight. Here:
//
//   - a warp computes QR = 4 weight rows at once: each activation load
//     serves four rows, and a lane has 4 rows' blocks in flight per step;
//   - wpr warps split a group's columns (steps of 1024 elements: 8 lanes
//     per 256-element block, 4 blocks per warp), so that short matrices
//     still give every SM several blocks; the grid is sized in Go;
//   - the first step's weights are loaded before griddepcontrol.wait
//     (weights are never written during a step; PDL as decode.cu). Loads
//     of the next step issued before computing the current one (a rolling
//     double buffer) took 108-128 registers (2 blocks per SM): not done;
//     the warps of other groups keep the loads in flight instead: qmv and
//     qmv_swiglu are __launch_bounds__(256, 3), 80 registers, 24 warps
//     per SM (qmv took 104, 2 blocks per SM, until its rows became one
//     pointer and 32-bit offsets, QRowsO). Instead of a second step in
//     registers, each warp asks L2 for the step after the next one
//     (prefetch.global.L2, qpf; POCKET_QMV_PF steps ahead, 0: none), so a
//     step's loads find their lines on the way from DRAM: ~2 steps in
//     flight per warp for one step's registers. Fitting it into 80
//     registers took wpr as shifts (a power of two), qmv_swiglu's rows as
//     two pointers (QRows2), and the output's matrix selected again after
//     the GEMV rather than held through it;
//   - every block quantizes the whole activation into its shared memory
//     after griddepcontrol.wait (qxShared; times an RMSNorm weight, the
//     norm's 1/rms applied to the dot products), so a fused op is one
//     launch: a separate quantize kernel (qx_norm until now) cost a kernel
//     boundary, ~1-2 us in a graph, before each of a layer's 4 GEMV
//     launches. The redundant work is ~in/256 float4 loads per thread, from
//     L1/L2; the activation loads of the dot products are then ld.shared;
//   - one launch covers up to four matrices (q, k, v) of any of the three
//     formats, or gate and up with the SwiGLU formed where both dots end.
//
// Lane mapping per 256-element block (j = lane % 8) as the v1 kernels:
// Q4_K lane j reads qs bytes 16j..16j+15 (sub-blocks 2c, 2c+1 with c = j/2,
// half h = j%2) and the 16-byte header; Q6_K lane j covers elements
// 128n + 32k + 8*(j%4) + (0..7), n = j/4, k = 0..3; Q8_0 lane j the whole
// 34-byte block 8*b + j.
#define QR 4
#define QMV_PLAIN 0
#define QMV_ADD 1
#define QMV_NORM 2

__device__ __forceinline__ void qPdlWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void qPdlLaunch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// ldnc loads 16 bytes of weights, read once per pass: not kept in L1.
__device__ __forceinline__ uint4 ldnc(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

// QMV_MAXIN is the longest row qmv and qmv_swiglu take: each block holds
// the int8 activation in shared memory (QMV_MAXIN bytes of values, QMV_MAXIN
// / 32 float2 scales: 40 KiB static, 3 blocks per SM).
#define QMV_MAXIN 32768

// QIn is a block's activation: the int8 values (xq, in bytes) and their
// {d, Σq} per 32 elements (xs), both in shared memory.
struct QIn {
    const uint8_t* xq;
    const float2* xs;
};

// qxShared rounds x (times nw when nw is not null) to int8 per 32 elements
// into the block's shared memory, as the first int8 kernels (qx_quant) do:
// d = max|v|/127, q = rn(v·127/max|v|), and Σq per 32 for the Q4_K min
// term. Every block of a launch quantizes the whole row itself (the same
// fp32 operations in the same order, so every block holds the same values):
// no separate quantize launch, no global scratch, nothing shared between
// blocks, so it is correct under PDL and graph replay as it stands. With nw
// it returns 1/rms of the raw x (the RMSNorm factor, applied to the dot
// products; red: 8 floats of shared memory), which qinv reads back after
// the GEMV (rather than a register held through it). All threads must call
// it (it synchronizes the block); in % 256 == 0, in <= QMV_MAXIN.
__device__ __forceinline__ void qxShared(uint32_t* sq, float2* sx, float* red, const float* __restrict__ x,
                                         const float* __restrict__ nw, int in) {
    const int n4 = in >> 2; // a multiple of 64: whole warps stay in the loop
    float ss = 0.f;
    for (int i = threadIdx.x; i < n4; i += 256) {
        float4 v = __ldg((const float4*)x + i);
        if (nw != nullptr) {
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            const float4 g = __ldg((const float4*)nw + i);
            v = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
        }
        float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
        const float d = am / 127.f, id = am > 0.f ? 127.f / am : 0.f;
        const int q0 = __float2int_rn(v.x * id), q1 = __float2int_rn(v.y * id), q2 = __float2int_rn(v.z * id),
                  q3 = __float2int_rn(v.w * id);
        int s = q0 + q1 + q2 + q3;
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        sq[i] = (uint32_t)(q0 & 0xff) | ((uint32_t)(q1 & 0xff) << 8) | ((uint32_t)(q2 & 0xff) << 16) |
                ((uint32_t)(q3 & 0xff) << 24);
        if ((i & 7) == 0) sx[i >> 3] = make_float2(d, (float)s);
    }
    if (nw != nullptr) {
        ss = warpSum(ss);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    }
    __syncthreads(); // sq, sx and red complete
}

// qinv is the RMSNorm factor 1/rms from qxShared's sums of squares.
__device__ __forceinline__ float qinv(const float* red, int in, float eps) {
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < 8; k++) t += red[k];
    return rsqrtf(t / in + eps);
}

// qxPrefetch asks L2 for the norm vector (a weight: it may be read before
// griddepcontrol.wait), one 128-byte line per thread.
__device__ __forceinline__ void qxPrefetch(const float* nw, int in) {
    if (nw == nullptr) return;
    for (int i = threadIdx.x * 32; i < in; i += 256 * 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(nw + i));
}

// qctaid is blockIdx.x read anew (asm volatile: the compiler cannot keep a
// value derived from an earlier read alive instead of recomputing it).
__device__ __forceinline__ int qctaid() {
    int b;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(b));
    return b;
}

// QT<F>: a lane's weights (W) and activations (X) of one 256-element block,
// their loads and the dot product.
template <int F> struct QT;

template <> struct QT<Q4_K> {
    static constexpr int BB = 144; // bytes per 256 elements
    struct W {
        uint4 hd, qv;
    };
    struct X {
        int4 x0, x1;
        float4 s;
    };
    // Rows are 16-byte aligned: 144-byte blocks from a 256-byte aligned base.
    static __device__ __forceinline__ void ldW(W& w, const uint8_t* wr, int b, int j) {
        const uint8_t* blk = wr + (long)b * 144;
        w.hd = ldnc(blk);
        w.qv = ldnc(blk + 16 + 16 * j);
    }
    static __device__ __forceinline__ void ldX(X& x, const uint8_t* xq, const float2* xs, int b, int j) {
        const int c = j >> 1, h = j & 1;
        const uint8_t* xb = xq + (b << 8) + 64 * c + 16 * h;
        x.x0 = *(const int4*)xb;
        x.x1 = *(const int4*)(xb + 32);
        x.s = *(const float4*)(xs + 8 * b + 2 * c);
    }
    static __device__ __forceinline__ float dot(const W& w, const X& x, int j) {
        const uint32_t M = 0x0F0F0F0Fu;
        int sl = dp4(w.qv.x & M, x.x0.x, 0);
        sl = dp4(w.qv.y & M, x.x0.y, sl);
        sl = dp4(w.qv.z & M, x.x0.z, sl);
        sl = dp4(w.qv.w & M, x.x0.w, sl);
        int sh = dp4((w.qv.x >> 4) & M, x.x1.x, 0);
        sh = dp4((w.qv.y >> 4) & M, x.x1.y, sh);
        sh = dp4((w.qv.z >> 4) & M, x.x1.z, sh);
        sh = dp4((w.qv.w >> 4) & M, x.x1.w, sh);
        const int c = j >> 1;
        uint32_t sc0, m0, sc1, m1;
        k4sm(2 * c, w.hd.y, w.hd.z, w.hd.w, sc0, m0);
        k4sm(2 * c + 1, w.hd.y, w.hd.z, w.hd.w, sc1, m1);
        const float d = h2f(w.hd.x & 0xffff), dm = h2f(w.hd.x >> 16);
        float v = d * (u2f(sc0) * x.s.x * (float)sl + u2f(sc1) * x.s.z * (float)sh);
        // The min term once per sub-block (the lane with h = 0).
        if ((j & 1) == 0) v -= dm * (u2f(m0) * (x.s.x * x.s.y) + u2f(m1) * (x.s.z * x.s.w));
        return v;
    }
};

template <> struct QT<Q6_K> {
    static constexpr int BB = 210;
    struct W {
        uint32_t a[2], b[2], h[2], sc[2];
        uint32_t d;
    };
    struct X {
        int2 x[4];
        float4 s01, s23;
    };
    // 210-byte blocks are only 2-byte aligned: aligned words, funnel shifts.
    static __device__ __forceinline__ void ldW(W& w, const uint8_t* wr, int b, int t) {
        const uint8_t* blk = wr + (long)b * 210;
        const int n = t >> 2, l8 = t & 3;
        ldu<2>(blk + 64 * n + 8 * l8, w.a);
        ldu<2>(blk + 64 * n + 32 + 8 * l8, w.b);
        ldu<2>(blk + 128 + 32 * n + 8 * l8, w.h);
        ldu<2>(blk + 192 + 8 * n, w.sc);
        w.d = __ldg((const unsigned short*)(blk + 208));
    }
    static __device__ __forceinline__ void ldX(X& x, const uint8_t* xq, const float2* xs, int b, int t) {
        const int n = t >> 2, l8 = t & 3;
        const uint8_t* xb = xq + (b << 8) + 128 * n + 8 * l8;
#pragma unroll
        for (int k = 0; k < 4; k++) x.x[k] = *(const int2*)(xb + 32 * k);
        const float2* sp = xs + 8 * b + 4 * n;
        x.s01 = *(const float4*)sp;
        x.s23 = *(const float4*)(sp + 2);
    }
    static __device__ __forceinline__ float dot(const W& w, const X& x, int t) {
        const uint32_t M = 0x0F0F0F0Fu, H = 0x30303030u;
        int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int xi0 = i ? x.x[0].y : x.x[0].x, xi1 = i ? x.x[1].y : x.x[1].x, xi2 = i ? x.x[2].y : x.x[2].x,
                      xi3 = i ? x.x[3].y : x.x[3].x;
            d0 = dp4(s6((w.a[i] & M) | ((w.h[i] << 4) & H)), xi0, d0);
            d1 = dp4(s6((w.b[i] & M) | ((w.h[i] << 2) & H)), xi1, d1);
            d2 = dp4(s6(((w.a[i] >> 4) & M) | (w.h[i] & H)), xi2, d2);
            d3 = dp4(s6(((w.b[i] >> 4) & M) | ((w.h[i] >> 2) & H)), xi3, d3);
        }
        const uint32_t sh = 8 * ((t & 3) >> 1);
        const float c0 = (float)(int8_t)(w.sc[0] >> sh), c1 = (float)(int8_t)(w.sc[0] >> (16 + sh)),
                    c2 = (float)(int8_t)(w.sc[1] >> sh), c3 = (float)(int8_t)(w.sc[1] >> (16 + sh));
        return h2f(w.d) * (c0 * x.s01.x * (float)d0 + c1 * x.s01.z * (float)d1 + c2 * x.s23.x * (float)d2 +
                           c3 * x.s23.z * (float)d3);
    }
};

template <> struct QT<Q8_0> {
    static constexpr int BB = 8 * 34;
    struct W {
        uint32_t q[8];
        uint32_t d;
    };
    struct X {
        int4 x0, x1;
        float2 s;
    };
    // Lane j: the 34-byte block 8b + j (2-byte aligned).
    static __device__ __forceinline__ void ldW(W& w, const uint8_t* wr, int b, int j) {
        const uint8_t* blk = wr + (8 * (long)b + j) * 34;
        ldu<8>(blk + 2, w.q);
        w.d = __ldg((const unsigned short*)blk);
    }
    static __device__ __forceinline__ void ldX(X& x, const uint8_t* xq, const float2* xs, int b, int j) {
        const int g = 8 * b + j;
        x.x0 = *(const int4*)(xq + 32 * g);
        x.x1 = *(const int4*)(xq + 32 * g + 16);
        x.s = xs[g];
    }
    static __device__ __forceinline__ float dot(const W& w, const X& x, int) {
        int s = dp4(w.q[0], x.x0.x, 0);
        s = dp4(w.q[1], x.x0.y, s);
        s = dp4(w.q[2], x.x0.z, s);
        s = dp4(w.q[3], x.x0.w, s);
        s = dp4(w.q[4], x.x1.x, s);
        s = dp4(w.q[5], x.x1.y, s);
        s = dp4(w.q[6], x.x1.z, s);
        s = dp4(w.q[7], x.x1.w, s);
        return h2f(w.d) * x.s.x * (float)s;
    }
};

// qdot leaves in acc this warp's share of the QR rows wr[] times the
// activation x (times nw): steps s, s+ss, ... of 4 blocks (in/256 blocks
// of 256 elements in all). It issues
// its first step's weight loads, the L2 prefetch of the pf steps after it
// (and of the norm vector), waits for
// the predecessor kernel (PDL), then has the block quantize x into shared
// memory (sm); an inactive warp (a group past the output) takes part in
// that and stops.
// Row addresses of a group, in as few registers as they allow (the kernels
// sit at 80 registers, 3 blocks per SM): for qmv one pointer and 32-bit
// offsets of the other rows from it (rows of one matrix are at most 3 row
// lengths apart); for qmv_swiglu the gate and up rows and the distance to
// the second ones (rb, or 0 past the output; QR pointers spilled once the
// L2 prefetch came).
struct QRowsO {
    const uint8_t* p;
    uint32_t o[QR - 1]; // rows 1.. (row 0 is p)
    __device__ __forceinline__ const uint8_t* operator[](int r) const { return r == 0 ? p : p + o[r - 1]; }
    // row is operator[] for an r known only at run time (no local array).
    __device__ __forceinline__ const uint8_t* row(int r) const {
        return p + (r == 3 ? o[2] : r == 2 ? o[1] : r == 1 ? o[0] : 0u);
    }
};
struct QRows2 {
    const uint8_t *g, *u;
    uint32_t d;
    __device__ __forceinline__ const uint8_t* operator[](int r) const { return (r < QR / 2 ? g : u) + (r & 1) * d; }
    __device__ __forceinline__ const uint8_t* row(int r) const { return (*this)[r]; }
};
static_assert(QR == 4, "QRows2 holds two gate and two up rows");

// QSmem is a block's shared memory: the quantized activation and the
// reductions.
struct QSmem {
    uint32_t xq[QMV_MAXIN / 4];
    float2 xs[QMV_MAXIN / 32];
    float red[8][QR];
    float ss[8];
};

// qpf asks L2 for step s's weights of the QR rows ahead of their loads
// (prefetch: no registers held, unlike a second step of loads in flight).
// A step's 4 blocks of one row are contiguous (576, 840 or 1088 bytes for
// Q4_K, Q6_K, Q8_0): the 8 lanes l of row l/8 ask for the 128-byte lines at
// offsets 128·(l%8) from its start, which covers all of it but the last
// line's few bytes when it is not line-aligned (and Q8_0's last 64 bytes).
template <int F, class Rows> __device__ __forceinline__ void qpf(const Rows& wr, int s, int nb) {
    const int lane = threadIdx.x & 31, off = 4 * s * QT<F>::BB + 128 * (lane & 7), r = lane >> 3;
    if (off >= nb * QT<F>::BB) return;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(wr.row(r) + off));
}

template <int F, class Rows>
__device__ __forceinline__ void qdot(const Rows& wr, QSmem& sm, const float* __restrict__ x,
                                     const float* __restrict__ nw, int in, int s, int ss, int pf,
                                     bool active, float (&acc)[QR]) {
    const int lane = threadIdx.x & 31, j = lane & 7, nb = in >> 8;
#pragma unroll
    for (int r = 0; r < QR; r++) acc[r] = 0.f;
    typename QT<F>::W cur[QR];
    int b = 4 * s + (lane >> 3);
    if (active && b < nb) {
#pragma unroll
        for (int r = 0; r < QR; r++) QT<F>::ldW(cur[r], wr[r], b, j);
    }
    qxPrefetch(nw, in);
    qPdlLaunch();
    qPdlWait();
    qxShared(sm.xq, sm.xs, sm.ss, x, nw, in);
    if (!active) return;
    const uint8_t* xq = (const uint8_t*)sm.xq;
    for (; 4 * s < nb; s += ss) {
        if (b < nb) {
            typename QT<F>::X xv;
            QT<F>::ldX(xv, xq, sm.xs, b, j);
#pragma unroll
            for (int r = 0; r < QR; r++) acc[r] += QT<F>::dot(cur[r], xv, j);
        }
        b += 4 * ss;
        if (b < nb) {
#pragma unroll
            for (int r = 0; r < QR; r++) QT<F>::ldW(cur[r], wr[r], b, j);
        }
        if (pf > 0) qpf<F>(wr, s + (pf + 1) * ss, nb);
    }
}

// qsums leaves each warp's QR sums in red[warp] (all threads may read them
// after the call).
__device__ __forceinline__ void qsums(float (*red)[QR], const float (&acc)[QR]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < QR; r++) {
        float v = warpSum(acc[r]);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
}

// qmvBlock is block blk of W·x (x multiplied by nw before rounding when
// nw is not null): 8/wpr groups of QR rows, whose warps' sums it leaves in
// sm.red (and x's sums of squares in sm.ss: qinv).
template <int F>
__device__ __forceinline__ void qmvBlock(QSmem& sm, const uint8_t* w, long rb, int out, int blk, const float* x,
                                         const float* nw, int in, int wpr, int pf) {
    const int warp = threadIdx.x >> 5, lw = __ffs(wpr) - 1, G = 8 >> lw; // wpr: a power of two
    const int base = (blk * G + (warp >> lw)) * QR;
    QRowsO wr;
    wr.p = w + (long)min(base, out - 1) * rb;
#pragma unroll
    for (int r = 1; r < QR; r++) wr.o[r - 1] = (uint32_t)((min(base + r, out - 1) - min(base, out - 1)) * rb);
    float acc[QR];
    qdot<F>(wr, sm, x, nw, in, warp & (wpr - 1), wpr, pf, base < out, acc);
    qsums(sm.red, acc);
}

__device__ __forceinline__ void qmvMat(QSmem& sm, int f, const uint8_t* w, long rb, int out, int blk, const float* x,
                                       const float* nw, int in, int wpr, int pf) {
    if (f == Q4_K)
        qmvBlock<Q4_K>(sm, w, rb, out, blk, x, nw, in, wpr, pf);
    else if (f == Q6_K)
        qmvBlock<Q6_K>(sm, w, rb, out, blk, x, nw, in, wpr, pf);
    else
        qmvBlock<Q8_0>(sm, w, rb, out, blk, x, nw, in, wpr, pf);
}

// qmv: y_i = W_i · x for up to four matrices sharing x (in % 256 == 0, in
// <= QMV_MAXIN; mode QMV_NORM: W_i · rmsnorm(x; nw)), each Q4_K, Q6_K or
// Q8_0 (f_i = its DType number); blocks [0, n0) do matrix 0, [n0, n1)
// matrix 1, ... (unused matrices: out 0).
#define QMV_MAT(i) float *y##i, const uint8_t *w##i, long rb##i, int out##i, int f##i
extern "C" __global__ void __launch_bounds__(256, 3) qmv(const float* __restrict__ x, const float* __restrict__ nw,
                                                     float eps, int in, int wpr, int pf, int mode, QMV_MAT(0), int n0,
                                                     QMV_MAT(1), int n1, QMV_MAT(2), int n2, QMV_MAT(3)) {
    __shared__ __align__(16) QSmem sm;
    // The block's matrix by selection (one inlined copy of the GEMV; an
    // indexed array of the parameters would live in local memory), made
    // again for the output (holding y, out and blk through the GEMV cost
    // registers that the weight prefetch needs).
    {
        const int b = qctaid();
        const uint8_t* w = w3;
        long rb = rb3;
        int out = out3, f = f3, blk = b - n2;
        if (b < n0) {
            w = w0, rb = rb0, out = out0, f = f0, blk = b;
        } else if (b < n1) {
            w = w1, rb = rb1, out = out1, f = f1, blk = b - n0;
        } else if (b < n2) {
            w = w2, rb = rb2, out = out2, f = f2, blk = b - n1;
        }
        qmvMat(sm, f, w, rb, out, blk, x, mode == QMV_NORM ? nw : nullptr, in, wpr, pf);
    }
    const int b = qctaid();
    float* y = y3;
    int out = out3, blk = b - n2;
    if (b < n0) {
        y = y0, out = out0, blk = b;
    } else if (b < n1) {
        y = y1, out = out1, blk = b - n0;
    } else if (b < n2) {
        y = y2, out = out2, blk = b - n1;
    }
    const int t = threadIdx.x, G = 8 >> (__ffs(wpr) - 1);
    if (t < G * QR) {
        const int g = t / QR, r = t % QR, o = (blk * G + g) * QR + r;
        if (o < out) {
            float v = 0.f;
            for (int i = 0; i < wpr; i++) v += sm.red[g * wpr + i][r];
            if (mode == QMV_NORM) v *= qinv(sm.ss, in, eps);
            y[o] = mode == QMV_ADD ? y[o] + v : v;
        }
    }
}

// qmvSwiGLU: act = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)); a group is
// gate rows o, o+1 and up rows o, o+1.
template <int F>
__device__ __forceinline__ void qmvSwiGLU(QSmem& sm, float* act, const float* x, const float* nw, float eps, int in,
                                          int wpr, int pf, const uint8_t* wg, const uint8_t* wu, long rb, int out) {
    const int warp = threadIdx.x >> 5, lw = __ffs(wpr) - 1, G = 8 >> lw; // wpr: a power of two
    const int base = (blockIdx.x * G + (warp >> lw)) * (QR / 2);
    const long first = min(base, out - 1);
    QRows2 wr;
    wr.g = wg + first * rb;
    wr.u = wu + first * rb;
    wr.d = base + 1 < out ? (uint32_t)rb : 0u;
    float acc[QR];
    qdot<F>(wr, sm, x, nw, in, warp & (wpr - 1), wpr, pf, base < out, acc);
    qsums(sm.red, acc);
    const int t = threadIdx.x;
    if (t < G * (QR / 2)) {
        const int g = t / (QR / 2), r = t % (QR / 2), o = (qctaid() * G + g) * (QR / 2) + r;
        if (o < out) {
            float gv = 0.f, uv = 0.f;
            for (int i = 0; i < wpr; i++) {
                gv += sm.red[g * wpr + i][r];
                uv += sm.red[g * wpr + i][QR / 2 + r];
            }
            const float inv = qinv(sm.ss, in, eps);
            gv *= inv;
            uv *= inv;
            act[o] = gv / (1.f + expf(-gv)) * uv;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 3) qmv_swiglu(float* act, const float* __restrict__ x,
                                                            const float* __restrict__ nw, float eps, int in, int wpr,
                                                            int pf, int f, const uint8_t* wg, const uint8_t* wu, long rb,
                                                            int out) {
    __shared__ __align__(16) QSmem sm;
    if (f == Q4_K)
        qmvSwiGLU<Q4_K>(sm, act, x, nw, eps, in, wpr, pf, wg, wu, rb, out);
    else if (f == Q6_K)
        qmvSwiGLU<Q6_K>(sm, act, x, nw, eps, in, wpr, pf, wg, wu, rb, out);
    else
        qmvSwiGLU<Q8_0>(sm, act, x, nw, eps, in, wpr, pf, wg, wu, rb, out);
}
