// Batch-1 GEMVs of Q4_K, Q6_K and Q8_0 over int8 activations, second
// version (included by quant.cu; quant_mmv.go launches them). The v1
// kernels above (qgemv8_*) give a warp one weight row, so every lane loads
// its 32 int8 activations and their scales per 16 bytes of weights and a
// 4096-wide row leaves a warp with only a few loads in flight. Here:
//
//   - a warp computes QR = 2 or 4 weight rows at once (a template
//     parameter; the entry points at the end): each activation load serves
//     QR rows, and a lane has QR rows' blocks in flight per step;
//   - wpr warps split a group's columns (steps of 1024 elements: 8 lanes
//     per 256-element block, 4 blocks per warp), so that short matrices
//     still give every SM several blocks; the grid is sized in Go;
//   - the first step's weights are loaded before griddepcontrol.wait
//     (weights are never written during a step; PDL as decode.cu). Loads
//     of the next step issued before computing the current one (a rolling
//     double buffer) took 108-128 registers (2 blocks per SM): not done;
//     the warps of other groups keep the loads in flight instead (24-32
//     warps per SM; rows are one pointer and 32-bit offsets, QRowsO, to
//     save registers);
//   - the activation is quantized once per distinct x by qx_norm (which can
//     multiply by an RMSNorm weight and leave the partial sums of squares,
//     so the norm's 1/rms is applied to the dot products), and one launch
//     covers up to four matrices (q, k, v) of any of the three formats, or
//     gate and up with the SwiGLU formed where both dots end.
//
// Lane mapping per 256-element block (j = lane % 8) as the v1 kernels:
// Q4_K lane j reads qs bytes 16j..16j+15 (sub-blocks 2c, 2c+1 with c = j/2,
// half h = j%2) and the 16-byte header (qdotQ4K); Q6_K lane j covers
// elements 128n + 32k + 8*(j%4) + (0..7), n = j/4, k = 0..3; Q8_0 lane j
// the whole 34-byte block 8*b + j. The regrouped layouts (Q4_KG, Q6_KG,
// Q8_0G: regroup.go) map lanes to elements the same way.
#define QMV_PLAIN 0
#define QMV_ADD 1
#define QMV_NORM 2

