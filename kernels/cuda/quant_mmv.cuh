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
//     registers, each warp asks L2 for the next pf steps (prefetch.global.L2,
//     qpf; POCKET_QMV_PF, default 1, 0: none), the first ones before
//     griddepcontrol.wait, so a step's loads find their lines on the way
//     from DRAM: pf + 1 steps in flight per warp for one step's registers
//     (a 4096-wide GEMV gives a warp only 1-4 steps: the pre-wait prefetch
//     is the one most of them get). Fitting it into 80
//     registers took wpr as shifts (a power of two), qmv_swiglu's rows as
//     two pointers (QRows2), and the output's matrix selected again after
//     the GEMV rather than held through it;
//   - the activation is quantized once per distinct x by qx_norm (which can
//     multiply by an RMSNorm weight and leave the partial sums of squares,
//     so the norm's 1/rms is applied to the dot products), and one launch
//     covers up to four matrices (q, k, v) of any of the three formats, or
//     gate and up with the SwiGLU formed where both dots end.
//     (Quantizing inside every qmv block instead, into shared memory after
//     griddepcontrol.wait, e198111, saved the qx_norm launch but made the
//     Q4_K_M decode 367.7 -> 291.3 tok/s on an H200: every block redid
//     the whole row's loads, two IEEE divisions per 32 elements and two
//     block barriers before its first dot product, ~a quarter of the GEMV's
//     instructions for a 32-row block and as many for an 8-row one.)
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

