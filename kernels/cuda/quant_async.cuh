// The batch-1 Q4_K/Q6_K/Q8_0 GEMVs of quant_mmv.cuh with the weights
// streamed through shared memory (included by quant.cu after
// quant_mmv.cuh; quant_async.go launches them under POCKET_QMV_ASYNC=1).
// NOT YET MEASURED on a GPU.
//
// Why: qmv and qmv_swiglu are latency bound. A lane holds one step of
// weights (4 rows × 4 blocks of 256 elements per warp) in registers, so an
// SM has at most 24 warps × one step in flight (~54 KiB of Q4_K, less in
// practice because the next step is issued only after the current one is
// computed); H200 measured 2.4 TB/s on Q4_K 12288×4096 and 1.3 TB/s on
// 4096×4096 of ~4.8. A register double buffer cost 108-128 registers.
// Here each warp owns a ring of S stages in dynamic shared memory and keeps
// S-1 steps of cp.async copies in flight (cp.async.cg: 16 bytes, L2 only,
// no registers held while in flight):
//
//   format  stage (4 rows, 1024 columns)  S  ring/warp  in flight/SM (2 blocks of 8 warps)
//   Q4_K    2304 B (36 chunks/row)        6  13824 B   16 × 5 × 2304 = 180 KiB
//   Q6_K    3360 B (54 chunks/row)        4  13824 B   16 × 3 × 3360 = 157 KiB
//   Q8_0    4352 B (69 chunks/row)        3  13248 B   16 × 2 × 4352 = 136 KiB
//
// A block is 8 warps with 8 × 13824 B of rings (+16 B of slack, below):
// 108 KiB, two blocks per SM (228 KiB of shared memory per SM on sm_90);
// __launch_bounds__(256, 2) allows 128 registers: ptxas takes 88-89, no
// spills. The price is instructions: per step a warp's loop is ~425 SASS
// instructions for Q4_K against qmv's ~358 (Q6_K ~680/583, Q8_0 ~271/179:
// the copies, the shared-memory reads and their addresses). If the GEMVs
// turn out issue-bound rather than latency-bound, that is what to cut.
//
// The copies: one step of a row is a contiguous byte range (Q4_K 576 B,
// Q6_K 840 B, Q8_0 1088 B; less on a ragged last step). Q6_K's 210-byte
// and Q8_0's 34-byte blocks are only 2-byte aligned, and cp.async moves 16
// aligned bytes, so the warp copies the aligned 16-byte chunks covering
// the range (lane k: chunks k, k + 32, ...; at most CH per row, the range
// start's misalignment o = 0..14 included) into the stage's row segment,
// and the lanes then read their bytes at segment + o + (offset in the
// range) exactly as quant_mmv.cuh's ldW reads global memory (Q6_K/Q8_0
// through ldsu, the shared-memory ldu). A lane thus reads other lanes'
// chunks: after its cp.async.wait_group a __syncwarp makes them visible
// (and orders the previous step's reads before the copies that overwrite
// that stage). Lane-owned 16-byte pieces would need no __syncwarp, but a
// lane's Q6_K bytes straddle up to 9 aligned pieces per row (5× the bytes
// in the ring) and Q4_K's 16-byte header would be copied by all 8 lanes
// of a block. ldsu reads one aligned word past its bytes (unused when the
// start is aligned), hence the 16 bytes of slack after the last ring.
//
// Every lane commits one group per step slot, empty when the warp has no
// step left (or is inactive), so that cp.async.wait_group S-2 always means
// "step i has landed". The first S-1 steps are issued before
// griddepcontrol.wait (weights are never written during a step; the PDL
// structure of qdot). The lane mapping, the dots and the order of the
// float operations are qdot's: with the same warps per group (wpr) the
// results are bit-for-bit qmv's. The Go side (quant_async_plan.go) picks
// wpr by its own policy, so they can differ by the order of the warps'
// partial sums.
#define QA_RING 13824 // bytes of one warp's ring
#define QA_SLACK 16