__device__ __forceinline__ void qPdlWait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    PROBE_WAITED();
}
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
                                                         const float* nw, int n) { PROBE_KERNEL();
    __shared__ float red[8];
    // The next GEMV may launch once this grid has passed its wait: its
    // blocks then take the SM slots the predecessor frees and stream their
    // first weights while the norm's sums and the rounding run (Qwen3-8B
    // Q4_K_M, interleaved: 455.5-458.2 tok/s against 446.2-451.2 with the
    // trigger after the norm's block sums). Triggering before the wait,
    // with the norm weight read before it too, measured 445.0-445.8
    // against 447.9-449.7: the GEMV's blocks then sit on SM slots while
    // two grids drain. Before the wait for the o projection's rounding
    // alone (after the attention, which streams no weights) measured
    // 459.2-460.1, 458.5-459.7 with POCKET_ATTN_DEC_BLOCKS=1, against
    // 457.8-459.8: no gain (276ac6f).
    //
    // The norm weight, constant and last read a step ago (a DRAM miss), is
    // loaded before the wait, beside nothing the predecessor writes.
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const bool ok = i < (n >> 2);
    const float4 g = nw != nullptr && ok ? __ldg((const float4*)nw + i) : make_float4(1.f, 1.f, 1.f, 1.f);
    qPdlWait(); // x is the predecessor's output; xq may still be read by it
    qPdlLaunch();
    float4 v = ok ? __ldg((const float4*)x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (nw != nullptr) {
        float ss = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        ss = warpSum(ss);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
        v = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
        __syncthreads();
        if (threadIdx.x == 0) {
            float t = 0.f;
            for (int k = 0; k < 8; k++) t += red[k];
            ssp[blockIdx.x] = t;
        }
    }
    qRound(xq, xs, v, i, ok);
}

// qx_merge merges the decode attention's deferred split partials
// (attn_merge.cuh; head dim 128, a warp per head, lane l holding the
// head's elements 4l..4l+3: qx's float4 i = 32h + l) and rounds them as
// qx does, for a block-format o projection: the merge costs no launch.
extern "C" __global__ void __launch_bounds__(256) qx_merge(uint32_t* xq, float2* xs, const float* part,
                                                          const int* startp, int heads, int splits, int minchunk) { PROBE_KERNEL();
    // The context is in place before the step's first kernel (as for the
    // attention): its split count before the wait, a round trip saved.
    const int nsplit = attnSplits(startp, splits, minchunk, 16);
    // The wait depends on nsplit (always ≥ 1) so that ptxas keeps the
    // division ahead of it. The partials are the predecessor's output; xq
    // may still be read by it.
    if (nsplit > 0) qPdlWait();
    qPdlLaunch();
    const int h = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (h >= heads) return; // whole warps: the rounding's shuffles stay within one
    float o[4];
    attnMerge<4>(o, part, h, heads, splits, nsplit);
    qRound(xq, xs, make_float4(o[0], o[1], o[2], o[3]), h * 32 + (threadIdx.x & 31), true);
}

// QT<F>: a lane's weights (W) and activations (X) of one 256-element block,
// their loads and the dot product, for qdot (Q4_K has qdotQ4K instead).
template <int F> struct QT;

template <> struct QT<Q6_K> {
    struct W {
        uint32_t a[2], b[2], h[2], sc[2];
        uint32_t d;
    };
    struct X {
        int2 x[4];
        int z[4]; // q6kZero(x), once for the QR rows
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
        q6kZero(x.x, x.z);
    }
    static __device__ __forceinline__ float dot(const W& w, const X& x, int t) {
        return q6kDot(w.a, w.b, w.h, w.sc, w.d, x.x, x.z, x.s01, x.s23, t);
    }
};

// ldnc8 loads 8 bytes of weights, read once per pass: not kept in L1.
__device__ __forceinline__ uint2 ldnc8(const void* p) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

// Q6_KG (regroup.go): Q6_K's activations and dot, the weights regrouped so
// that a lane's share of a block is five aligned loads that skip L1 (the
// activations live there), not Q6_K's 13 words and 8 funnel shifts.
template <> struct QT<Q6_KG> : QT<Q6_K> {
    static __device__ __forceinline__ void ldW(W& w, const uint8_t* wr, int b, int t) {
        const uint8_t* g = wr + (long)(b >> 2) * 840;
        const int k = b & 3;
        const uint8_t* q = g + 192 * k;
        const uint2 a = ldnc8(q + 16 * t), bb = ldnc8(q + 16 * t + 8), h = ldnc8(q + 128 + 8 * t),
                    sc = ldnc8(g + 768 + 16 * k + 8 * (t >> 2));
        w.a[0] = a.x, w.a[1] = a.y, w.b[0] = bb.x, w.b[1] = bb.y;
        w.h[0] = h.x, w.h[1] = h.y, w.sc[0] = sc.x, w.sc[1] = sc.y;
        w.d = __ldg((const unsigned short*)(g + 832 + 2 * k));
    }
};

template <> struct QT<Q8_0> {
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

// Q8_0G (regroup.go): Q8_0's activations and dot, lane j's block 8b + j
// regrouped so that its quants are two aligned 16-byte loads that skip L1,
// not Q8_0's nine words and eight funnel shifts.
template <> struct QT<Q8_0G> : QT<Q8_0> {
    static __device__ __forceinline__ void ldW(W& w, const uint8_t* wr, int b, int j) {
        const uint8_t* g = wr + (long)b * 272;
        const uint4 lo = ldnc(g + 32 * j), hi = ldnc(g + 32 * j + 16);
        w.q[0] = lo.x, w.q[1] = lo.y, w.q[2] = lo.z, w.q[3] = lo.w;
        w.q[4] = hi.x, w.q[5] = hi.y, w.q[6] = hi.z, w.q[7] = hi.w;
        w.d = __ldg((const unsigned short*)(g + 256 + 2 * j));
    }
};

// qdot leaves in acc this warp's share of the QR rows wr[] times the
// quantized activation: steps s, s+ss, ... of 4 blocks (nb blocks of 256
// elements in all). It waits for the predecessor kernel (PDL) after
// issuing its first step's weight loads; an inactive warp (a group past
// the output) only waits.
// Row addresses of a group: QR pointers (qmv_swiglu: gate and up rows of
// two matrices), or for qmv one pointer and 32-bit offsets of the other
// rows from it (QR - 1 registers fewer; rows of one matrix are at most 3
// row lengths apart), which kept qmv at 80 registers without spills.
template <int QR>
struct QRowsP {
    const uint8_t* p[QR];
    __device__ __forceinline__ const uint8_t* operator[](int r) const { return p[r]; }
};
template <int QR>
struct QRowsO {
    const uint8_t* p;
    uint32_t o[QR];
    __device__ __forceinline__ const uint8_t* operator[](int r) const { return p + o[r]; }
};

// qRowsAt are rows base.. base+QR-1 of w (rb bytes a row), clamped to the
// last row (the extra sums are not stored).
template <int QR>
__device__ __forceinline__ QRowsO<QR> qRowsAt(const uint8_t* w, long rb, int base, int out) {
    QRowsO<QR> wr;
    wr.p = w + (long)min(base, out - 1) * rb;
#pragma unroll
    for (int r = 0; r < QR; r++) wr.o[r] = (uint32_t)((min(base + r, out - 1) - min(base, out - 1)) * rb);
    return wr;
}

// Diagnostic builds (DEFINES=... scripts/probe-build.sh; never the shipped PTX):
// QMV_LOADONLY folds every loaded word into the sums instead of the dot,
// QMV_NOX dots against made-up activations instead of loading them, so a
// probe of the step prices the arithmetic and the activation loads
// (docs/decode-step.md, the session of 2026-12-01 from 15:34).
// QMV_SWI_SKIP=n (gate/up) and QMV_DOWN_SKIP=n (the down projection) make
// up a warp's weight steps 1..n instead of loading them: the most any
// on-chip buffer of those bytes (a ring, L2) could gain; QMV_SWI_NOWAIT
// drops gate/up's PDL wait: what that boundary costs (docs/decode-step.md,
// "What bounds the step").
#if defined(QMV_LOADONLY) || defined(QMV_NOX) || defined(QMV_SWI_SKIP) || defined(QMV_DOWN_SKIP)
template <class T>
__device__ __forceinline__ uint32_t qFold(const T& v) {
    uint32_t a[sizeof(T) / 4];
    memcpy(a, &v, sizeof(a));
    uint32_t f = 0;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 4); i++) f ^= a[i];
    return f;
}
// qFill fills v with words that depend on the lane and step (not zeros:
// ptxas would fold the dot and drop the weight loads it no longer needs).
template <class T>
__device__ __forceinline__ void qFill(T& v, int b) {
    uint32_t a[sizeof(T) / 4];
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 4); i++) a[i] = 0x01010101u * ((threadIdx.x + b + i) & 7);
    memcpy(&v, a, sizeof(a));
}
// q4kFill is qFill for a Q4_K step's weights and headers (q4kLoad's).
template <int QR>
__device__ __forceinline__ void q4kFill(uint4 (&q)[QR], uint4 (&hh)[QR / 2], int b) {
#pragma unroll
    for (int r = 0; r < QR; r++) qFill(q[r], b + r);
#pragma unroll
    for (int k = 0; k < QR / 2; k++) qFill(hh[k], b + 7 * k);
}
#endif
// The K-quants of the Q4_K_M mix take a warp's steps of 4 blocks in a
// rotated order (QSteps: qdotQ4K always, qdot where qRotates<F>); the other
// formats in order. Measured on an H200 as interleaved A/B of builds
// (docs/benchmarks.md, the session of 2026-12-01 from 21:41), Qwen3-8B
// Q4_K_M, every format rotated against none: 562.3-565.2 / 558.0-559.2,
// 557.8-560.0 / 549.6-555.3, 556.6-561.5 / 552.2-557.5 tok/s in three
// calls (+0.9%); Qwen3-8B Q8_0 rotated 416.7-422.6 against 426.9-430.0 and
// 423.1-425.9 / 424.5-432.6, so Q8_0 (and the formats not measured) stay
// in order. This choice (Q4_K and Q6_K rotated), five rounds: 557.8-561.0
// against 549.5-555.6 (every format rotated 553.4-560.5). Q6_K alone
// rotated measured 551.3-559.3 against 555.1-558.8: the split between the
// two formats is within the noise of these A/Bs. The FP8 rings rotated lost
// (Qwen3.5-27B 127.1-127.6 against 130.7-130.8).
template <int F>
constexpr bool qRotates = F == Q6_K || F == Q6_KG;

