// Gated DeltaNet kernels of the CUDA backend (hybrid.go): the optional
// kernels.HybridOps that Qwen3-Next and Qwen3.5 need. The CPU backend
// (kernels/cpu/deltanet.go) is the reference; the scalar functions the CPU
// evaluates in float64 (sigmoid, softplus, exp of the decay, the L2 and RMS
// sums) are evaluated in double here too, so that fp32 results agree to a
// few ulps.
//
// Compiled to compute_90 PTX by `go generate` (hybrid.go); the PTX is
// committed and embedded.
#include "hybrid_common.cuh"
#include "attn_merge.cuh"

// ---------------------------------------------------------------- CausalConv1D

#define CMAXK 8  // largest convolution width (Qwen3-Next uses 4)

// A thread per channel walks a chunk of rows (blockIdx.y: rows
// [y·chunk, y·chunk + chunk)) in order with the last K-1 inputs in
// registers. K is a template parameter so that every window index is a
// constant and the window stays in registers (with a run-time width nvcc
// moved it to local memory). A decode step is one chunk. A prefill pass
// used to be one chunk too, a thread walking all of its rows: 80 blocks
// for Qwen3.5-27B's 10240 channels, each step a dependent load, 1.1 ms a
// layer at 2048 rows (ncu on an H200) for ~170 MB of traffic; chunks
// (≥ CMAXK rows) fill the GPU. The first chunk reads the state and is the
// one that writes it back: the other chunks start their windows from x
// (chunk ≥ K-1 rows before them), so nothing else reads the state.
//
// lean (POCKET_HYBRID_LEAN, the default) takes the SiLU's sigmoid in float
// (__expf) rather than double, as the lean delta rule does its gates: a
// double exp is a long dependent chain in a kernel that is one in the
// decode step's critical path.
template <int K>
__device__ void conv1d(float* dst, const float* x, float* state, const void* w, int wdt, int rows, int ch, int chunk,
                       int lean) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int t0 = blockIdx.y * chunk, t1 = min(t0 + chunk, rows);
    pdlLaunchDependents();
    if (c >= ch || t0 >= rows) return;
    const bool first = t0 == 0;
    // The weights and this layer's own state before the wait (no kernel
    // of the step before this one writes them); x after it.
    float wt[K], win[K];  // win[0..K-1): oldest first
#pragma unroll
    for (int j = 0; j < K; j++) wt[j] = loadW(w, wdt, (long)c * K + j);
    if (first) {
#pragma unroll
        for (int j = 0; j < K - 1; j++) win[j] = state[(long)j * ch + c];
    }
    pdlWait();
    if (!first) {
#pragma unroll
        for (int j = 0; j < K - 1; j++) win[j] = x[(long)(t0 - (K - 1) + j) * ch + c];
    }
    for (int t = t0; t < t1; t++) {
        float cur = x[(long)t * ch + c];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < K - 1; j++) acc = __fadd_rn(acc, __fmul_rn(wt[j], win[j]));
        acc = __fadd_rn(acc, __fmul_rn(wt[K - 1], cur));
        dst[(long)t * ch + c] = lean ? acc / (1.f + __expf(-acc)) : acc * sigmoidD(acc);
#pragma unroll
        for (int j = 0; j < K - 2; j++) win[j] = win[j + 1];
        if (K > 1) win[K - 2] = cur;
    }
    if (!first) return;
    if (t1 == rows) {  // one chunk: the window is the new state
#pragma unroll
        for (int j = 0; j < K - 1; j++) state[(long)j * ch + c] = win[j];
        return;
    }
    // Several chunks (rows > chunk ≥ K-1): the pass's last K-1 inputs.
#pragma unroll
    for (int j = 0; j < K - 1; j++) state[(long)j * ch + c] = x[(long)(rows - (K - 1) + j) * ch + c];
}

