// Gated DeltaNet kernels of the CUDA backend (hybrid.go): the optional
// kernels.HybridOps that Qwen3-Next and Qwen3.5 need. The CPU backend
// (kernels/cpu/deltanet.go) is the reference; the scalar functions the CPU
// evaluates in float64 (sigmoid, softplus, exp of the decay, the L2 and RMS
// sums) are evaluated in double here too, so that fp32 results agree to a
// few ulps.
//
// Compiled to compute_90 PTX by `go generate` (hybrid.go); the PTX is
// committed and embedded.
#include <cuda_fp16.h>

// kernels.DType numbers of the formats a conv1d weight may be stored in.
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

__device__ __forceinline__ float loadW(const void* w, int dt, long i) {
    if (dt == DT_F32) return ((const float*)w)[i];
    if (dt == DT_F16) return __half2float(((const __half*)w)[i]);
    return __uint_as_float((unsigned)((const unsigned short*)w)[i] << 16);
}

__device__ __forceinline__ float sigmoidD(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

__device__ __forceinline__ double warpSumD(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---------------------------------------------------------------- CausalConv1D

#define CMAXK 8  // largest convolution width (Qwen3-Next uses 4)

// One thread per channel walks the rows in order with the last K-1 inputs
// in registers, then leaves them in state. K is a template parameter so
// that every window index is a constant and the window stays in registers
// (with a run-time width nvcc moved it to local memory).
template <int K>
__device__ void conv1d(float* dst, const float* x, float* state, const void* w, int wdt, int rows, int ch) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch) return;
    float wt[K], win[K];  // win[0..K-1): oldest first
#pragma unroll
    for (int j = 0; j < K; j++) wt[j] = loadW(w, wdt, (long)c * K + j);
#pragma unroll
    for (int j = 0; j < K - 1; j++) win[j] = state[(long)j * ch + c];
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

// ---------------------------------------------------------------- GatedDeltaRule, chunked

// The chunked (WY/UT) form of the same recurrence for prefill passes of
// more than DC tokens, as kernels/cpu/deltanet_chunk.go computes it. Per
// chunk of DC tokens, with S₀ the state before it, G_t the cumulative log
// decay within the chunk, d(t,s) = e^{G_t-G_s} and k̂, q̂ the normalised
// keys and (scaled) queries:
//
//     A[t][s] = β_t d(t,s) (k̂_t·k̂_s)  (s < t)    P[t][s] = d(t,s) (q̂_t·k̂_s)  (s ≤ t)
//     W = β(V - e^G K̂S₀)   (I+A)U = W   O = e^G Q̂S₀ + P U
//     S ← e^{G_n}S₀ + Σ_s e^{G_n-G_s} k̂_s u_sᵀ
//
// Two kernels. delta_chunk_kq computes the chunk Gram matrices K̂K̂ᵀ and
// Q̂K̂ᵀ once per (chunk, key head), with the per-token normalisation
// factors, into scratch: they depend on neither the value head nor the
// state. delta_chunk then runs one block per (value head, 32 state
// columns), chunk after chunk, with the state in shared memory: the
// products with S₀ and the state update are dk-sliced fp32 FMA loops, the
// triangular solve is a forward substitution that each warp runs for its
// own 4 columns (8 lanes per column, butterfly sums, no block barrier),
// so a chunk of 64 tokens costs ~20 block barriers instead of the
// recurrence's 256. The decays are exp of fp64 differences of fp64
// cumulative sums, rounded to fp32, and the l2 factors come from fp64
// sums, as on the CPU.

#define DC 64     // chunk length (the CPU's deltaChunk)
#define DKC 128   // largest key head dim of the chunked kernels
#define DSL 32    // dk slice of the shared-memory products

// fla's l2norm factor, rounded to fp32 first as on the CPU.
__device__ __forceinline__ float l2factor(double ss) { return (float)(1.0 / sqrt(ss + 1e-6)); }

// Grid (chunks, key heads), 256 threads. kq[((kh*chunks + c)*2 + {0,1})*DC*DC]
// gets K̂K̂ᵀ and Q̂K̂ᵀ of the chunk (rows and columns past the pass zero);
// inv[(row*kheads + kh)*2 + {0,1}] the factors q̂ = q*inv[0], k̂ = k*inv[1].
extern "C" __global__ void __launch_bounds__(256)
    delta_chunk_kq(float* kq, float* inv, const float* qkv, int rows, int kheads, int vheads, int dk, int dv) {
    __shared__ float kc[DC][DSL + 1], qc[DC][DSL + 1];
    __shared__ float fq[DC], fk[DC];
    int c = blockIdx.x, kh = blockIdx.y, chunks = gridDim.x;
    int t0 = c * DC, n = min(DC, rows - t0);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int kd = kheads * dk;
    long cd = 2L * kd + (long)vheads * dv;
    float qscale = (float)(1.0 / sqrt((double)dk));
    for (int t = warp; t < DC; t += 8) {
        double pq = 0, pk = 0;
        if (t < n) {
            const float* row = qkv + (long)(t0 + t) * cd;
            for (int i = lane; i < dk; i += 32) {
                float xq = row[kh * dk + i], xk = row[kd + kh * dk + i];
                pq += (double)xq * xq;
                pk += (double)xk * xk;
            }
        }
        pq = warpSumD(pq);
        pk = warpSumD(pk);
        if (lane == 0) {
            float iq = t < n ? l2factor(pq) * qscale : 0.f, ik = t < n ? l2factor(pk) : 0.f;
            fq[t] = iq;
            fk[t] = ik;
            if (t < n) {
                inv[((long)(t0 + t) * kheads + kh) * 2] = iq;
                inv[((long)(t0 + t) * kheads + kh) * 2 + 1] = ik;
            }
        }
    }
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float akk[4][4] = {}, aqk[4][4] = {};
    for (int d0 = 0; d0 < dk; d0 += DSL) {
        __syncthreads();  // factors ready; the previous slice consumed
        for (int e = threadIdx.x; e < DC * DSL; e += 256) {
            int t = e / DSL, i = e % DSL;
            float xk = 0.f, xq = 0.f;
            if (t < n && d0 + i < dk) {
                const float* row = qkv + (long)(t0 + t) * cd;
                xq = row[kh * dk + d0 + i] * fq[t];
                xk = row[kd + kh * dk + d0 + i] * fk[t];
            }
            kc[t][i] = xk;
            qc[t][i] = xq;
        }
        __syncthreads();
#pragma unroll 4
        for (int i = 0; i < DSL; i++) {
            float kt[4], qt[4], ks[4];
#pragma unroll
            for (int x = 0; x < 4; x++) {
                kt[x] = kc[ty + 16 * x][i];
                qt[x] = qc[ty + 16 * x][i];
                ks[x] = kc[tx + 16 * x][i];
            }
#pragma unroll
            for (int x = 0; x < 4; x++)
#pragma unroll
                for (int y = 0; y < 4; y++) {
                    akk[x][y] += kt[x] * ks[y];
                    aqk[x][y] += qt[x] * ks[y];
                }
        }
    }
    float* base = kq + ((long)kh * chunks + c) * 2 * DC * DC;
#pragma unroll
    for (int x = 0; x < 4; x++)
#pragma unroll
        for (int y = 0; y < 4; y++) {
            int t = ty + 16 * x, s = tx + 16 * y;
            base[t * DC + s] = akk[x][y];
            base[DC * DC + t * DC + s] = aqk[x][y];
        }
}

// Grid: value heads × ceil(dv/32) blocks of 256 threads (8 warps). Thread
// (warp w, lane l) owns state column l of the tile and, for the chunk,
// rows t = w + 8a (a < 8) of the 64×32 W, U and outputs.
extern "C" __global__ void __launch_bounds__(256)
    delta_chunk(float* out, const float* qkv, const float* a, const float* b, float* state, const float* aLog,
                const float* dtBias, const float* kq, const float* inv, int rows, int kheads, int vheads, int dk,
                int dv) {
    __shared__ __align__(16) float ss[DKC * 32];  // state rows i, columns of the tile
    __shared__ __align__(16) float r[DC * DC];    // K̂,Q̂ slices; A; P; decayed K̂ slices
    __shared__ __align__(16) float ws[DC * 32];   // W, then U
    __shared__ double gs[DC];                     // g_t, then G_t
    __shared__ float eg[DC], dn[DC], be[DC], fq[DC], fk[DC];
    float* kc = r;            // [DC][DSL]
    float* qc = r + DC * DSL;  // [DC][DSL]
    int tiles = (dv + 31) / 32;
    int h = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int jg = tile * 32 + lane;  // this thread's state column
    bool col = jg < dv;
    int kh = h / (vheads / kheads), kd = kheads * dk;
    long cd = 2L * kd + (long)vheads * dv;
    int chunks = (rows + DC - 1) / DC;
    float* S = state + (long)h * dk * dv;
    for (int i = warp; i < DKC; i += 8) ss[i * 32 + lane] = col && i < dk ? S[(long)i * dv + jg] : 0.f;
    double negA = -exp((double)aLog[h]);
    for (int c = 0; c < chunks; c++) {
        int t0 = c * DC, n = min(DC, rows - t0);
        const float* kk = kq + ((long)kh * chunks + c) * 2 * DC * DC;
        const float* qk = kk + DC * DC;
        if (warp == 0) {
            for (int t = lane; t < DC; t += 32) {
                double g = 0;
                float bt = 0.f;
                if (t < n) {
                    double x = (double)(a[(long)(t0 + t) * vheads + h] + dtBias[h]);
                    double sp = x > 20 ? x : log1p(exp(x));  // torch softplus
                    g = negA * sp;
                    bt = sigmoidD(b[(long)(t0 + t) * vheads + h]);
                }
                gs[t] = g;
                be[t] = bt;
            }
            __syncwarp();
            if (lane == 0) {  // in token order, as the CPU sums
                double g = 0;
                for (int t = 0; t < DC; t++) gs[t] = g += gs[t];
            }
            __syncwarp();
            double gn = gs[n - 1];
            for (int t = lane; t < DC; t += 32) {
                eg[t] = t < n ? (float)exp(gs[t]) : 0.f;
                dn[t] = t < n ? (float)exp(gn - gs[t]) : 0.f;
            }
        } else if (warp == 1) {
            for (int t = lane; t < DC; t += 32) {
                fq[t] = t < n ? inv[((long)(t0 + t) * kheads + kh) * 2] : 0.f;
                fk[t] = t < n ? inv[((long)(t0 + t) * kheads + kh) * 2 + 1] : 0.f;
            }
        }
        // K̂S₀ and Q̂S₀ for rows t = warp + 8x, column lane.
        float aks[8] = {}, aqs[8] = {};
        for (int d0 = 0; d0 < dk; d0 += DSL) {
            __syncthreads();  // gates and factors ready; r and ss free
            for (int e = threadIdx.x; e < DC * DSL; e += 256) {
                int t = e / DSL, i = e % DSL;
                float xk = 0.f, xq = 0.f;
                if (t < n && d0 + i < dk) {
                    const float* row = qkv + (long)(t0 + t) * cd;
                    xq = row[kh * dk + d0 + i] * fq[t];
                    xk = row[kd + kh * dk + d0 + i] * fk[t];
                }
                kc[e] = xk;
                qc[e] = xq;
            }
            __syncthreads();
#pragma unroll 2
            for (int i = 0; i < DSL; i += 4) {
                float s0 = ss[(d0 + i) * 32 + lane], s1 = ss[(d0 + i + 1) * 32 + lane];
                float s2 = ss[(d0 + i + 2) * 32 + lane], s3 = ss[(d0 + i + 3) * 32 + lane];
#pragma unroll
                for (int x = 0; x < 8; x++) {
                    float4 kv = *(const float4*)&kc[(warp + 8 * x) * DSL + i];
                    float4 qv = *(const float4*)&qc[(warp + 8 * x) * DSL + i];
                    aks[x] += kv.x * s0 + kv.y * s1 + kv.z * s2 + kv.w * s3;
                    aqs[x] += qv.x * s0 + qv.y * s1 + qv.z * s2 + qv.w * s3;
                }
            }
        }
        // W = β(v - e^G K̂S₀), outputs e^G Q̂S₀.
        float o[8];
#pragma unroll
        for (int x = 0; x < 8; x++) {
            int t = warp + 8 * x;
            float v = t < n && col ? qkv[(long)(t0 + t) * cd + 2L * kd + (long)h * dv + jg] : 0.f;
            ws[t * 32 + lane] = be[t] * (v - eg[t] * aks[x]);
            o[x] = eg[t] * aqs[x];
        }
        __syncthreads();  // everyone is done with the slices in r
        for (int e = threadIdx.x; e < DC * DC; e += 256) {
            int t = e / DC, s = e % DC;
            float v = 0.f;
            if (s < t && t < n) v = be[t] * (float)exp(gs[t] - gs[s]) * kk[e];
            r[e] = v;
        }
        __syncthreads();  // A and W ready
        {
            // Forward substitution: warp w solves columns 4w..4w+3, lane
            // (c, p) = (lane/8, lane%8) keeps u[s] for s ≡ p (mod 8) in
            // u[s/8]; each step sums its share and the 8 lanes of the
            // column exchange partial sums.
            int jc = warp * 4 + (lane >> 3), p = lane & 7;
            float u[8] = {};
#pragma unroll
            for (int t = 0; t < DC; t++) {
                float part = 0.f;
#pragma unroll
                for (int m = 0; m < (t + 7) / 8; m++) part += r[t * DC + p + 8 * m] * u[m];
                part += __shfl_xor_sync(0xffffffffu, part, 1);
                part += __shfl_xor_sync(0xffffffffu, part, 2);
                part += __shfl_xor_sync(0xffffffffu, part, 4);
                float ut = ws[t * 32 + jc] - part;
                if (p == (t & 7)) u[t >> 3] = ut;
            }
            __syncwarp();  // every lane has read its W before U overwrites it
#pragma unroll
            for (int m = 0; m < 8; m++) ws[(p + 8 * m) * 32 + jc] = u[m];
        }
        __syncthreads();  // U ready; A consumed
        for (int e = threadIdx.x; e < DC * DC; e += 256) {
            int t = e / DC, s = e % DC;
            float v = 0.f;
            if (s <= t && t < n) v = (float)exp(gs[t] - gs[s]) * qk[e];
            r[e] = v;
        }
        __syncthreads();  // P ready
        {
            float acc[8] = {};
            for (int s = 0; s < DC; s += 4) {
                float u0 = ws[s * 32 + lane], u1 = ws[(s + 1) * 32 + lane];
                float u2 = ws[(s + 2) * 32 + lane], u3 = ws[(s + 3) * 32 + lane];
#pragma unroll
                for (int x = 0; x < 8; x++) {
                    float4 pv = *(const float4*)&r[(warp + 8 * x) * DC + s];
                    acc[x] += pv.x * u0 + pv.y * u1 + pv.z * u2 + pv.w * u3;
                }
            }
#pragma unroll
            for (int x = 0; x < 8; x++) {
                int t = warp + 8 * x;
                if (t < n && col) out[((long)(t0 + t) * vheads + h) * dv + jg] = o[x] + acc[x];
            }
        }
        // S = e^{G_n}S₀ + K̂dᵀU with K̂d_s = e^{G_n-G_s} k̂_s, in dk slices;
        // thread (w, l) updates rows d0 + 4w .. d0 + 4w + 3 of column l.
        float en = eg[n - 1];
        for (int d0 = 0; d0 < dk; d0 += DSL) {
            __syncthreads();  // r free (P, or the previous slice, consumed)
            for (int e = threadIdx.x; e < DC * DSL; e += 256) {
                int s = e / DSL, i = e % DSL;
                float x = 0.f;
                if (s < n && d0 + i < dk) x = dn[s] * (qkv[(long)(t0 + s) * cd + kd + kh * dk + d0 + i] * fk[s]);
                r[e] = x;
            }
            __syncthreads();
            float acc[4] = {};
#pragma unroll 4
            for (int s = 0; s < DC; s++) {
                float us = ws[s * 32 + lane];
                float4 kv = *(const float4*)&r[s * DSL + 4 * warp];
                acc[0] += kv.x * us;
                acc[1] += kv.y * us;
                acc[2] += kv.z * us;
                acc[3] += kv.w * us;
            }
#pragma unroll
            for (int m = 0; m < 4; m++) {
                int i = d0 + 4 * warp + m;
                ss[i * 32 + lane] = en * ss[i * 32 + lane] + acc[m];
            }
        }
        // The next chunk's first writes to gs/eg/dn/be/fq/fk come before its
        // first barrier, while other warps may still run this chunk's last
        // slice, which reads ws, r and ss only: safe. ws is next written
        // after the next chunk's slice barriers.
    }
    __syncthreads();
    for (int i = warp; i < dk; i += 8)
        if (col) S[(long)i * dv + jg] = ss[i * 32 + lane];
}

// ---------------------------------------------------------------- RMSNormGated, SigmoidMul

// One block per row: dst = x/rms(x) * w * silu(z). Every thread reads and
// writes only its own elements, after the sum barrier, so dst may be x.
extern "C" __global__ void rms_norm_gated(float* dst, const float* x, const float* z, const float* w, int dim,
                                          float eps) {
    __shared__ double part[32];
    long r = blockIdx.x;
    const float* xr = x + r * dim;
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

extern "C" __global__ void sigmoid_mul(float* x, const float* gate, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= sigmoidD(gate[i]);
}