// QSteps is a warp's steps of 4 blocks (s0, s0+ss, ... below (nb+3)/4; K
// of them) in a rotated order: starting at one set by the warp's index in
// the grid and wrapping, so that a launch's warps do not all read the same
// column range at once. The order is fixed by the grid, so the sums stay
// deterministic.
struct QSteps {
    int s0, ss, K, rot;
    __device__ __forceinline__ QSteps(int nb, int s, int stride) : s0(s), ss(stride) {
        const int T = (nb + 3) >> 2;
        K = s < T ? (T - s + ss - 1) / ss : 0;
        rot = K ? (int)((blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) % K) : 0;
    }
    __device__ __forceinline__ int step(int i) const {
        int j = i + rot;
        j = j >= K ? j - K : j;
        return s0 + j * ss;
    }
};
template <int F, int QR, class Rows>
__device__ __forceinline__ void qdot(const Rows& wr, const uint8_t* __restrict__ xq,
                                     const float2* __restrict__ xs, int nb, int s, int ss, bool active,
                                     float (&acc)[QR]) {
    const int lane = threadIdx.x & 31, j = lane & 7;
#pragma unroll
    for (int r = 0; r < QR; r++) acc[r] = 0.f;
    typename QT<F>::W cur[QR];
    constexpr bool rot = qRotates<F>;
    const QSteps qs(nb, s, ss); // read only where rot: compiled out for the other formats
    int b = 4 * (rot ? qs.step(0) : s) + (lane >> 3);
    if (active && b < nb) {
#pragma unroll
        for (int r = 0; r < QR; r++) QT<F>::ldW(cur[r], wr[r], b, j);
    }
    // The next launch only after the wait, as the FP8 ring GEMVs
    // (fp8pipe.cuh: a grid launched while this one's predecessor still
    // runs waits longer for this one). Qwen3-8B Q4_K_M on an H200,
    // interleaved builds: 557.8-559.2 against 554.5-557.1 tok/s. (The
    // bf16 GEMVs of decode.cu the same way: Llama-3-8B 250.2-251.3
    // against 250.8-252.1, not kept.)
    qPdlWait();
    qPdlLaunch();
    if (!active) return;
    for (int kk = 0; rot ? kk < qs.K : 4 * s < nb; kk++, s += ss) {
        if (b < nb) {
            typename QT<F>::X x;
#ifdef QMV_NOX
            qFill(x, b);
#else
            QT<F>::ldX(x, xq, xs, b, j);
#endif
#ifdef QMV_LOADONLY
            const uint32_t fx = qFold(x);
#pragma unroll
            for (int r = 0; r < QR; r++) acc[r] += __uint_as_float((qFold(cur[r]) ^ fx) & 0x007fffffu);
#else
#pragma unroll
            for (int r = 0; r < QR; r++) acc[r] += QT<F>::dot(cur[r], x, j);
#endif
        }
        if (rot)
            b = kk + 1 < qs.K ? 4 * qs.step(kk + 1) + (lane >> 3) : nb;
        else
            b += 4 * ss;
#ifdef QMV_DOWN_SKIP
        // Diagnostic: the down projection's (nb > 32) steps 1..QMV_DOWN_SKIP made up.
        if (b < nb && nb > 32 && kk + 1 <= QMV_DOWN_SKIP) {
#pragma unroll
            for (int r = 0; r < QR; r++) qFill(cur[r], b + r);
            continue;
        }
#endif
        if (b < nb) {
#pragma unroll
            for (int r = 0; r < QR; r++) QT<F>::ldW(cur[r], wr[r], b, j);
        }
    }
}

// q4kLoad loads a lane's share of block blk of the QR rows wr (and the
// headers of the rows hp it finishes), off bytes past each row start
// (qmvSwiGLUFlat's later passes): qdotQ4K's layout.
template <int QR, bool G, class Rows>
__device__ __forceinline__ void q4kLoad(uint4 (&q)[QR], uint4 (&hh)[QR / 2], const Rows& wr,
                                        const uint8_t* const (&hp)[QR / 2], int blk, long off) {
    const int j = threadIdx.x & 7;
    const long qo = off + (G ? (long)(blk >> 3) * 1152 + 128 + 128 * (blk & 7) + 16 * j : (long)blk * 144 + 16 + 16 * j);
    const long ho = off + (G ? (long)(blk >> 3) * 1152 + 16 * (blk & 7) : (long)blk * 144);
#pragma unroll
    for (int r = 0; r < QR; r++) q[r] = ldnc(wr[r] + qo);
#pragma unroll
    for (int k = 0; k < QR / 2; k++) hh[k] = ldnc(hp[k] + ho);
}

// q4kStep adds block b's products (the lane's weights q and headers hh, as
// q4kLoad left them) into the lane's QR/2 row sums mine: qdotQ4K's step.
template <int QR>
__device__ __forceinline__ void q4kStep(const uint4 (&q)[QR], const uint4 (&hh)[QR / 2], int b, int nb,
                                        const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                        float (&mine)[QR / 2]) {
    constexpr int H = QR / 2;
    const int lane = threadIdx.x & 31, j = lane & 7, c = j >> 1, h = j & 1;
    const unsigned m = __ballot_sync(0xffffffffu, b < nb); // a pair is in or out together
    if (b < nb) {
        const uint8_t* xb = xq + ((long)b << 8) + 64 * c + 16 * h;
#ifdef QMV_NOX
        const int4 x0 = make_int4(lane, lane + 1, lane + 2, lane + 3), x1 = make_int4(b, b + 1, b + 2, b + 3);
        const float4 sx = make_float4(1.f, 2.f, 3.f, (float)c);
        (void)xb;
#else
        const int4 x0 = __ldg((const int4*)xb), x1 = __ldg((const int4*)(xb + 32));
        const float4 sx = __ldg((const float4*)(xs + 8 * (long)b + 2 * c));
#endif
#ifdef QMV_LOADONLY
        {
            uint32_t f = qFold(x0) ^ qFold(x1) ^ qFold(sx);
#pragma unroll
            for (int r = 0; r < QR; r++) f ^= qFold(q[r]);
#pragma unroll
            for (int k = 0; k < H; k++) f ^= qFold(hh[k]);
            mine[0] += __uint_as_float(f & 0x007fffffu);
        }
        (void)m;
#else
        int sl[QR], sh[QR];
#pragma unroll
        for (int r = 0; r < QR; r++) q4kSums(q[r], x0, x1, sl[r], sh[r]);
#pragma unroll
        for (int k = 0; k < H; k++) {
            const int pl = __shfl_xor_sync(m, h ? sl[k] : sl[H + k], 1);
            const int ph = __shfl_xor_sync(m, h ? sh[k] : sh[H + k], 1);
            mine[k] += q4kFinish(hh[k], c, (h ? sl[H + k] : sl[k]) + pl, (h ? sh[H + k] : sh[k]) + ph, sx, true);
        }
#endif
    }
}