#define CONV(K)                                                                                                 \
    extern "C" __global__ void causal_conv1d_##K(float* dst, const float* x, float* state, const void* w, int wdt, \
                                                int rows, int ch, int chunk, int lean) { PROBE_KERNEL();                        \
        conv1d<K>(dst, x, state, w, wdt, rows, ch, chunk, lean);                                                \
    }
CONV(1)
CONV(2)
CONV(3)
CONV(4)
CONV(5)
CONV(6)
CONV(7)
CONV(8)

// ---------------------------------------------------------------- GatedDeltaRule

#define GW 8      // warps per block
#define GMAXR 32  // state rows per thread: DK ≤ GW*GMAXR = 256

// A state element's update is S·decay + k·delta, rounded as stateDecay
// and stateAdd spell it out (no contraction left to the compiler), so that
// the delta rule's in-place update and delta_state_update's give the same
// bits.
__device__ __forceinline__ float stateDecay(float s, float decay) { return __fmul_rn(s, decay); }
__device__ __forceinline__ float stateAdd(float decayed, float kn, float delta) {
    return __fmaf_rn(kn, delta, decayed);
}

// deltaUpdHead is where value head h's update operands start in upd: the
// decay, dk normalised key elements, dv deltas.
__device__ __forceinline__ long deltaUpdHead(int h, int dk, int dv) { return (long)h * (1 + dk + dv); }

// One block per (value head, 32 state columns). Thread (warp, lane) holds
// column j0+lane of state rows warp, warp+GW, ... in registers for the
// whole pass, so the state is read and written once however many tokens
// the pass has; per token the block runs the recurrence
//
//     S *= decay;  delta = beta*(v - Sᵀk);  S += k ⊗ delta;  out = Sᵀq
//
// with the column sums Sᵀk and Sᵀq reduced across warps in shared memory.
// Every column is independent, so the blocks need no communication.
// Tokens run in order: a pass costs rows × a few block barriers (passes
// of more than 64 rows take the chunked form of hybrid_chunk.cu instead).
//
// LEAN (gated_delta_rule_l, the default; POCKET_DELTA_LEAN=0 takes the
// other) shortens what runs after the PDL wait, which probes found is what a
// short kernel costs in the decode graph (docs/benchmarks.md, 2026-11-30
// from 10:59: the whole DeltaNet mix 10 µs a layer after its wait, its
// double-precision scalars 1.5 µs of it):
//   - a token's value, a and b are loaded with its q and k, before the
//     first barrier (not after the Sᵀk sum and the q/k loop);
//   - the gates are worked out by the block's last thread, which loads no
//     q or k when dk < 256 (Qwen3.5, Qwen3-Next: 128), in float; the l2
//     sums and factors are float too. In double, one thread ran ~400
//     dependent instructions (exp, log1p) while the block waited at the
//     first barrier. The CPU's float64 scalars differ from these by float
//     rounding, far inside the CUDA backend's bf16 tolerance.
// Measured on an H200 (Qwen3.5-27B FP8 decode, interleaved): 124.1-124.3
// against 123.5-123.6 tok/s; conformance and the FP8/hybrid fixtures as
// before.
//
// SIDE (gated_delta_rule_s, one-token passes in a decode graph,
// POCKET_DELTA_SIDE) leaves the state as it was and writes instead what
// its update needs: the decay and the normalised key of each value head
// and the column's delta, to upd (deltaUpd below); delta_state_update
// applies them on a side branch of the graph that joins at the step's
// end. The ~2.2 µs a DeltaNet layer that the grid takes to complete while
// its 3 MB of state stores drain (docs/benchmarks.md, 2026-12-01 from
// 23:16) leave the critical path; the update still reads and writes the
// state beside the projections that follow. Both forms update the state
// with the same rounded operations (stateDecay, stateAdd), so they leave the same
// bits.