template <int F> struct QA;
// BBB: bytes of one 256-element block (Q8_0: 8 blocks of 34); CH: 16-byte
// chunks of one row's step, at most; S: stages of the ring.
template <> struct QA<Q4_K> { enum { BBB = 144, CH = 36, S = 6 }; };
template <> struct QA<Q6_K> { enum { BBB = 210, CH = 54, S = 4 }; };
template <> struct QA<Q8_0> { enum { BBB = 272, CH = 69, S = 3 }; };

// Q4_K rows are 16-byte aligned (quant_mmv.cuh); the others start at any
// even byte.
static_assert(QA<Q4_K>::CH * 16 == 4 * QA<Q4_K>::BBB, "Q4_K chunks");
static_assert(QA<Q6_K>::CH == (14 + 4 * QA<Q6_K>::BBB + 15) / 16, "Q6_K chunks");
static_assert(QA<Q8_0>::CH == (14 + 4 * QA<Q8_0>::BBB + 15) / 16, "Q8_0 chunks");
static_assert(QA<Q4_K>::S * QR * QA<Q4_K>::CH * 16 <= QA_RING, "Q4_K ring");
static_assert(QA<Q6_K>::S * QR * QA<Q6_K>::CH * 16 <= QA_RING, "Q6_K ring");
static_assert(QA<Q8_0>::S * QR * QA<Q8_0>::CH * 16 <= QA_RING, "Q8_0 ring");

extern __shared__ __align__(16) uint8_t qaSmem[];

__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cpCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cpWait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ldsu is ldu of a ring: N little-endian words from shared byte offset p.
template <int N> __device__ __forceinline__ void ldsu(uint32_t p, uint32_t (&o)[N]) {
    const uint32_t* w = (const uint32_t*)(qaSmem + (p & ~3u));
    const uint32_t sh = (p & 3) * 8;
    uint32_t t[N + 1];
#pragma unroll
    for (int i = 0; i <= N; i++) t[i] = w[i];
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = __funnelshift_r(t[i], t[i + 1], sh);
}
__device__ __forceinline__ uint32_t lds16(uint32_t p) { return *(const unsigned short*)(qaSmem + p); }

// qaLd is QT<F>::ldW from a row segment of the ring: blk is the shared
// offset of the lane's 256-element block (Q8_0: of the 8 blocks 8b..8b+7).
template <int F> __device__ __forceinline__ void qaLd(typename QT<F>::W& w, uint32_t blk, int j);
template <> __device__ __forceinline__ void qaLd<Q4_K>(QT<Q4_K>::W& w, uint32_t blk, int j) {
    w.hd = *(const uint4*)(qaSmem + blk);
    w.qv = *(const uint4*)(qaSmem + blk + 16 + 16 * j);
}
template <> __device__ __forceinline__ void qaLd<Q6_K>(QT<Q6_K>::W& w, uint32_t blk, int t) {
    const int n = t >> 2, l8 = t & 3;
    ldsu<2>(blk + 64 * n + 8 * l8, w.a);
    ldsu<2>(blk + 64 * n + 32 + 8 * l8, w.b);
    ldsu<2>(blk + 128 + 32 * n + 8 * l8, w.h);
    ldsu<2>(blk + 192 + 8 * n, w.sc);
    w.d = lds16(blk + 208);
}
template <> __device__ __forceinline__ void qaLd<Q8_0>(QT<Q8_0>::W& w, uint32_t blk, int j) {
    blk += 34 * j;
    ldsu<8>(blk + 2, w.q);
    w.d = lds16(blk);
}

// qaMis is the misalignment of step sidx of a row within its first chunk.
template <int F> __device__ __forceinline__ uint32_t qaMis(const uint8_t* row, int sidx) {
    if (F == Q4_K) return 0;
    return ((uint32_t)(uintptr_t)row + (uint32_t)sidx * (4 * QA<F>::BBB)) & 15;
}