// qdotQ4K is qdot for Q4_K. The 8 lanes of a block each hold 16 quant
// bytes (lane j: qs bytes 16j..16j+15 as the v1 kernels, so that a load
// instruction covers whole 128-byte spans), the halves h = j & 1 of the
// sub-block pair c = j >> 1. Each lane forms the integer sums of all QR
// rows over its half; the two lanes of a pair then swap QR/2 rows' sums
// (shfl_xor 1) and each finishes QR/2 rows whole, so a row's scales are
// unpacked and its float part done once a pair, not in both lanes (ncu:
// these kernels issue ~2.3 of 4 instructions a cycle, and that part was
// half of them). Lane h finishes rows h·QR/2 + k, k < QR/2; every load
// instruction still reads one row in all lanes. Handing a lane a pair's
// 32 bytes instead took the same instructions off but split every 32-byte
// sector between two load instructions (measured slower: 410 against 426
// tok/s on the Qwen3-8B Q4_K_M step), and so did loading the rows in an
// order that depends on h (414).
//
// G: the rows are Q4_KG (regroup.go): block blk's header at 16(blk%8) of
// its group of eight and its quants at 128 + 128(blk%8), so that a load
// instruction's four blocks are whole 128-byte lines (64 header bytes of a
// row in one line), where Q4_K's 144-byte blocks straddle two lines each.
//
// PRE = 2 (qmv_add_q2_4): a warp's first two steps are loaded before the
// wait, so that a warp of two steps (the o projection of a 4096-wide model:
// 4 steps over 2 warps) has no weight round trip after it; the rest, if
// any, as PRE = 1. Two steps' weights are 24 registers more (88 a thread,
// see qmv_add_q2_4's bound). Qwen3-8B Q4_K_M on an H200 (fed decode,
// interleaved builds, docs/benchmarks.md 2026-12-02 from 20:03): 586.9-587.2
// tok/s against 583.0-583.8 with PRE = 1; uncapped (108 registers, no
// room for a gate/up block beside it) 583.4-584.5. The probe: the o
// projection 4.12 µs a layer against 4.89. All four steps of q/k/v before
// the wait (PRE = 4, blocks of 12 warps an SM at 158 registers) lost:
// q/k/v 6.5 µs a layer against ~5.6, 567.2-571.7 tok/s against 583.4-585.3;
// twelve warps an SM are too few for the arithmetic left after the wait.
template <int QR, bool G, int PRE = 1, class Rows>
__device__ __forceinline__ void qdotQ4K(const Rows& wr, const uint8_t* __restrict__ xq,
                                        const float2* __restrict__ xs, int nb, int s, int ss, bool active,
                                        float (&acc)[QR]) {
    static_assert(PRE == 1 || PRE == 2, "one or two steps before the wait");
    constexpr int H = QR / 2;
    const int lane = threadIdx.x & 31, h = lane & 1;
    const uint8_t* hp[H]; // the rows this lane finishes
#pragma unroll
    for (int k = 0; k < H; k++) hp[k] = h ? wr[H + k] : wr[k];
    float mine[H];
#pragma unroll
    for (int k = 0; k < H; k++) mine[k] = 0.f;
    uint4 qv[PRE][QR], hd[PRE][H]; // the steps loaded before the wait (then qv[0] for the rest)
    const QSteps qs(nb, s, ss);
    auto blockOf = [&](int k) { return k < qs.K ? 4 * qs.step(k) + (lane >> 3) : nb; };
    int b = blockOf(0);
    if (active && b < nb) q4kLoad<QR, G>(qv[0], hd[0], wr, hp, b, 0);
#pragma unroll
    for (int i = 1; i < PRE; i++) {
        const int bi = blockOf(i);
        if (active && bi < nb) q4kLoad<QR, G>(qv[i], hd[i], wr, hp, bi, 0);
    }
    qPdlWait(); // then the next launch (see qdot)
    qPdlLaunch();
#pragma unroll
    for (int r = 0; r < QR; r++) acc[r] = 0.f;
    if (!active) return;
    int kk = 0;
    if constexpr (PRE > 1) { // the steps loaded before the wait; the rest as PRE = 1
#pragma unroll
        for (int i = 0; i < PRE; i++)
            if (i < qs.K) q4kStep<QR>(qv[i], hd[i], blockOf(i), nb, xq, xs, mine);
        kk = PRE;
        b = blockOf(PRE);
        if (b < nb) q4kLoad<QR, G>(qv[0], hd[0], wr, hp, b, 0);
    }
    for (; kk < qs.K; kk++) {
        q4kStep<QR>(qv[0], hd[0], b, nb, xq, xs, mine);
        b = blockOf(kk + 1);
#ifdef QMV_DOWN_SKIP
        if (b < nb && nb > 32 && kk + 1 <= QMV_DOWN_SKIP) {
            q4kFill<QR>(qv[0], hd[0], b);
            continue;
        }
#endif
        if (b < nb) q4kLoad<QR, G>(qv[0], hd[0], wr, hp, b, 0);
    }
#pragma unroll
    for (int r = 0; r < QR; r++) acc[r] = r / H == h ? mine[r % H] : 0.f;
}

