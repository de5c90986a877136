// A Gated DeltaNet layer's one-token decode mix in one launch
// (hybrid_fused.go loads it: kernels.FusedDeltaMix): the causal
// convolution with SiLU and its state update, the gated delta rule with
// its state update and the gated RMSNorm, writing what causal_conv1d_K,
// gated_delta_rule and rms_norm_gated (hybrid.cu) write in sequence, with
// the same float operations in the same order, but without storing the
// convolved row.
//
// Geometry (deltaMixPlan in hybrid_fused.go). One thread-block cluster
// per key head; its rep = vheads/kheads value heads are split into tiles
// of 32·CW state columns, one block per (value head, tile), so a cluster
// has rep·tiles ≤ 8 blocks (the portable cluster size). Qwen3.5-27B (16
// key heads, 48 value heads, 128 × 128): CW = 2, two tiles per value
// head, 16 clusters of 6, 96 blocks, each reading and writing 32 KiB of
// the 3 MiB state with all its 16 loads per thread issued before the PDL
// wait. Qwen3-Next (16/32): CW = 1, 16 clusters of 8.
//
// The cluster is what makes the one launch possible:
//  - The conv state of a key head's q and k channels is read by every
//    block of its cluster (each convolves all 2·dk q/k channels itself,
//    from the old state, before the wait) and by no other block. The new
//    state is written only after the cluster barrier that every block
//    reaches after its reads, each channel by one block (contiguous
//    shares by rank), so no block can read a window another one has
//    already shifted. A value channel belongs to one block (its column),
//    which reads and writes its window alone.
//  - The gated norm needs Σy² over a value head's dv outputs, which the
//    head's tiles share: each block leaves its partial sums (one per 32
//    columns, in shared memory), and after the same barrier reads those
//    of its head's tiles from their shared memory (distributed shared
//    memory). A second barrier keeps every block alive until the others
//    have read it.
//
// Threads: 8 warps; lane ↔ column j0+lane+32c (c < CW), warp ↔ state rows
// warp, warp+8, … as in gated_delta_rule, so the column sums and the
// l2/RMS sums are formed in the same order (results equal the three
// kernels' to the bit as long as nvcc contracts the same products). Thread
// i < dk also convolves q and k channel i; thread dk+jj the value channel
// of the block's column jj.
//
// Compiled to compute_90 PTX by `go generate` (hybrid_fused.go); the PTX
// is committed and embedded.
#include "hybrid_common.cuh"

#define MW 8      // warps per block
#define MR 16     // state rows per thread: dk ≤ MW*MR = 128
#define MKMAX 4   // widest convolution (Qwen3-Next and Qwen3.5 use 4)

// ---------------------------------------------------------------- clusters (sm_90)

__device__ __forceinline__ void clusterArrive() { asm volatile("barrier.cluster.arrive;" ::: "memory"); }
__device__ __forceinline__ void clusterWait() { asm volatile("barrier.cluster.wait;" ::: "memory"); }

// remoteD reads the double at p in the shared memory of the cluster's
// block rank.
__device__ __forceinline__ double remoteD(const double* p, unsigned rank) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p), r;
    double v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(r) : "memory");
    return v;
}

// ---------------------------------------------------------------- the convolution of one channel

// convWin is one channel's convolution: the weights of its history and of
// the current input, and the history (the last kc-1 inputs, oldest
// first), held in registers (every index a constant after unrolling; the
// run-time width only predicates).
struct convWin {
    float w[MKMAX - 1], h[MKMAX - 1], last;
};

__device__ __forceinline__ void loadWin(convWin& v, const void* cw, int wdt, const float* conv, long c, long ch,
                                        int kc) {
#pragma unroll
    for (int j = 0; j < MKMAX - 1; j++) {
        v.w[j] = j < kc - 1 ? loadW(cw, wdt, c * kc + j) : 0.f;
        v.h[j] = j < kc - 1 ? conv[(long)j * ch + c] : 0.f;
    }
    v.last = loadW(cw, wdt, c * kc + kc - 1);
}

// convOut is conv1d's output for input cur, operation for operation.
__device__ __forceinline__ float convOut(const convWin& v, float cur, int kc) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < MKMAX - 1; j++)
        if (j < kc - 1) acc = __fadd_rn(acc, __fmul_rn(v.w[j], v.h[j]));
    acc = __fadd_rn(acc, __fmul_rn(v.last, cur));
    return acc * sigmoidD(acc);
}

