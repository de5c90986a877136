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
#include "prefetch.cuh"

// ---------------------------------------------------------------- CausalConv1D

#define CMAXK 8  // largest convolution width (Qwen3-Next uses 4)

// One thread per channel walks the rows in order with the last K-1 inputs
// in registers, then leaves them in state. K is a template parameter so
// that every window index is a constant and the window stays in registers
// (with a run-time width nvcc moved it to local memory).
template <int K>
__device__ void conv1d(float* dst, const float* x, float* state, const void* w, int wdt, int rows, int ch) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    pdlLaunchDependents();
    if (c >= ch) return;
    // The weights and this layer's own state before the wait (no kernel
    // of the step before this one writes them); x after it.
    float wt[K], win[K];  // win[0..K-1): oldest first
#pragma unroll
    for (int j = 0; j < K; j++) wt[j] = loadW(w, wdt, (long)c * K + j);
#pragma unroll
    for (int j = 0; j < K - 1; j++) win[j] = state[(long)j * ch + c];
    pdlWait();
    for (int t = 0; t < rows; t++) {
        float cur = x[(long)t * ch + c];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < K - 1; j++) acc = __fadd_rn(acc, __fmul_rn(wt[j], win[j]));
        acc = __fadd_rn(acc, __fmul_rn(wt[K - 1], cur));
        dst[(long)t * ch + c] = acc * sigmoidD(acc);
#pragma unroll
        for (int j = 0; j < K - 2; j++) win[j] = win[j + 1];
        if (K > 1) win[K - 2] = cur;
    }
#pragma unroll
    for (int j = 0; j < K - 1; j++) state[(long)j * ch + c] = win[j];
}