// QDotF runs qdot, or qdotQ4K for Q4_K and Q4_KG. PRE (steps loaded
// before the wait) is qdotQ4K's; qdot always loads one.
template <int F>
struct QDotF {
    template <int QR, int PRE = 1, class Rows>
    static __device__ __forceinline__ void run(const Rows& wr, const uint8_t* __restrict__ xq,
                                               const float2* __restrict__ xs, int nb, int s, int ss, bool active,
                                               float (&acc)[QR]) {
        qdot<F, QR>(wr, xq, xs, nb, s, ss, active, acc);
    }
};
template <bool G>
struct QDotQ4K {
    template <int QR, int PRE = 1, class Rows>
    static __device__ __forceinline__ void run(const Rows& wr, const uint8_t* __restrict__ xq,
                                               const float2* __restrict__ xs, int nb, int s, int ss, bool active,
                                               float (&acc)[QR]) {
        qdotQ4K<QR, G, PRE>(wr, xq, xs, nb, s, ss, active, acc);
    }
};
template <>
struct QDotF<Q4_K> : QDotQ4K<false> {};
template <>
struct QDotF<Q4_KG> : QDotQ4K<true> {};

// qsums leaves each warp's QR sums in red[warp] (all threads may read them
// after the call).
template <int QR>
__device__ __forceinline__ void qsums(float (*red)[QR], const float (&acc)[QR]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < QR; r++) {
        float v = warpSum(acc[r]);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
}

// qinvRms is the RMSNorm factor from nss partial sums of squares (qx_norm
// leaves one a block of 1024 elements, qmv_add_q one a 32-element group:
// 128 for a 4096-wide x), summed by one whole warp.
__device__ __forceinline__ float qinvRms(const float* ssp, int nss, int in, float eps) {
    float t = 0.f;
    for (int i = threadIdx.x & 31; i < nss; i += 32) t += ssp[i];
    return rsqrtf(warpSum(t) / in + eps);
}

// qmvBlock is block blk of y = W·xq (mode: plain, add into y, or times the
// norm factor): warps/wpr groups of QR rows (a block of 8 warps, or of 6
// with wpr = 3: qmvBlockFor, quant_mmv_plan.go).
template <int F, int QR>
__device__ __forceinline__ void qmvBlock(float* y, const uint8_t* w, long rb, int out, int blk,
                                         const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                         const float* ssp, int nss, float eps, int in, int wpr, int mode) {
    __shared__ float red[8][QR];
    const int warp = threadIdx.x >> 5, G = (blockDim.x >> 5) / wpr;
    const int base = (blk * G + warp / wpr) * QR;
    const QRowsO<QR> wr = qRowsAt<QR>(w, rb, base, out);
    float acc[QR];
    QDotF<F>::template run<QR>(wr, xq, xs, in >> 8, warp % wpr, wpr, base < out, acc);
    // Warp 0's norm factor before the block's sums: its loads overlap the
    // wait for the other warps.
    const float inv = mode == QMV_NORM && warp == 0 ? qinvRms(ssp, nss, in, eps) : 1.f;
    qsums<QR>(red, acc);
    const int t = threadIdx.x;
    if (t < G * QR) {
        const int g = t / QR, r = t % QR, o = (blk * G + g) * QR + r;
        if (o < out) {
            float v = 0.f;
            for (int i = 0; i < wpr; i++) v += red[g * wpr + i][r];
            if (mode == QMV_NORM) v *= inv;
            y[o] = mode == QMV_ADD ? y[o] + v : v;
        }
    }
}

template <int QR>
__device__ __forceinline__ void qmvMat(int f, float* y, const uint8_t* w, long rb, int out, int blk,
                                       const uint8_t* xq, const float2* xs, const float* ssp, int nss, float eps,
                                       int in, int wpr, int mode) {
    if (f == Q4_K)
        qmvBlock<Q4_K, QR>(y, w, rb, out, blk, xq, xs, ssp, nss, eps, in, wpr, mode);
    else if (f == Q6_K)
        qmvBlock<Q6_K, QR>(y, w, rb, out, blk, xq, xs, ssp, nss, eps, in, wpr, mode);
    else if (f == Q6_KG)
        qmvBlock<Q6_KG, QR>(y, w, rb, out, blk, xq, xs, ssp, nss, eps, in, wpr, mode);
    else if (f == Q8_0G)
        qmvBlock<Q8_0G, QR>(y, w, rb, out, blk, xq, xs, ssp, nss, eps, in, wpr, mode);
    else if (f == Q4_KG)
        qmvBlock<Q4_KG, QR>(y, w, rb, out, blk, xq, xs, ssp, nss, eps, in, wpr, mode);
    else
        qmvBlock<Q8_0, QR>(y, w, rb, out, blk, xq, xs, ssp, nss, eps, in, wpr, mode);
}