// qaIssue starts the copies of step sidx of the QR rows into the ring
// stage at shared offset st (without committing them).
template <int F, class Rows>
__device__ __forceinline__ void qaIssue(uint32_t st, const Rows& wr, int sidx, int nb, int lane) {
    // Addresses from the lane's first chunk: chunk k0 + lane at immediate
    // offsets 16·k0 of both.
    const uint32_t len = (uint32_t)min(4, nb - 4 * sidx) * QA<F>::BBB;
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(qaSmem) + st + 16 * lane;
#pragma unroll
    for (int r = 0; r < QR; r++) {
        const uint32_t o = qaMis<F>(wr[r], sidx);
        const uint8_t* a = wr[r] + ((long)sidx * (4 * QA<F>::BBB) - o + 16 * lane);
        const int n = (int)((o + len + 15) >> 4) - lane; // chunks from the lane's first
#pragma unroll
        for (int k0 = 0; k0 < QA<F>::CH; k0 += 32)
            if (k0 < n) cpAsync16(dst + (r * QA<F>::CH + k0) * 16, a + 16 * k0);
    }
}

// qaDot: see qdot (quant_mmv.cuh) and the top of this file.
template <int F, class Rows>
__device__ __forceinline__ void qaDot(const Rows& wr, const uint8_t* __restrict__ xq, const float2* __restrict__ xs,
                                      int nb, int s, int ss, bool active, float (&acc)[QR]) {
    constexpr int S = QA<F>::S;
    constexpr uint32_t STG = QR * QA<F>::CH * 16, SEG = QA<F>::CH * 16;
    const int lane = threadIdx.x & 31, j = lane & 7;
    const uint32_t ring = (threadIdx.x >> 5) * QA_RING;
#pragma unroll
    for (int r = 0; r < QR; r++) acc[r] = 0.f;
    const int ns = (nb + 3) >> 2;
    const int n = active && s < ns ? (ns - s + ss - 1) / ss : 0; // this warp's steps
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < n) qaIssue<F>(ring + i * STG, wr, s + i * ss, nb, lane);
        cpCommit();
    }
    qPdlLaunch();
    qPdlWait();
    int rs = 0, ws = S - 1; // stages read and written next
    for (int i = 0; i < n; i++) {
        const int sidx = s + i * ss, b = 4 * sidx + (lane >> 3);
        typename QT<F>::X x;
        if (b < nb) QT<F>::ldX(x, xq, xs, b, j);
        cpWait<S - 2>(); // this lane's copies of step i have landed
        __syncwarp();    // and the other lanes'; all have read step i - 1
        if (i + S - 1 < n) qaIssue<F>(ring + ws * STG, wr, s + (i + S - 1) * ss, nb, lane);
        cpCommit();
        if (b < nb) {
#pragma unroll
            for (int r = 0; r < QR; r++) {
                typename QT<F>::W w;
                qaLd<F>(w, ring + rs * STG + r * SEG + qaMis<F>(wr[r], sidx) + (lane >> 3) * QA<F>::BBB, j);
                acc[r] += QT<F>::dot(w, x, j);
            }
        }
        rs = rs + 1 == S ? 0 : rs + 1;
        ws = ws + 1 == S ? 0 : ws + 1;
    }
}

// qmv_async and qmv_swiglu_async: qmv and qmv_swiglu on qaDot, launched
// with QA_SHM bytes of dynamic shared memory (8 rings + slack).
#define QA_SHM (8 * QA_RING + QA_SLACK)
extern "C" __global__ void __launch_bounds__(256, 2)
    qmv_async(const uint8_t* __restrict__ xq, const float2* __restrict__ xs, const float* ssp, float eps, int in,
              int wpr, int mode, QMV_MAT(0), int n0, QMV_MAT(1), int n1, QMV_MAT(2), int n2, QMV_MAT(3)) {
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
    qmvMat<true>(f, y, w, rb, out, blk, xq, xs, ssp, eps, in, wpr, mode);
}

extern "C" __global__ void __launch_bounds__(256, 2)
    qmv_swiglu_async(float* act, const uint8_t* __restrict__ xq, const float2* __restrict__ xs, const float* ssp,
                     float eps, int in, int wpr, int f, const uint8_t* wg, const uint8_t* wu, long rb, int out) {
    if (f == Q4_K)
        qmvSwiGLU<Q4_K, true>(act, xq, xs, ssp, eps, in, wpr, wg, wu, rb, out);
    else if (f == Q6_K)
        qmvSwiGLU<Q6_K, true>(act, xq, xs, ssp, eps, in, wpr, wg, wu, rb, out);
    else
        qmvSwiGLU<Q8_0, true>(act, xq, xs, ssp, eps, in, wpr, wg, wu, rb, out);
}