template <bool LEAN, bool SIDE = false>
__device__ __forceinline__ void gatedDeltaRule(float* out, const float* qkv, const float* a, const float* b,
                                               float* state, const float* aLog, const float* dtBias, int rows,
                                               int kheads, int vheads, int dk, int dv, float* upd = nullptr) {
    __shared__ float qs[GW * GMAXR], ks[GW * GMAXR];
    __shared__ float red[GW][32];
    __shared__ double ssq[GW], ssk[GW];
    __shared__ float gate[2];  // decay, beta of the current token
    int tiles = (dv + 31) / 32;
    int h = blockIdx.x / tiles, j = (blockIdx.x % tiles) * 32 + (threadIdx.x & 31);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    bool col = j < dv;
    int kh = h / (vheads / kheads), kd = kheads * dk;
    long cd = 2L * kd + (long)vheads * dv;
    float* S = state + (long)h * dk * dv;
    float s[GMAXR];
#pragma unroll
    for (int m = 0; m < GMAXR; m++) {
        int i = warp + GW * m;
        s[m] = col && i < dk ? S[(long)i * dv + j] : 0.f;
    }
    double negA = -exp((double)aLog[h]);
    float qscale = (float)(1.0 / sqrt((double)dk));
    // The state and the weights above are read before the wait (only this
    // kernel writes a layer's state); q, k, v, a and b after it.
    pdlLaunchDependents();
    pdlWait();
    for (int t = 0; t < rows; t++) {
        const float* row = qkv + t * cd;
        const bool gater = LEAN ? threadIdx.x == blockDim.x - 1 : threadIdx.x == 0;
        float vl = 0.f, al = 0.f, bl = 0.f;
        if (LEAN) {
            vl = col ? row[2L * kd + (long)h * dv + j] : 0.f;
            if (gater) {
                al = a[(long)t * vheads + h];
                bl = b[(long)t * vheads + h];
            }
        }
        double pq = 0, pk = 0;
        float fq = 0.f, fk = 0.f;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            float xq = row[kh * dk + i], xk = row[kd + kh * dk + i];
            qs[i] = xq;
            ks[i] = xk;
            if (LEAN) {
                fq += xq * xq;
                fk += xk * xk;
            } else {
                pq += (double)xq * xq;
                pk += (double)xk * xk;
            }
        }
        if (LEAN) {
            pq = warpSum(fq);
            pk = warpSum(fk);
        } else {
            pq = warpSumD(pq);
            pk = warpSumD(pk);
        }
        if (lane == 0) {
            ssq[warp] = pq;
            ssk[warp] = pk;
        }
        if (gater && LEAN) {
            const float x = al + dtBias[h];
            const float sp = x > 20.f ? x : log1pf(__expf(x));  // torch softplus
            gate[0] = __expf((float)negA * sp);
            gate[1] = 1.f / (1.f + __expf(-bl));
        } else if (gater) {
            double x = (double)(a[(long)t * vheads + h] + dtBias[h]);
            double sp = x > 20 ? x : log1p(exp(x));  // torch softplus
            gate[0] = (float)exp(negA * sp);
            gate[1] = sigmoidD(b[(long)t * vheads + h]);
        }
        __syncthreads();  // (1) q, k, sums and gates ready
        double tq = 0, tk = 0;
#pragma unroll
        for (int w = 0; w < GW; w++) {
            tq += ssq[w];
            tk += ssk[w];
        }
        // fla's l2norm: x * rsqrt(Σx² + 1e-6), the factor rounded to fp32
        // first as on the CPU.
        float iq = (LEAN ? rsqrtf((float)tq + 1e-6f) : (float)(1.0 / sqrt(tq + 1e-6))) * qscale,
              ik = LEAN ? rsqrtf((float)tk + 1e-6f) : (float)(1.0 / sqrt(tk + 1e-6));
        float decay = gate[0], beta = gate[1];
        float mem = 0.f;
#pragma unroll
        for (int m = 0; m < GMAXR; m++) {
            int i = warp + GW * m;
            if (i < dk) {
                s[m] = stateDecay(s[m], decay);
                mem += s[m] * __fmul_rn(ks[i], ik);
            }
        }
        red[warp][lane] = mem;
        __syncthreads();  // (2) partial Sᵀk of every warp
        float tot = 0.f;
#pragma unroll
        for (int w = 0; w < GW; w++) tot += red[w][lane];
        float v = LEAN ? vl : col ? row[2L * kd + (long)h * dv + j] : 0.f;
        float delta = (v - tot) * beta;
        float o = 0.f;
#pragma unroll
        for (int m = 0; m < GMAXR; m++) {
            int i = warp + GW * m;
            if (i < dk) {
                s[m] = stateAdd(s[m], __fmul_rn(ks[i], ik), delta);
                o += s[m] * (qs[i] * iq);
            }
        }
        if (SIDE) {  // rows == 1: the update's operands
            float* u = upd + deltaUpdHead(h, dk, dv);
            if (warp == 0 && col) u[1 + dk + j] = delta;
            if (blockIdx.x % tiles == 0) {
                if (threadIdx.x == 0) u[0] = decay;
                for (int i = threadIdx.x; i < dk; i += blockDim.x) u[1 + i] = __fmul_rn(ks[i], ik);
            }
        }
        __syncthreads();  // (3) everyone has read red (Sᵀk)
        red[warp][lane] = o;
        __syncthreads();  // (4) partial Sᵀq of every warp
        if (warp == 0 && col) {
            float y = 0.f;
#pragma unroll
            for (int w = 0; w < GW; w++) y += red[w][lane];
            out[((long)t * vheads + h) * dv + j] = y;
        }
        // The next token's writes to qs/ks/ssq/gate come after every
        // thread's last read of them (before barrier 4); its first write
        // to red comes after its barrier 1, which warp 0 reaches only
        // after reading red above.
    }