// qmv: y_i = W_i · x for up to four matrices sharing the quantized x (in %
// 256 == 0), each Q4_K, Q6_K or Q8_0 (f_i = its DType number); blocks [0,
// n0) do matrix 0, [n0, n1) matrix 1, ... (unused matrices: out 0).
#define QMV_MAT(i) float *y##i, const uint8_t *w##i, long rb##i, int out##i, int f##i
template <int QR>
__device__ __forceinline__ void qmvEntry(const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                         const float* ssp, int nss, float eps, int in, int wpr, int mode,
                                         QMV_MAT(0), int n0, QMV_MAT(1), int n1, QMV_MAT(2), int n2, QMV_MAT(3)) {
    // The block's matrix by selection (one inlined copy of the GEMV; an
    // indexed array of the parameters would live in local memory).
    const int b = blockIdx.x;
    float* y = y3;
    const uint8_t* w = w3;
    long rb = rb3;
    int out = out3, f = f3, blk = b - n2;
    if (b < n0) {
        y = y0, w = w0, rb = rb0, out = out0, f = f0, blk = b;
    } else if (b < n1) {
        y = y1, w = w1, rb = rb1, out = out1, f = f1, blk = b - n0;
    } else if (b < n2) {
        y = y2, w = w2, rb = rb2, out = out2, f = f2, blk = b - n1;
    }
    qmvMat<QR>(f, y, w, rb, out, blk, xq, xs, ssp, nss, eps, in, wpr, mode);
}
// qmvSwiGLU: act = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)) from the
// normed, quantized x; a group is gate rows o, o+1 and up rows o, o+1.
//
// ROUND (qmv_swiglu_q_R_B, the default; POCKET_QMV_SWIQ=0 off): a block computes 32
// outputs, in 32/per passes of its per = 8/wpr·QR/2 outputs, and rounds
// them to int8 as qx does, into xq2/xs2: the down projection then reads
// them without a qx launch of its own (quant_mmv.go). The float act is
// written too, for any other reader.
template <int F, int QR, bool ROUND>
__device__ __forceinline__ void qmvSwiGLU(float* act, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                          const float* ssp, int nss, float eps, int in, int wpr, const uint8_t* wg,
                                          const uint8_t* wu, long rb, int out, uint32_t* xq2, float2* xs2) {
    __shared__ float red[8][QR];
    __shared__ __align__(16) float sact[ROUND ? 32 : 1];
    const int warp = threadIdx.x >> 5, G = 8 / wpr, per = G * (QR / 2);
    const int passes = ROUND ? 32 / per : 1;
    float inv = 1.f; // warp 0's, from the first pass on (ssp is the predecessor's output)
    for (int p = 0; p < passes; p++) {
        const int blk = blockIdx.x * passes + p;
        const int base = (blk * G + warp / wpr) * (QR / 2);
        QRowsP<QR> wr;
#pragma unroll
        for (int r = 0; r < QR / 2; r++) {
            const long o = min(base + r, out - 1);
            wr.p[r] = wg + o * rb;
            wr.p[QR / 2 + r] = wu + o * rb;
        }
        float acc[QR];
        QDotF<F>::template run<QR>(wr, xq, xs, in >> 8, warp % wpr, wpr, base < out, acc);
        if (p == 0 && warp == 0) inv = qinvRms(ssp, nss, in, eps); // as qmvBlock
        qsums<QR>(red, acc);
        const int t = threadIdx.x;
        if (t < G * (QR / 2)) {
            const int g = t / (QR / 2), r = t % (QR / 2), o = (blk * G + g) * (QR / 2) + r;
            if (o < out) {
                float gv = 0.f, uv = 0.f;
                for (int i = 0; i < wpr; i++) {
                    gv += red[g * wpr + i][r];
                    uv += red[g * wpr + i][QR / 2 + r];
                }
                gv *= inv;
                uv *= inv;
                const float a = gv / (1.f + expf(-gv)) * uv;
                act[o] = a;
                if (ROUND) sact[p * per + t] = a;
            } else if (ROUND) {
                sact[p * per + t] = 0.f;
            }
        }
        if (ROUND) __syncthreads(); // red is read before the next pass writes it; sact is whole after the last
    }
    if (ROUND && warp == 0) {
        const int lane = threadIdx.x & 31, i = blockIdx.x * 8 + lane; // float4 i of the row
        const bool ok = lane < 8 && 4 * i < out;
        qRound(xq2, xs2, ok ? ((const float4*)sact)[lane] : make_float4(0.f, 0.f, 0.f, 0.f), i, ok);
    }
}

// qRoundBlock32 rounds the block's 32 values, lane l of warp 0 holding
// element 32·blockIdx.x + l of a row of out, to int8 as qx_norm does:
// lane l < 8 takes elements 4l..4l+3 (qRound's float4 i of the row).
__device__ __forceinline__ void qRoundBlock32(uint32_t* xq, float2* xs, float v, int out) {
    const int lane = threadIdx.x & 31, s = 4 * (lane & 7);
    const float4 q = make_float4(__shfl_sync(0xffffffffu, v, s), __shfl_sync(0xffffffffu, v, s + 1),
                                 __shfl_sync(0xffffffffu, v, s + 2), __shfl_sync(0xffffffffu, v, s + 3));
    const int i = blockIdx.x * 8 + lane;
    qRound(xq, xs, q, i, lane < 8 && 4 * i < out);
}

// qmvSwiGLUFlat is qmvSwiGLU<Q4_K or Q4_KG, QR, ROUND> with the passes
// run back to back in each warp (qmv_swiglu_qf_4_3): a warp's next pass's
// first step is loaded right after its last step, as any other step, and
// the pass's sums go to shared memory without a block barrier; one
// barrier at the end, then warp 0 forms and rounds the block's 32 outputs.
// In qmvSwiGLU every pass ends at two block barriers, so that each warp
// waits for the block's slowest and then a whole weight round trip before
// its next pass's first step (Qwen3-8B's gate/up: two passes of four steps
// a warp). wpr ≤ 2 (the Go side launches it for no more). Qwen3-8B Q4_K_M
// on an H200, fed decode, interleaved (docs/benchmarks.md, 2026-12-02 from
// 20:03): 593.7-594.6 tok/s against 583.4-585.3 (POCKET_QMV_FLAT=0); the
// probe: gate/up 16.00 µs a layer against 16.55.
template <int QR, bool G>
__device__ __forceinline__ void qmvSwiGLUFlat(float* act, const uint8_t* __restrict__ xq,
                                              const float2* __restrict__ xs, const float* ssp, int nss, float eps,
                                              int in, int wpr, const uint8_t* wg, const uint8_t* wu, long rb,
                                              int out, uint32_t* xq2, float2* xs2) {
    constexpr int H = QR / 2;
    __shared__ float red[128]; // [pass][warp][QR]: 32/per passes of 8 warps, 64·wpr floats (wpr ≤ 2)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = lane & 1, G8 = 8 / wpr, per = G8 * H;
    const int passes = 32 / per, nb = in >> 8;
    const int base = blockIdx.x * 32 + warp / wpr * H; // pass 0's first gate (and up) row
    QRowsP<QR> wr;
#pragma unroll
    for (int r = 0; r < H; r++) {
        wr.p[r] = wg + (long)(base + r) * rb;
        wr.p[H + r] = wu + (long)(base + r) * rb;
    }
    const uint8_t* hp[H]; // the rows this lane finishes
#pragma unroll
    for (int k = 0; k < H; k++) hp[k] = h ? wr[H + k] : wr[k];
    const long pstep = (long)per * rb; // a pass's rows lie per rows past the last pass's
    long off = 0;
    uint4 qv[QR], hd[H];
    const QSteps qs(nb, warp % wpr, wpr);
    auto blockOf = [&](int k) { return k < qs.K ? 4 * qs.step(k) + (lane >> 3) : nb; };
    int b = blockOf(0);
    if (b < nb) q4kLoad<QR, G>(qv, hd, wr, hp, b, 0);
#ifndef QMV_SWI_NOWAIT // diagnostic: no wait for the o projection (wrong sums; what the boundary costs)
    qPdlWait(); // then the next launch (see qdot)
#endif
    qPdlLaunch();
    float mine[H];
    for (int p = 0; p < passes; p++) {
#pragma unroll
        for (int k = 0; k < H; k++) mine[k] = 0.f;
        for (int kk = 0; kk < qs.K; kk++) {
            q4kStep<QR>(qv, hd, b, nb, xq, xs, mine);
            if (kk + 1 < qs.K) {
                b = blockOf(kk + 1);
            } else if (p + 1 < passes) {
                b = blockOf(0);
                off += pstep;
            } else {
                b = nb;
            }
#ifdef QMV_SWI_SKIP
            // Diagnostic: the warp's steps 1..QMV_SWI_SKIP (of passes × K)
            // made up instead of loaded, as if a ring had them on chip
            // already (wrong sums; timing only).
            if (b < nb && p * qs.K + kk + 1 <= QMV_SWI_SKIP)
                q4kFill<QR>(qv, hd, b);
            else
#endif
            if (b < nb) q4kLoad<QR, G>(qv, hd, wr, hp, b, off);
        }
        // The pass's QR row sums of this warp, while the next step loads.
#pragma unroll
        for (int r = 0; r < QR; r++) {
            const float v = warpSum(r / H == h ? mine[r % H] : 0.f);
            if (lane == 0) red[(p * 8 + warp) * QR + r] = v;
        }
    }
    // Warp 0's norm factor before the barrier: its loads overlap the wait
    // for the other warps.
    const float inv = warp == 0 ? qinvRms(ssp, nss, in, eps) : 1.f;
    __syncthreads();
    if (warp != 0) return;
    // Lane t forms output blockIdx.x·32 + t: pass t / per, group g, row r.
    const int p = lane / per, g = lane % per / H, r = lane % H, o = blockIdx.x * 32 + lane;
    float gv = 0.f, uv = 0.f;
    for (int i = 0; i < wpr; i++) {
        gv += red[(p * 8 + g * wpr + i) * QR + r];
        uv += red[(p * 8 + g * wpr + i) * QR + H + r];
    }
    gv *= inv;
    uv *= inv;
    const float a = gv / (1.f + expf(-gv)) * uv;
    if (o < out) act[o] = a;
    qRoundBlock32(xq2, xs2, a, out);
}