// qx_norm rounds x (times nw when nw is not null) to int8 per 32 elements
// as qx_quant does, and with nw also leaves block i's sum of the squares of
// the raw x in ssp[i] (n/1024 rounded up blocks of 256 threads; n % 4 == 0).
extern "C" __global__ void __launch_bounds__(256) qx_norm(uint32_t* xq, float2* xs, float* ssp, const float* x,
                                                         const float* nw, int n) {
    __shared__ float red[8];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const bool ok = i < (n >> 2);
    // The norm vector is a weight: loaded before the wait, so its DRAM
    // latency overlaps the predecessor's tail instead of following it.
    const float4 g = nw != nullptr && ok ? __ldg((const float4*)nw + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    // The GEMV after this may start now: it only loads weights until its
    // own wait, which waits for this grid.
    qPdlLaunch();
    qPdlWait(); // x is the predecessor's output; xq may still be read by it
    float4 v = ok ? __ldg((const float4*)x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (nw != nullptr) {
        float ss = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        ss = warpSum(ss);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
        if (ok) v = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
        __syncthreads();
        if (threadIdx.x == 0) {
            float t = 0.f;
            for (int k = 0; k < 8; k++) t += red[k];
            ssp[blockIdx.x] = t;
        }
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
    if (ok) {
        xq[i] = (uint32_t)(q0 & 0xff) | ((uint32_t)(q1 & 0xff) << 8) | ((uint32_t)(q2 & 0xff) << 16) |
                ((uint32_t)(q3 & 0xff) << 24);
        if ((i & 7) == 0) xs[i >> 3] = make_float2(d, (float)s);
    }
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
        const uint8_t* xb = xq + ((long)b << 8) + 64 * c + 16 * h;
        x.x0 = __ldg((const int4*)xb);
        x.x1 = __ldg((const int4*)(xb + 32));
        x.s = __ldg((const float4*)(xs + 8 * (long)b + 2 * c));
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
        const uint8_t* xb = xq + ((long)b << 8) + 128 * n + 8 * l8;
#pragma unroll
        for (int k = 0; k < 4; k++) x.x[k] = __ldg((const int2*)(xb + 32 * k));
        const float2* sp = xs + 8 * (long)b + 4 * n;
        x.s01 = __ldg((const float4*)sp);
        x.s23 = __ldg((const float4*)(sp + 2));
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
        const long g = 8 * (long)b + j;
        x.x0 = __ldg((const int4*)(xq + 32 * g));
        x.x1 = __ldg((const int4*)(xq + 32 * g + 16));
        x.s = __ldg(xs + g);
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

// qdot leaves in acc this warp's share of the QR rows wr[] times the
// quantized activation: steps s, s+ss, ... of 4 blocks (in/256 blocks of
// 256 elements in all). It issues its first step's weight loads and the L2
// prefetch of the pf steps after it, then waits for the predecessor kernel
// (PDL: this runs in the predecessor's tail, when its blocks leave SMs
// free and DRAM has room); each later step's loads are followed by the
// prefetch of the step pf past it. An inactive warp (a group past the
// output) only waits.
template <int F, class Rows>
__device__ __forceinline__ void qdot(const Rows& wr, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                     int nb, int s, int ss, int pf, bool active, float (&acc)[QR]) {
    const int lane = threadIdx.x & 31, j = lane & 7;
#pragma unroll
    for (int r = 0; r < QR; r++) acc[r] = 0.f;
    typename QT<F>::W cur[QR];
    int b = 4 * s + (lane >> 3);
    if (active && b < nb) {
#pragma unroll
        for (int r = 0; r < QR; r++) QT<F>::ldW(cur[r], wr[r], b, j);
    }
    if (active)
        for (int k = 1; k <= pf; k++) qpf<F>(wr, s + k * ss, nb);
    qPdlLaunch();
    qPdlWait();
    if (!active) return;
    for (; 4 * s < nb; s += ss) {
        if (b < nb) {
            typename QT<F>::X x;
            QT<F>::ldX(x, xq, xs, b, j);
#pragma unroll
            for (int r = 0; r < QR; r++) acc[r] += QT<F>::dot(cur[r], x, j);
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

// qinvRms is the RMSNorm factor from qx_norm's partial sums of squares.
__device__ __forceinline__ float qinvRms(const float* ssp, int in, float eps) {
    float t = 0.f;
    const int n = (in / 4 + 255) / 256;
    for (int i = 0; i < n; i++) t += ssp[i];
    return rsqrtf(t / in + eps);
}

// qmvBlock is block blk of W·xq: 8/wpr groups of QR rows, whose warps'
// sums it leaves in red.
template <int F>
__device__ __forceinline__ void qmvBlock(float (*red)[QR], const uint8_t* w, long rb, int out, int blk,
                                         const uint8_t* __restrict__ xq, const float2* __restrict__ xs, int in,
                                         int wpr, int pf) {
    const int warp = threadIdx.x >> 5, lw = __ffs(wpr) - 1, G = 8 >> lw; // wpr: a power of two
    const int base = (blk * G + (warp >> lw)) * QR;
    QRowsO wr;
    wr.p = w + (long)min(base, out - 1) * rb;
#pragma unroll
    for (int r = 1; r < QR; r++) wr.o[r - 1] = (uint32_t)((min(base + r, out - 1) - min(base, out - 1)) * rb);
    float acc[QR];
    qdot<F>(wr, xq, xs, in >> 8, warp & (wpr - 1), wpr, pf, base < out, acc);
    qsums(red, acc);
}

__device__ __forceinline__ void qmvMat(float (*red)[QR], int f, const uint8_t* w, long rb, int out, int blk,
                                       const uint8_t* xq, const float2* xs, int in, int wpr, int pf) {
    if (f == Q4_K)
        qmvBlock<Q4_K>(red, w, rb, out, blk, xq, xs, in, wpr, pf);
    else if (f == Q6_K)
        qmvBlock<Q6_K>(red, w, rb, out, blk, xq, xs, in, wpr, pf);
    else
        qmvBlock<Q8_0>(red, w, rb, out, blk, xq, xs, in, wpr, pf);
}

// qmv: y_i = W_i · x for up to four matrices sharing the quantized x (in %
// 256 == 0; mode plain, add into y_i, or norm: times qx_norm's 1/rms),
// each Q4_K, Q6_K or Q8_0 (f_i = its DType number); blocks [0, n0) do
// matrix 0, [n0, n1) matrix 1, ... (unused matrices: out 0).
#define QMV_MAT(i) float *y##i, const uint8_t *w##i, long rb##i, int out##i, int f##i
extern "C" __global__ void __launch_bounds__(256, 3) qmv(const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                                     const float* ssp, float eps, int in, int wpr, int pf, int mode,
                                                     QMV_MAT(0), int n0, QMV_MAT(1), int n1, QMV_MAT(2), int n2,
                                                     QMV_MAT(3)) {
    __shared__ float red[8][QR];
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
        qmvMat(red, f, w, rb, out, blk, xq, xs, in, wpr, pf);
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
            for (int i = 0; i < wpr; i++) v += red[g * wpr + i][r];
            if (mode == QMV_NORM) v *= qinvRms(ssp, in, eps);
            y[o] = mode == QMV_ADD ? y[o] + v : v;
        }
    }
}

// qactFold rounds act to int8 as qx_norm does (no norm vector) into aq
// and as, for the GEMV that reads act next (MatMulAdd of ffn_down: one
// quantize launch less per layer). A 32-element chunk is spread over
// blocks (a block writes outputs [o0, o0 + n)), so each block counts the
// outputs it wrote into cnt[chunk] and the block that completes a chunk
// rounds it, from L2, and sets the count back to 0 (so a graph replays it
// from 0; the counts are zeroed when allocated). Each writer has fenced its
// act store before the barrier here, the count is atomic, and the
// completing block reads act with ld.global.cg: it sees every block's
// values. out % 32 == 0.
__device__ __forceinline__ void qactFold(const float* act, uint8_t* aq, float2* as, unsigned* cnt, int o0, int n,
                                         int out) {
    __shared__ int last[2]; // chunks this block completed (at most 2: n <= 16)
    __syncthreads();
    if (threadIdx.x == 0) {
        const int o1 = min(o0 + n, out);
        last[0] = last[1] = -1;
        for (int c = o0 / 32, k = 0; o0 < o1 && c <= (o1 - 1) / 32 && k < 2; c++, k++) {
            const int m = min(o1, 32 * c + 32) - max(o0, 32 * c);
            if (atomicAdd(cnt + c, (unsigned)m) + m == 32) last[k] = c;
        }
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < 2 && last[warp] >= 0) {
        const int c = last[warp];
        const float v = __ldcg(act + 32 * c + lane);
        float am = fabsf(v);
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
        const float d = am / 127.f, id = am > 0.f ? 127.f / am : 0.f;
        const int q = __float2int_rn(v * id);
        int sq = q;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
        aq[32 * c + lane] = (uint8_t)(q & 0xff);
        if (lane == 0) {
            as[c] = make_float2(d, (float)sq);
            cnt[c] = 0;
        }
    }
}

// qmvSwiGLU: act = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)) from the
// normed, quantized x; a group is gate rows o, o+1 and up rows o, o+1.
// With aq, act is also rounded to int8 (qactFold).
template <int F>
__device__ __forceinline__ void qmvSwiGLU(float* act, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                          const float* ssp, float eps, int in, int wpr, int pf, const uint8_t* wg,
                                          const uint8_t* wu, long rb, int out, uint8_t* aq, float2* as,
                                          unsigned* cnt) {
    __shared__ float red[8][QR];
    const int warp = threadIdx.x >> 5, lw = __ffs(wpr) - 1, G = 8 >> lw; // wpr: a power of two
    const int base = (blockIdx.x * G + (warp >> lw)) * (QR / 2);
    const long first = min(base, out - 1);
    QRows2 wr;
    wr.g = wg + first * rb;
    wr.u = wu + first * rb;
    wr.d = base + 1 < out ? (uint32_t)rb : 0u;
    float acc[QR];
    qdot<F>(wr, xq, xs, in >> 8, warp & (wpr - 1), wpr, pf, base < out, acc);
    qsums(red, acc);
    const int t = threadIdx.x;
    if (t < G * (QR / 2)) {
        const int g = t / (QR / 2), r = t % (QR / 2), o = (qctaid() * G + g) * (QR / 2) + r;
        if (o < out) {
            float gv = 0.f, uv = 0.f;
            for (int i = 0; i < wpr; i++) {
                gv += red[g * wpr + i][r];
                uv += red[g * wpr + i][QR / 2 + r];
            }
            const float inv = qinvRms(ssp, in, eps);
            gv *= inv;
            uv *= inv;
            act[o] = gv / (1.f + expf(-gv)) * uv;
            if (aq != nullptr) __threadfence(); // the store reaches L2 before the count below
        }
    }
    if (aq != nullptr) qactFold(act, aq, as, cnt, qctaid() * (G * (QR / 2)), G * (QR / 2), out);
}

extern "C" __global__ void __launch_bounds__(256, 3) qmv_swiglu(float* act, const uint8_t* __restrict__ xq,
                                                            const float2* __restrict__ xs, const float* ssp,
                                                            float eps, int in, int wpr, int pf, int f,
                                                            const uint8_t* wg, const uint8_t* wu, long rb, int out,
                                                            uint8_t* aq, float2* as, unsigned* cnt) {
    if (f == Q4_K)
        qmvSwiGLU<Q4_K>(act, xq, xs, ssp, eps, in, wpr, pf, wg, wu, rb, out, aq, as, cnt);
    else if (f == Q6_K)
        qmvSwiGLU<Q6_K>(act, xq, xs, ssp, eps, in, wpr, pf, wg, wu, rb, out, aq, as, cnt);
    else
        qmvSwiGLU<Q8_0>(act, xq, xs, ssp, eps, in, wpr, pf, wg, wu, rb, out, aq, as, cnt);
}