#ifdef DELTA_NOSTORE
    // Diagnostic build (timing only: the state is never updated): no state
    // stores. It showed that the gated norm's wait returning ~2.5 µs after
    // this grid's last block (other pairs ~1.1) is these 3 MB of stores
    // draining before the grid counts as complete: 0.89 µs without them,
    // Qwen3.5-27B FP8 decode +1.4% (docs/benchmarks.md, 2026-12-01 from
    // 23:16). Evict-first and write-through stores lost 0.9%.
    (void)S;
#else
    if (!SIDE) {  // else delta_state_update writes the state
#pragma unroll
        for (int m = 0; m < GMAXR; m++) {
            int i = warp + GW * m;
            if (col && i < dk) S[(long)i * dv + j] = s[m];
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(GW * 32)
    gated_delta_rule(float* out, const float* qkv, const float* a, const float* b, float* state, const float* aLog,
                     const float* dtBias, int rows, int kheads, int vheads, int dk, int dv) { PROBE_KERNEL();
    gatedDeltaRule<false>(out, qkv, a, b, state, aLog, dtBias, rows, kheads, vheads, dk, dv);
}
extern "C" __global__ void __launch_bounds__(GW * 32)
    gated_delta_rule_l(float* out, const float* qkv, const float* a, const float* b, float* state, const float* aLog,
                       const float* dtBias, int rows, int kheads, int vheads, int dk, int dv) { PROBE_KERNEL();
    gatedDeltaRule<true>(out, qkv, a, b, state, aLog, dtBias, rows, kheads, vheads, dk, dv);
}

extern "C" __global__ void __launch_bounds__(GW * 32)
    gated_delta_rule_s(float* out, const float* qkv, const float* a, const float* b, const float* state,
                       const float* aLog, const float* dtBias, int kheads, int vheads, int dk, int dv,
                       float* upd) { PROBE_KERNEL();
    gatedDeltaRule<true, true>(out, qkv, a, b, (float*)state, aLog, dtBias, 1, kheads, vheads, dk, dv, upd);
}

// delta_state_update applies gated_delta_rule_s's update to the state
// (heads × dk × dv floats, dv a multiple of 4), four columns a thread,
// over a grid of any size: S = S·decay + k ⊗ delta, rounded as
// stateDecay and stateAdd round it. It runs on a side branch of the decode graph with
// an ordinary (full) dependency on the delta rule, so it starts only
// when upd is complete and holds no SM before then.
extern "C" __global__ void __launch_bounds__(256)
    delta_state_update(float* state, const float* upd, int vheads, int dk, int dv) { PROBE_KERNEL();
    const long per = (long)dk * dv / 4, n = per * vheads;
    const int dv4 = dv / 4;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        const int h = (int)(e / per);
        const long r = e - h * per;
        const int i = (int)(r / dv4), j = (int)(r - (long)i * dv4) * 4;
        const float* u = upd + deltaUpdHead(h, dk, dv);
        const float decay = u[0], kn = u[1 + i];
        float4 s = ((float4*)state)[e];
        s.x = stateAdd(stateDecay(s.x, decay), kn, u[1 + dk + j]);
        s.y = stateAdd(stateDecay(s.y, decay), kn, u[1 + dk + j + 1]);
        s.z = stateAdd(stateDecay(s.z, decay), kn, u[1 + dk + j + 2]);
        s.w = stateAdd(stateDecay(s.w, decay), kn, u[1 + dk + j + 3]);
        ((float4*)state)[e] = s;
    }
}

// ---------------------------------------------------------------- RMSNormGated, SigmoidMul

// One block per row: dst = x/rms(x) * w * silu(z). Every thread reads and
// writes only its own elements, after the sum barrier, so dst may be x.
extern "C" __global__ void rms_norm_gated(float* dst, const float* x, const float* z, const float* w, int dim,
                                          float eps) { PROBE_KERNEL();
    __shared__ double part[32];
    long r = blockIdx.x;
    const float* xr = x + r * dim;
    pdlLaunchDependents();
    pdlWait();
    double ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * xr[i];
    ss = warpSumD(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    double tot = 0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += part[i];
    float inv = (float)(1.0 / sqrt(tot / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float g = z[r * dim + i];
        dst[r * dim + i] = __fmul_rn(__fmul_rn(__fmul_rn(xr[i], inv), w[i]), __fmul_rn(g, sigmoidD(g)));
    }
}

// rms_norm_gated_l is rms_norm_gated in float (POCKET_HYBRID_LEAN, the
// default) for rows of at most 4 elements a thread: each thread loads its
// x and z together (one round trip after the wait, where the other form
// loads z only after the sum), sums in float, and takes the gate's sigmoid
// by __expf. The CPU's float64 sums differ from these by float rounding,
// far inside the CUDA backend's tolerance.
extern "C" __global__ void rms_norm_gated_l(float* dst, const float* x, const float* z, const float* w, int dim,
                                            float eps) { PROBE_KERNEL();
    __shared__ float part[32];
    long r = blockIdx.x;
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    float wv[4], xv[4], zv[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int i = threadIdx.x + k * blockDim.x;
        wv[k] = i < dim ? w[i] : 0.f;
    }
    pdlLaunchDependents();
    pdlWait();
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int i = threadIdx.x + k * blockDim.x;
        xv[k] = i < dim ? xr[i] : 0.f;
        zv[k] = i < dim ? zr[i] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < 4; k++) ss += xv[k] * xv[k];
    ss = warpSum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += part[i];
    float inv = rsqrtf(tot / dim + eps);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int i = threadIdx.x + k * blockDim.x;
        float g = zv[k];
        if (i < dim) dst[r * dim + i] = __fmul_rn(__fmul_rn(__fmul_rn(xv[k], inv), wv[k]), g / (1.f + __expf(-g)));
    }
}

// sigmoid_mul_merge_E is sigmoid_mul over the decode attention's deferred
// split partials (attn_decode_d_E, attn_merge.cuh): x = merge · sigmoid(gate).
// The attention's own last-split merge (a threadfence, the counter's
// atomic, then the partials' loads, each a round trip) runs in one block
// per kv head after every other split has ended: the in-graph probes
// (probe.cuh) put that tail at 10-13 µs of a Qwen3.5-27B full-attention
// layer's ~23 (head dim 256, 24 splits of 6 heads), where the rest of the
// attention's blocks end ~7 µs after their wait.
//
// Here a block is a head and its blockDim/32 warps split the splits, so
// that each warp's loads are one round trip (up to sixteen splits each);
// the warps' sums meet in shared memory. The gate (the q projection's, two
// launches back) and the context are read before the wait: both are
// complete once the attention has passed its own.
#define SM_MAXW 8
template <int E>
__device__ __forceinline__ void sigmoidMerge(float* x, const float* gate, const float* part, const int* startp,
                                             int heads, int splits, int minchunk, int lean) {
    constexpr int HD = 32 * E;
    __shared__ float sM[SM_MAXW], sL[SM_MAXW];
    __shared__ __align__(16) float so[SM_MAXW][HD];
    const int h = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
    float g[E];
#pragma unroll
    for (int e = 0; e < E; e++) g[e] = __ldcg(gate + (long)h * HD + lane * E + e);
    const int nsplit = attnSplits(startp, splits, minchunk, 64 / E);
    // The wait depends on nsplit (always ≥ 1) so that the split count's
    // division stays ahead of it, as in attn_merge_E.
    if (nsplit > 0) pdlWait();
    pdlLaunchDependents();
    const int chunk = max(16, (nsplit + W - 1) / W), from = min(warp * chunk, nsplit), to = min(from + chunk, nsplit);
    float o[E], M, L;
    attnMergePart<E>(o, M, L, part, h, heads, splits, from, to);
    if (lane == 0) {
        sM[warp] = M;
        sL[warp] = L;
    }
#pragma unroll
    for (int e = 0; e < E; e++) so[warp][lane * E + e] = o[e];
    __syncthreads();
    if (warp != 0) return;
    float mx = -INFINITY;
    for (int w = 0; w < W; w++) mx = fmaxf(mx, sM[w]);
    float tot = 0.f, acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) acc[e] = 0.f;
    for (int w = 0; w < W; w++) {
        const float c = sL[w] > 0.f ? expf(sM[w] - mx) : 0.f; // an empty warp: M = -inf, L = 0
        tot = fmaf(sL[w], c, tot);
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = fmaf(c, so[w][lane * E + e], acc[e]);
    }
    const float inv = 1.f / tot;
#pragma unroll
    for (int e = 0; e < E; e++)
        x[(long)h * HD + lane * E + e] = acc[e] * inv * (lean ? 1.f / (1.f + __expf(-g[e])) : sigmoidD(g[e]));
}
#define SIGMOID_MERGE(E)                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * SM_MAXW)                                                    \
        sigmoid_mul_merge_##E(float* x, const float* gate, const float* part, const int* startp, int heads,       \
                              int splits, int minchunk, int lean) {                                               \
        PROBE_KERNEL();                                                                                           \
        sigmoidMerge<E>(x, gate, part, startp, heads, splits, minchunk, lean);                                    \
    }
SIGMOID_MERGE(2)
SIGMOID_MERGE(4)
SIGMOID_MERGE(8)

// x *= sigmoid(gate): the gated attention of Qwen3-Next/Qwen3.5 between the
// decode attention and the output projection, on PDL like the kernels
// above (launched without it the wait returns at once); lean as conv1d.
extern "C" __global__ void sigmoid_mul(float* x, const float* gate, long n, int lean) { PROBE_KERNEL();
    pdlLaunchDependents();
    pdlWait();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        x[i] *= lean ? 1.f / (1.f + __expf(-g)) : sigmoidD(g);
    }
}
