// delta_mix_step: a one-token Gated DeltaNet mix in one launch, one block
// per value head (included by hybrid.cu; hybrid.go's DeltaMixStep).
//
// Why: in the Qwen3.5-27B FP8 decode step the mix (causal_conv1d,
// gated_delta_rule_l, rms_norm_gated_l) cost ~10 µs a layer after its PDL
// wait, a chain of three grids, each waiting for the one before to finish
// and reading its output back from L2 (docs/benchmarks.md, 2026-11-30 from
// 10:59). An earlier one-launch form (delta_step, reverted) kept four
// blocks a head and met at a global counter for the gated norm, and did
// not gain. Here a head is one block of 512 threads: its convolution, q/k
// norms, gates, delta rule and gated norm meet at block barriers only,
// after one round trip for the in-projection's outputs.
//
// Thread t: state column j = t % 128 of rows r, r+4, ..., r = t / 128 (dk,
// dv ≤ 128: 32 state values a thread, in registers from before the wait).
// Threads 0..dk-1 convolve the head's query channels, 128..128+dk-1 its key
// channels, 256..256+dv-1 its value channels; thread 511 works out the
// gates. The arithmetic is the lean kernels' (float sums and gates, the
// SiLU by __expf); only the order of the Sᵀk and Sᵀq partial sums differs.
//
// The convolution window of a key head's q/k channels is read by each of
// its value heads' blocks and moved on by one of them: the last to have
// read it, by a per-layer counter of each key head (cnt, zero between
// launches; the last arrival sets it back), since a block may start, and
// read, after another has passed the wait. Every block moves its own
// value channels' window.

#define MIX_T 512
#define MIX_ROWS 32  // state rows per thread: 128 / 4 row groups