#define CONV(K)                                                                                                 \
    extern "C" __global__ void causal_conv1d_##K(float* dst, const float* x, float* state, const void* w, int wdt, \
                                                int rows, int ch) {                                             \
        conv1d<K>(dst, x, state, w, wdt, rows, ch);                                                             \
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

// One block per (value head, 32 state columns). Thread (warp, lane) holds
// column j0+lane of state rows warp, warp+GW, ... in registers for the
// whole pass, so the state is read and written once however many tokens
// the pass has; per token the block runs the recurrence
//
//     S *= decay;  delta = beta*(v - Sᵀk);  S += k ⊗ delta;  out = Sᵀq
//
// with the column sums Sᵀk and Sᵀq reduced across warps in shared memory.
// Every column is independent, so the blocks need no communication.
// Tokens run in order (no chunked form yet): prefill costs rows × a few
// block barriers.
extern "C" __global__ void __launch_bounds__(GW * 32)
    gated_delta_rule(float* out, const float* qkv, const float* a, const float* b, float* state, const float* aLog,
                     const float* dtBias, int rows, int kheads, int vheads, int dk, int dv) {
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
        double pq = 0, pk = 0;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            float xq = row[kh * dk + i], xk = row[kd + kh * dk + i];
            qs[i] = xq;
            ks[i] = xk;
            pq += (double)xq * xq;
            pk += (double)xk * xk;
        }
        pq = warpSumD(pq);
        pk = warpSumD(pk);
        if (lane == 0) {
            ssq[warp] = pq;
            ssk[warp] = pk;
        }
        if (threadIdx.x == 0) {
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
        float iq = (float)(1.0 / sqrt(tq + 1e-6)) * qscale, ik = (float)(1.0 / sqrt(tk + 1e-6));
        float decay = gate[0], beta = gate[1];
        float mem = 0.f;
#pragma unroll
        for (int m = 0; m < GMAXR; m++) {
            int i = warp + GW * m;
            if (i < dk) {
                s[m] *= decay;
                mem += s[m] * (ks[i] * ik);
            }
        }
        red[warp][lane] = mem;
        __syncthreads();  // (2) partial Sᵀk of every warp
        float tot = 0.f;
#pragma unroll
        for (int w = 0; w < GW; w++) tot += red[w][lane];
        float v = col ? row[2L * kd + (long)h * dv + j] : 0.f;
        float delta = (v - tot) * beta;
        float o = 0.f;
#pragma unroll
        for (int m = 0; m < GMAXR; m++) {
            int i = warp + GW * m;
            if (i < dk) {
                s[m] += (ks[i] * ik) * delta;
                o += s[m] * (qs[i] * iq);
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
#pragma unroll
    for (int m = 0; m < GMAXR; m++) {
        int i = warp + GW * m;
        if (col && i < dk) S[(long)i * dv + j] = s[m];
    }
}

// ---------------------------------------------------------------- RMSNormGated, SigmoidMul

// One block per row: dst = x/rms(x) * w * silu(z). Every thread reads and
// writes only its own elements, after the sum barrier, so dst may be x.
extern "C" __global__ void rms_norm_gated(float* dst, const float* x, const float* z, const float* w, int dim,
                                          float eps) {
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

// x *= sigmoid(gate): the gated attention of Qwen3-Next/Qwen3.5 between the
// decode attention and the output projection, on PDL like the kernels
// above (launched without it the wait returns at once).
extern "C" __global__ void sigmoid_mul(float* x, const float* gate, long n) {
    pdlLaunchDependents();
    pdlWait();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= sigmoidD(gate[i]);
}

// ---------------------------------------------------------------- DeltaStep

// delta_step_K: a one-token DeltaNet mix in one launch (kernels.FusedDeltaMix):
// the convolution + SiLU, the gated delta rule and the gated norm of
// causal_conv1d, gated_delta_rule and rms_norm_gated, in one kernel
// without thread-block clusters. A clustered form of the same fusion
// measured no faster than the three kernels (122.7 against 122.6 tok/s),
// and clustered decode attention measured 3.6 µs a layer slower than its
// unclustered kernel: a cluster's blocks are placed together, so they
// cannot take SM slots one by one as the predecessor drains.
//
// One block per value head h: DVP = dv rounded up to 32 columns, NG ≤ 4
// row groups of DVP threads (≤ 512 threads, so ≤ 128 registers each);
// thread (g, j) holds column j of state rows g, g+NG, ... (≤ 32) in
// registers, so the gated norm's sum over the head's columns stays in the
// block. The column sums of the recurrence meet in shared memory across
// the groups. Qwen3.5-27B and Qwen3-Next: dk = dv = 128, four groups.
//
// Every block convolves the 2·dk q/k channels of its key head and its own
// dv v channels (the q/k ones once per value head of the group: a few
// hundred multiply-adds). The v channels' convolution state is its own;
// the q/k windows are shared by the rep = vheads/kheads blocks of a key
// head, so they are shifted only by the last of those blocks to have read
// them: each block counts itself in cnt[kh] after its reads (before the
// PDL wait, off the critical path), and the block that completes the
// count writes the q/k windows at its end and leaves the count at zero.
// Go gives each call its own counter slot (a ring of them), so launches
// that PDL lets overlap never share one.
#define DS_ROWS 32  // state rows per thread: dk ≤ NG·DS_ROWS
#define DS_CH 640   // convolved channels per block: 2·dk + dv ≤ DS_CH

template <int K, int MODE>
__device__ void deltaStep(float* out, const float* qkv, const float* z, const float* a, const float* b,
                          float* convState, float* state, const void* w, int wdt, const float* aLog,
                          const float* dtBias, const float* nw, int* cnt, int kheads, int vheads, int dk, int dv,
                          float eps, const uint8_t* pf, long pfBytes) {
    __shared__ float xs[DS_CH];  // convolved q, k (2·dk), then v (dv)
    __shared__ float win[K > 1 ? K - 1 : 1][DS_CH];
    __shared__ float red[512];  // [group][column]
    __shared__ double ssd[32];
    __shared__ float gate[2];
    __shared__ int lastReader;
    const int dvp = (dv + 31) & ~31, ng = blockDim.x / dvp, g = threadIdx.x / dvp, j = threadIdx.x % dvp;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    const int h = blockIdx.x, rep = vheads / kheads, kh = h / rep, nch = 2 * dk + dv;
    const long kd = (long)kheads * dk, cd = 2 * kd + (long)vheads * dv;
    const bool col = j < dv;
    // MODE (POCKET_DELTA_STEP_MODE, timing probes): 1 returns after the
    // wait, 2 leaves the recurrent state unread and unwritten (both give
    // wrong results), 3 evaluates the gates, SiLU and norms in float.
    constexpr bool F = MODE == 3;
    // Local channel c: q (c < dk), k (c < 2dk), v; its global channel:
    auto gch = [&](int c) -> long {
        return c < dk ? (long)kh * dk + c : c < 2 * dk ? kd + (long)kh * dk + (c - dk) : 2 * kd + (long)h * dv + (c - 2 * dk);
    };

    // Before the wait: the weights, this block's windows and state (no
    // kernel of the step before this one writes them).
    float* S = state + (long)h * dk * dv;
    float s[DS_ROWS];
#pragma unroll
    for (int m = 0; m < DS_ROWS; m++) {
        const int i = g + ng * m;
        s[m] = MODE != 2 && col && i < dk ? S[(long)i * dv + j] : 0.f;
    }
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        const long gc = gch(c);
#pragma unroll
        for (int t = 0; t < K - 1; t++) win[t][c] = convState[(long)t * cd + gc];
    }
    const double negA = -exp((double)aLog[h]);
    const float qscale = (float)(1.0 / sqrt((double)dk));
    const float wn = col ? nw[j] : 0.f;
    __syncthreads();  // every window of this block read
    if (threadIdx.x == 0) {
        __threadfence();
        const int before = atomicAdd(cnt + kh, 1);
        lastReader = before == rep - 1;
        if (lastReader) cnt[kh] = 0;
    }
    pdlLaunchDependents();
    pdlWait();
    if (MODE == 1) return;
    l2Prefetch(pf, pfBytes, blockIdx.x, gridDim.x);

    // The convolution of the new row, as conv1d computes it.
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        const long gc = gch(c);
        const float cur = qkv[gc];
        float acc = 0.f;
#pragma unroll
        for (int t = 0; t < K - 1; t++) acc = __fadd_rn(acc, __fmul_rn(loadW(w, wdt, gc * K + t), win[t][c]));
        acc = __fadd_rn(acc, __fmul_rn(loadW(w, wdt, gc * K + K - 1), cur));
        xs[c] = acc * (F ? 1.f / (1.f + __expf(-acc)) : sigmoidD(acc));
        // The window shifted (its oldest input leaves), kept for the store.
#pragma unroll
        for (int t = 0; t < K - 2; t++) win[t][c] = win[t + 1][c];
        if (K > 1) win[K > 1 ? K - 2 : 0][c] = cur;
    }
    const float zj = col && g == 0 ? z[(long)h * dv + j] : 0.f;
    if (threadIdx.x == 0 && F) {
        const float x = a[h] + dtBias[h];
        const float sp = x > 20.f ? x : log1pf(__expf(x));
        gate[0] = __expf((float)negA * sp);
        gate[1] = 1.f / (1.f + __expf(-b[h]));
    } else if (threadIdx.x == 0) {
        const double x = (double)(a[h] + dtBias[h]);
        const double sp = x > 20 ? x : log1p(exp(x));  // torch softplus
        gate[0] = (float)exp(negA * sp);
        gate[1] = sigmoidD(b[h]);
    }
    __syncthreads();  // (1) xs, the shifted windows and the gates
    // fla's l2norm factors: warp 0 sums q², warp 1 k² (in double).
    if (warp < 2 && F) {
        float p = 0.f;
        for (int i = lane; i < dk; i += 32) p += xs[warp * dk + i] * xs[warp * dk + i];
        p = warpSumF(p);
        if (lane == 0) ssd[warp] = p;
    } else if (warp < 2) {
        double p = 0;
        for (int i = lane; i < dk; i += 32) p += (double)xs[warp * dk + i] * xs[warp * dk + i];
        p = warpSumD(p);
        if (lane == 0) ssd[warp] = p;
    }
    __syncthreads();  // (2)
    const float iq = (F ? rsqrtf((float)ssd[0] + 1e-6f) : (float)(1.0 / sqrt(ssd[0] + 1e-6))) * qscale,
                ik = F ? rsqrtf((float)ssd[1] + 1e-6f) : (float)(1.0 / sqrt(ssd[1] + 1e-6));
    const float decay = gate[0], beta = gate[1];
    float mem = 0.f;
#pragma unroll
    for (int m = 0; m < DS_ROWS; m++) {
        const int i = g + ng * m;
        if (i < dk) {
            s[m] *= decay;
            mem += s[m] * (xs[dk + i] * ik);
        }
    }
    red[threadIdx.x] = mem;
    __syncthreads();  // (3) partial Sᵀk of every group
    float tot = 0.f;
    for (int k = 0; k < ng; k++) tot += red[k * dvp + j];
    const float v = col ? xs[2 * dk + j] : 0.f;
    const float delta = (v - tot) * beta;
    float o = 0.f;
#pragma unroll
    for (int m = 0; m < DS_ROWS; m++) {
        const int i = g + ng * m;
        if (i < dk) {
            s[m] += (xs[dk + i] * ik) * delta;
            o += s[m] * (xs[i] * iq);
        }
    }
    __syncthreads();  // (4) everyone has read red (Sᵀk)
    red[threadIdx.x] = o;
    __syncthreads();  // (5) partial Sᵀq of every group
    // The gated norm over the head's dv outputs (group 0 holds them).
    float y = 0.f;
    if (g == 0)
        for (int k = 0; k < ng; k++) y += red[k * dvp + j];
    if (F) {
        const float sf = warpSumF(g == 0 && col ? y * y : 0.f);
        if (lane == 0) ssd[warp] = sf;
    } else {
        const double ss = warpSumD(g == 0 && col ? (double)y * y : 0.0);
        if (lane == 0) ssd[warp] = ss;
    }
    __syncthreads();  // (6)
    if (g == 0 && col) {
        double t = 0;
        for (int k = 0; k < nwarps; k++) t += ssd[k];
        const float inv = F ? rsqrtf((float)t / dv + eps) : (float)(1.0 / sqrt(t / dv + (double)eps));
        const float sz = F ? 1.f / (1.f + __expf(-zj)) : sigmoidD(zj);
        out[(long)h * dv + j] = __fmul_rn(__fmul_rn(__fmul_rn(y, inv), wn), __fmul_rn(zj, sz));
    }
#pragma unroll
    for (int m = 0; m < DS_ROWS; m++) {
        const int i = g + ng * m;
        if (MODE != 2 && col && i < dk) S[(long)i * dv + j] = s[m];
    }
    // The windows: v channels always (this block's own), q/k ones by the
    // last reader of the key head.
    for (int c = lastReader ? threadIdx.x : 2 * dk + threadIdx.x; c < nch; c += blockDim.x) {
        const long gc = gch(c);
#pragma unroll
        for (int t = 0; t < K - 1; t++) convState[(long)t * cd + gc] = win[t][c];
    }
}

#define DELTA_STEP(NAME, K, MODE)                                                                                    \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                                          \
        float* out, const float* qkv, const float* z, const float* a, const float* b, float* convState, float* state, \
        const void* w, int wdt, const float* aLog, const float* dtBias, const float* nw, int* cnt, int kheads,       \
        int vheads, int dk, int dv, float eps, const uint8_t* pf, long pfBytes) {                                    \
        deltaStep<K, MODE>(out, qkv, z, a, b, convState, state, w, wdt, aLog, dtBias, nw, cnt, kheads, vheads, dk,  \
                           dv, eps, pf, pfBytes);                                                                    \
    }
DELTA_STEP(delta_step_1, 1, 0)
DELTA_STEP(delta_step_2, 2, 0)
DELTA_STEP(delta_step_3, 3, 0)
DELTA_STEP(delta_step_4, 4, 0)
// Timing probes for a 4-tap convolution (POCKET_DELTA_STEP_MODE=1..3).
DELTA_STEP(delta_step_4_m1, 4, 1)
DELTA_STEP(delta_step_4_m2, 4, 2)
DELTA_STEP(delta_step_4_m3, 4, 3)