template <int QR, bool ROUND>
__device__ __forceinline__ void qmvSwiGLUEntry(float* act, const uint8_t* __restrict__ xq,
                                               const float2* __restrict__ xs, const float* ssp, int nss, float eps,
                                               int in, int wpr, int f, const uint8_t* wg, const uint8_t* wu, long rb,
                                               int out, uint32_t* xq2, float2* xs2) {
    if (f == Q4_K)
        qmvSwiGLU<Q4_K, QR, ROUND>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);
    else if (f == Q6_K)
        qmvSwiGLU<Q6_K, QR, ROUND>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);
    else if (!ROUND && f == Q6_KG) // the rounding kernel's regrouped layouts are qmv_swiglu_qg_R_B's
        qmvSwiGLU<Q6_KG, QR, ROUND>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);
    else if (!ROUND && f == Q8_0G)
        qmvSwiGLU<Q8_0G, QR, ROUND>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);
    else if (!ROUND && f == Q4_KG)
        qmvSwiGLU<Q4_KG, QR, ROUND>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);
    else
        qmvSwiGLU<Q8_0, QR, ROUND>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);
}

// qmvAddRound: y += W·x over blocks of 32 rows (G = 32/QR groups of wpr
// warps: blockDim 32·G·wpr), and the block then rounds its 32 new
// residual values times nw (the next op's RMSNorm weight) to int8 as
// qx_norm does, into xq2/xs2, with their sum of squares in ssp2[block]:
// the q/k/v or gate/up GEMV right after reads them (nss = out/32
// partials) without a qx_norm launch of its own (quant_mmv.go). Blocks of
// 32 rows take as many warps as the launched kernel's blocks of 8 did
// (16 for the 4096-column o projection of Qwen3-8B, 24 for its
// 12288-column down projection), in a quarter as many blocks.
//
// The block's 32 norm-weight values are asked into L2 before the wait, as
// the FP8 rings do (pipeNormPrefetch): the weight, last read a step ago,
// would come from DRAM after the dot. Two lanes, so that the 128 bytes
// are covered even where they straddle two lines. Qwen3-8B Q4_K_M fed
// decode: 583.0-583.8 tok/s against 581.6-582.3 (one call, interleaved).
template <int F, int QR, int PRE = 1>
__device__ __forceinline__ void qmvAddRound(float* y, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                            int in, int wpr, const uint8_t* w, long rb, int out,
                                            const float* __restrict__ nw, uint32_t* xq2, float2* xs2, float* ssp2) {
    __shared__ float red[32][QR];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int base = blockIdx.x * 32 + warp / wpr * QR;
    if (threadIdx.x < 2) {
        const int o = min(blockIdx.x * 32 + 31 * (int)threadIdx.x, out - 1);
        prefetchL2(nw + o);
    }
    const QRowsO<QR> wr = qRowsAt<QR>(w, rb, base, out);
    float acc[QR];
    QDotF<F>::template run<QR, PRE>(wr, xq, xs, in >> 8, warp % wpr, wpr, base < out, acc);
    // Warp 0 loads its residual and norm weight before the block's sums:
    // the loads overlap the wait for the other warps.
    const int o = blockIdx.x * 32 + lane, g = lane / QR, r = lane % QR;
    float v = 0.f, gam = 0.f;
    if (warp == 0 && o < out) v = y[o], gam = __ldg(nw + o);
    qsums<QR>(red, acc);
    if (warp != 0) return;
    if (o < out) {
        float d = 0.f;
        for (int i = 0; i < wpr; i++) d += red[g * wpr + i][r];
        v = d + v;
        y[o] = v;
    }
    const float ss = warpSum(v * v);
    if (lane == 0) ssp2[blockIdx.x] = ss;
    qRoundBlock32(xq2, xs2, v * gam, out);
}