extern "C" __global__ void __launch_bounds__(MIX_T)
    delta_mix_step(float* out, const float* qkv, const float* z, const float* a, const float* b, float* convState,
                   const void* convW, int wdt, float* state, const float* aLog, const float* dtBias,
                   const float* normW, float eps, int kheads, int vheads, int dk, int dv, int K, int* cnt) {
    __shared__ float qs[128], ks[128], vs[128], red[4][128], part[2][4];
    __shared__ float gate[2], fac[2];
    __shared__ int lastReader;
    const int t = threadIdx.x, h = blockIdx.x, j = t & 127, r = t >> 7;
    const int kh = h / (vheads / kheads), kd = kheads * dk, cd = 2 * kd + vheads * dv;
    const bool col = j < dv;
    float* S = state + (long)h * dk * dv;
    // Before the wait: the state, the convolution's weights and window, the
    // gate constants and the norm weight (no kernel of the step before this
    // one writes them).
    float s[MIX_ROWS];
#pragma unroll
    for (int m = 0; m < MIX_ROWS; m++) {
        int i = r + 4 * m;
        s[m] = col && i < dk ? S[(long)i * dv + j] : 0.f;
    }
    int c = -1;  // this thread's channel
    if (t < dk) c = kh * dk + t;
    else if (t >= 128 && t < 128 + dk) c = kd + kh * dk + (t - 128);
    else if (t >= 256 && t < 256 + dv) c = 2 * kd + h * dv + (t - 256);
    float wt[8], win[8];
    if (c >= 0) {
#pragma unroll
        for (int q = 0; q < 8; q++) {
            wt[q] = q < K ? loadW(convW, wdt, (long)c * K + q) : 0.f;
            win[q] = q < K - 1 ? convState[(long)q * cd + c] : 0.f;
        }
    }
    // Every thread's window is read: count this block in (its key head's
    // last reader moves the q/k windows on).
    __syncthreads();
    if (t == 0) {
        const int group = vheads / kheads;
        __threadfence();
        int old = atomicAdd(cnt + kh, 1);
        lastReader = old == group - 1;
        if (old == group - 1) atomicExch(cnt + kh, 0);
    }
    __syncthreads();  // lastReader
    const bool gater = t == MIX_T - 1;
    float negA = 0.f, dtb = 0.f, nw = 0.f;
    if (gater) negA = -__expf(aLog[h]), dtb = dtBias[h];
    if (t < dv) nw = normW[t];
    pdlLaunchDependents();
    pdlWait();
    // One round trip: the channel's input, z, the gate inputs.
    float x = c >= 0 ? qkv[c] : 0.f, zv = t < dv ? z[(long)h * dv + t] : 0.f;
    float al = 0.f, bl = 0.f;
    if (gater) al = a[h], bl = b[h];
    if (c >= 0) {
        float acc = 0.f;
#pragma unroll
        for (int q = 0; q < 7; q++)
            if (q < K - 1) acc = __fadd_rn(acc, __fmul_rn(wt[q], win[q]));
        acc = __fadd_rn(acc, __fmul_rn(wt[K - 1], x));
        float y = acc / (1.f + __expf(-acc));
        if (t < 128) qs[t] = y;
        else if (t < 256) ks[t - 128] = y;
        else vs[t - 256] = y;
        // The window moves on: this step's input is the newest.
        bool writer = t >= 256 || lastReader;
        if (writer) {
#pragma unroll
            for (int q = 0; q < 7; q++)
                if (q < K - 2) convState[(long)q * cd + c] = win[q + 1];
            if (K > 1) convState[(long)(K - 2) * cd + c] = x;
        }
    }
    if (gater) {
        const float xg = al + dtb;
        const float sp = xg > 20.f ? xg : log1pf(__expf(xg));  // torch softplus
        gate[0] = __expf(negA * sp);
        gate[1] = 1.f / (1.f + __expf(-bl));
    }
    __syncthreads();  // (1) q, k, v, gates
    // The l2 sums of q (warps 0-3) and k (warps 4-7).
    if (t < 256) {
        float v = t < 128 ? (t < dk ? qs[t] : 0.f) : (t - 128 < dk ? ks[t - 128] : 0.f);
        float ss = warpSum(v * v);
        if ((t & 31) == 0) part[t >> 7][(t >> 5) & 3] = ss;
    }
    __syncthreads();  // (2) the sums' parts
    if (t < 2) {
        float ss = part[t][0] + part[t][1] + part[t][2] + part[t][3];
        // fla's l2norm, the query also scaled by 1/sqrt(dk).
        fac[t] = rsqrtf(ss + 1e-6f) * (t == 0 ? rsqrtf((float)dk) : 1.f);
    }
    __syncthreads();  // (3) the factors
    const float iq = fac[0], ik = fac[1], decay = gate[0], beta = gate[1];
    float mem = 0.f;
#pragma unroll
    for (int m = 0; m < MIX_ROWS; m++) {
        int i = r + 4 * m;
        if (i < dk) {
            s[m] *= decay;
            mem += s[m] * (ks[i] * ik);
        }
    }
    red[r][j] = mem;
    __syncthreads();  // (4) partial Sᵀk
    float delta = ((col ? vs[j] : 0.f) - (red[0][j] + red[1][j] + red[2][j] + red[3][j])) * beta;
    float o = 0.f;
#pragma unroll
    for (int m = 0; m < MIX_ROWS; m++) {
        int i = r + 4 * m;
        if (i < dk) {
            s[m] += (ks[i] * ik) * delta;
            o += s[m] * (qs[i] * iq);
        }
    }
    __syncthreads();  // (5) every thread has read red
    red[r][j] = o;
    __syncthreads();  // (6) partial Sᵀq
    // The gated norm over the head's dv outputs (warps 0-3).
    float y = 0.f;
    if (t < 128) {
        y = col ? red[0][j] + red[1][j] + red[2][j] + red[3][j] : 0.f;
        float ss = warpSum(y * y);
        if ((t & 31) == 0) part[0][t >> 5] = ss;
    }
    __syncthreads();  // (7)
    if (t < dv) {
        float inv = rsqrtf((part[0][0] + part[0][1] + part[0][2] + part[0][3]) / dv + eps);
        out[(long)h * dv + t] = __fmul_rn(__fmul_rn(__fmul_rn(y, inv), nw), zv / (1.f + __expf(-zv)));
    }
#pragma unroll
    for (int m = 0; m < MIX_ROWS; m++) {
        int i = r + 4 * m;
        if (col && i < dk) S[(long)i * dv + j] = s[m];
    }
}