// storeWin leaves the history shifted by cur in the state.
__device__ __forceinline__ void storeWin(const convWin& v, float cur, float* conv, long c, long ch, int kc) {
#pragma unroll
    for (int j = 0; j < MKMAX - 1; j++)
        if (j < kc - 1) conv[(long)j * ch + c] = j + 1 < kc - 1 ? v.h[min(j + 1, MKMAX - 2)] : cur;
}

// ---------------------------------------------------------------- delta_mix

template <int CW>
__device__ void deltaMix(float* core, const float* qkv, const float* z, const float* a, const float* b, float* conv,
                         float* state, const void* cw, int wdt, const float* aLog, const float* dtBias,
                         const float* normW, int kheads, int vheads, int dk, int dv, int kc, int tiles, float eps) {
    constexpr int W = 32 * CW;  // columns per block
    __shared__ float qs[MW * MR], ks[MW * MR], vs[W];
    __shared__ float redK[MW][W], redQ[MW][W];
    __shared__ double ssq[MW], ssk[MW];
    __shared__ double npart[CW];  // Σy² per 32 columns, read by the head's other tiles
    __shared__ float gate[2];     // decay, beta
    int rep = vheads / kheads, cs = rep * tiles;
    int kh = blockIdx.x / cs, rank = blockIdx.x % cs;  // a 1-D cluster's rank is blockIdx.x mod its size
    int h = kh * rep + rank / tiles, j0 = (rank % tiles) * W;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int kd = kheads * dk;
    long ch = 2L * kd + (long)vheads * dv;
    pdlLaunchDependents();

    // Before the wait: the state, the convolution windows, the conv and
    // norm weights (no earlier kernel of the step writes them).
    float* S = state + (long)h * dk * dv;
    float s[CW][MR];
#pragma unroll
    for (int c = 0; c < CW; c++) {
        int j = j0 + 32 * c + lane;
#pragma unroll
        for (int m = 0; m < MR; m++) {
            int i = warp + MW * m;
            s[c][m] = j < dv && i < dk ? S[(long)i * dv + j] : 0.f;
        }
    }
    bool qk = tid < dk;
    int jj = tid - dk;  // the value column this thread convolves, if 0 ≤ jj < W
    bool isV = !qk && jj < W && j0 + jj < dv;
    long cq = (long)kh * dk + tid, ck = kd + cq, cv = 2L * kd + (long)h * dv + j0 + jj;
    convWin wq, wk;
    if (qk) {
        loadWin(wq, cw, wdt, conv, cq, ch, kc);
        loadWin(wk, cw, wdt, conv, ck, ch, kc);
    } else if (isV) {
        loadWin(wq, cw, wdt, conv, cv, ch, kc);
    }
    float nw[CW];
#pragma unroll
    for (int c = 0; c < CW; c++) nw[c] = warp == 0 && j0 + 32 * c + lane < dv ? normW[j0 + 32 * c + lane] : 0.f;
    pdlWait();

    // Convolve: q and k channel tid, or the value channel of column jj.
    float xq = 0.f, xk = 0.f;
    double pq = 0, pk = 0;
    if (qk) {
        xq = qkv[cq];
        xk = qkv[ck];
        float q = convOut(wq, xq, kc), k = convOut(wk, xk, kc);
        qs[tid] = q;
        ks[tid] = k;
        pq = (double)q * q;
        pk = (double)k * k;
    } else if (jj < W) {
        if (isV) xq = qkv[cv];
        vs[jj] = isV ? convOut(wq, xq, kc) : 0.f;
    }
    pq = warpSumD(pq);
    pk = warpSumD(pk);
    if (lane == 0) {
        ssq[warp] = pq;
        ssk[warp] = pk;
    }
    if (tid == 0) {
        // (A_log and dt_bias after the wait too: one thread's loads beside
        // its q/k inputs, where holding them would cost every thread
        // registers.)
        double negA = -exp((double)aLog[h]);
        double x = (double)(a[h] + dtBias[h]);
        double sp = x > 20 ? x : log1p(exp(x));  // torch softplus
        gate[0] = (float)exp(negA * sp);
        gate[1] = sigmoidD(b[h]);
    }
    float zg[CW];
#pragma unroll
    for (int c = 0; c < CW; c++) zg[c] = warp == 0 && j0 + 32 * c + lane < dv ? z[(long)h * dv + j0 + 32 * c + lane] : 0.f;
    __syncthreads();  // q, k, v, the l2 sums and the gates ready

    // The delta rule as gated_delta_rule runs it for one token.
    double tq = 0, tk = 0;
#pragma unroll
    for (int w = 0; w < MW; w++) {
        tq += ssq[w];
        tk += ssk[w];
    }
    float qscale = (float)(1.0 / sqrt((double)dk));
    float iq = (float)(1.0 / sqrt(tq + 1e-6)) * qscale, ik = (float)(1.0 / sqrt(tk + 1e-6));
    float decay = gate[0], beta = gate[1];
#pragma unroll
    for (int c = 0; c < CW; c++) {
        float mem = 0.f;
#pragma unroll
        for (int m = 0; m < MR; m++) {
            int i = warp + MW * m;
            if (i < dk) {
                s[c][m] *= decay;
                mem += s[c][m] * (ks[i] * ik);
            }
        }
        redK[warp][32 * c + lane] = mem;
    }
    __syncthreads();  // partial Sᵀk of every warp
#pragma unroll
    for (int c = 0; c < CW; c++) {
        float tot = 0.f;
#pragma unroll
        for (int w = 0; w < MW; w++) tot += redK[w][32 * c + lane];
        float delta = (vs[32 * c + lane] - tot) * beta;
        float o = 0.f;
#pragma unroll
        for (int m = 0; m < MR; m++) {
            int i = warp + MW * m;
            if (i < dk) {
                s[c][m] += (ks[i] * ik) * delta;
                o += s[c][m] * (qs[i] * iq);
            }
        }
        redQ[warp][32 * c + lane] = o;
    }
    __syncthreads();  // partial Sᵀq of every warp

    // Warp 0: the outputs y and their Σy² per 32 columns, as
    // rms_norm_gated's warps form them.
    float y[CW];
    if (warp == 0) {
#pragma unroll
        for (int c = 0; c < CW; c++) {
            y[c] = 0.f;
#pragma unroll
            for (int w = 0; w < MW; w++) y[c] += redQ[w][32 * c + lane];
            if (j0 + 32 * c + lane >= dv) y[c] = 0.f;
            double ss = warpSumD((double)y[c] * y[c]);
            if (lane == 0) npart[c] = ss;
        }
    }
    clusterArrive();  // (A) this block's reads of the q/k windows and npart's writes are done
    clusterWait();

    // The gated norm over the head's tiles (in column order).
    if (warp == 0) {
        unsigned first = (unsigned)(rank / tiles * tiles);
        double tot = 0;
        for (int t = 0; t < tiles; t++) {
#pragma unroll
            for (int c = 0; c < CW; c++) tot += remoteD(&npart[c], first + t);
        }
        float inv = (float)(1.0 / sqrt(tot / dv + (double)eps));
#pragma unroll
        for (int c = 0; c < CW; c++) {
            int j = j0 + 32 * c + lane;
            if (j < dv) {
                float g = zg[c];
                core[(long)h * dv + j] =
                    __fmul_rn(__fmul_rn(__fmul_rn(y[c], inv), nw[c]), __fmul_rn(g, sigmoidD(g)));
            }
        }
    }
    clusterArrive();  // (B) done with the other blocks' shared memory

    // The states: this block's columns, its value channels' windows and
    // its share of the key head's q/k windows (safe after (A)).
#pragma unroll
    for (int c = 0; c < CW; c++) {
        int j = j0 + 32 * c + lane;
#pragma unroll
        for (int m = 0; m < MR; m++) {
            int i = warp + MW * m;
            if (j < dv && i < dk) S[(long)i * dv + j] = s[c][m];
        }
    }
    if (qk && tid * cs / dk == rank) {
        storeWin(wq, xq, conv, cq, ch, kc);
        storeWin(wk, xk, conv, ck, ch, kc);
    } else if (isV) {
        storeWin(wq, xq, conv, cv, ch, kc);
    }
    clusterWait();  // (B): no block leaves while another may still read its npart
}

// Up to CW = 2 at two blocks per SM (≤ 128 registers, no spills), so that
// a cluster fits on half as many SMs; CW = 4 needs ~190.
#define MIX(CW)                                                                                                     \
    extern "C" __global__ void __launch_bounds__(MW * 32, CW <= 2 ? 2 : 1)                                          \
        delta_mix_##CW(float* core, const float* qkv, const float* z, const float* a, const float* b, float* conv,  \
                       float* state, const void* cw, int wdt, const float* aLog, const float* dtBias,               \
                       const float* normW, int kheads, int vheads, int dk, int dv, int kc, int tiles, float eps) {  \
        deltaMix<CW>(core, qkv, z, a, b, conv, state, cw, wdt, aLog, dtBias, normW, kheads, vheads, dk, dv, kc,  \
                     tiles, eps);                                                                                   \
    }
MIX(1)
MIX(2)
MIX(4)