template <int QR>
__device__ __forceinline__ void qmvAddRoundEntry(float* y, const uint8_t* __restrict__ xq,
                                                 const float2* __restrict__ xs, int in, int wpr, int f,
                                                 const uint8_t* w, long rb, int out, const float* nw, uint32_t* xq2,
                                                 float2* xs2, float* ssp2) {
    if (f == Q4_K)
        qmvAddRound<Q4_K, QR>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
    else if (f == Q6_K)
        qmvAddRound<Q6_K, QR>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
    else if (f == Q6_KG)
        qmvAddRound<Q6_KG, QR>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
    else if (f == Q8_0G)
        qmvAddRound<Q8_0G, QR>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
    else if (f == Q4_KG)
        qmvAddRound<Q4_KG, QR>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
    else
        qmvAddRound<Q8_0, QR>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
}

// qmv_add_q2_4 is qmv_add_q_4_3 with a warp's first two steps loaded
// before the wait (qdotQ4K's PRE = 2), for Q4_K and Q4_KG only (the Go
// side launches it for nothing else, in blocks of at most 512 threads).
// The bound is not the block: 736 threads cap ptxas at 88 registers (108
// uncapped, no spills either way), so that a 512-thread block leaves room
// on its SM for one 256-thread block of 80 (the gate/up GEMV after the o
// projection starts its first weights beside it, as with qmv_add_q_4_3).
#ifndef QMV_PRE2_BOUND
#define QMV_PRE2_BOUND 736
#endif
extern "C" __global__ void __launch_bounds__(QMV_PRE2_BOUND, 1)
    qmv_add_q2_4(float* y, const uint8_t* __restrict__ xq, const float2* __restrict__ xs, int in, int wpr, int f,
                 const uint8_t* w, long rb, int out, const float* nw, uint32_t* xq2, float2* xs2, float* ssp2) {
    PROBE_KERNEL();
    if (f == Q4_KG)
        qmvAddRound<Q4_KG, 4, 2>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
    else if (f == Q4_K)
        qmvAddRound<Q4_K, 4, 2>(y, xq, xs, in, wpr, w, rb, out, nw, xq2, xs2, ssp2);
}

// The entry points by geometry: qmv_R_B and qmv_swiglu_R_B compute R rows
// a warp with __launch_bounds__(256, B) (quant_mmv_plan.go's qmvGeoms).
// qmv_swiglu_qg_R_B is qmv_swiglu_q_R_B for the regrouped layouts: Q6_KG
// as a fourth format of that kernel made ptxas spill, in the Q4_K loop too.
// qmv_add_q_R_B's blocks hold as many threads as B blocks of 256 (the
// same registers a thread).
#define QMV_ENTRIES(R, B)                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, B)                                                             \
        qmv_##R##_##B(const uint8_t* __restrict__ xq, const float2* __restrict__ xs, const float* ssp, int nss,     \
                      float eps, int in, int wpr, int mode, QMV_MAT(0), int n0, QMV_MAT(1), int n1, QMV_MAT(2),     \
                      int n2, QMV_MAT(3)) {                                                                          \
        PROBE_KERNEL();                                                                                              \
        qmvEntry<R>(xq, xs, ssp, nss, eps, in, wpr, mode, y0, w0, rb0, out0, f0, n0, y1, w1, rb1, out1, f1, n1, y2, \
                    w2, rb2, out2, f2, n2, y3, w3, rb3, out3, f3);                                                  \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, B)                                                             \
        qmv_swiglu_##R##_##B(float* act, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,             \
                             const float* ssp, int nss, float eps, int in, int wpr, int f, const uint8_t* wg,        \
                             const uint8_t* wu, long rb, int out) {                                                  \
        PROBE_KERNEL();                                                                                              \
        qmvSwiGLUEntry<R, false>(act, xq, xs, ssp, nss, eps, in, wpr, f, wg, wu, rb, out, nullptr, nullptr);        \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, B)                                                             \
        qmv_swiglu_q_##R##_##B(float* act, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,           \
                               const float* ssp, int nss, float eps, int in, int wpr, int f, const uint8_t* wg,      \
                               const uint8_t* wu, long rb, int out, uint32_t* xq2, float2* xs2) {                    \
        PROBE_KERNEL();                                                                                              \
        qmvSwiGLUEntry<R, true>(act, xq, xs, ssp, nss, eps, in, wpr, f, wg, wu, rb, out, xq2, xs2);                  \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, B)                                                             \
        qmv_swiglu_qg_##R##_##B(float* act, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,          \
                                const float* ssp, int nss, float eps, int in, int wpr, int f, const uint8_t* wg,     \
                                const uint8_t* wu, long rb, int out, uint32_t* xq2, float2* xs2) {                   \
        PROBE_KERNEL();                                                                                              \
        if (f == Q4_KG)                                                                                              \
            qmvSwiGLU<Q4_KG, R, true>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);               \
        else if (f == Q6_KG)                                                                                         \
            qmvSwiGLU<Q6_KG, R, true>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);               \
        else                                                                                                         \
            qmvSwiGLU<Q8_0G, R, true>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);               \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, B)                                                             \
        qmv_swiglu_qf_##R##_##B(float* act, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,          \
                                const float* ssp, int nss, float eps, int in, int wpr, int f, const uint8_t* wg,     \
                                const uint8_t* wu, long rb, int out, uint32_t* xq2, float2* xs2) {                   \
        PROBE_KERNEL();                                                                                              \
        if (f == Q4_KG)                                                                                              \
            qmvSwiGLUFlat<R, true>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);                  \
        else if (f == Q4_K)                                                                                          \
            qmvSwiGLUFlat<R, false>(act, xq, xs, ssp, nss, eps, in, wpr, wg, wu, rb, out, xq2, xs2);                 \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256 * B)                                                            \
        qmv_add_q_##R##_##B(float* y, const uint8_t* __restrict__ xq, const float2* __restrict__ xs, int in, int wpr,\
                            int f, const uint8_t* w, long rb, int out, const float* nw, uint32_t* xq2, float2* xs2,  \
                            float* ssp2) {                                                                           \
        PROBE_KERNEL();                                                                                              \
        qmvAddRoundEntry<R>(y, xq, xs, in, wpr, f, w, rb, out, nw, xq2, xs2, ssp2);                                 \
    }
QMV_ENTRIES(4, 3)
QMV_ENTRIES(2, 4)
