// The chunked Gated DeltaNet delta rule (hybrid_chunk.go loads it): a
// module of its own, loaded only when the chunked form is switched on, so
// the recurrent kernels' module (hybrid.cu) never depends on it.
//
// Compiled to compute_90 PTX by `go generate` (hybrid.go); the PTX is
// committed and embedded.
#include "hybrid_common.cuh"

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

// Global loads of a thread's share of a staging loop are all issued
// before the first use (read-only loads, __ldg: no shared store may alias
// them): with one load in flight per thread these kernels waited on
// ~20 dependent global round trips a chunk at 1-2 blocks per SM.
#define SLICE_PER (DC * DSL / 256)  // elements of a [DC][DSL] slice per thread
#define TILE_PER (DC * DC / 256)    // elements of a [DC][DC] tile per thread

// stageSlice writes columns d0 .. d0+DSL-1 of the chunk's l2-scaled keys
// and queries of key head kh (rows t < n of the chunk at t0; zeros past n
// and past dk) to kc and qc, rows ld floats apart; the block's 256
// threads share the work.
__device__ __forceinline__ void stageSlice(float* kc, float* qc, int ld, const float* qkv, long cd, int t0, int n,
                                           int kh, int dk, int kd, int d0, const float* fq, const float* fk) {
    float xk[SLICE_PER], xq[SLICE_PER];
#pragma unroll
    for (int u = 0; u < SLICE_PER; u++) {
        int e = threadIdx.x + 256 * u, t = e / DSL, i = e % DSL;
        xk[u] = xq[u] = 0.f;
        if (t < n && d0 + i < dk) {
            const float* row = qkv + (long)(t0 + t) * cd;
            xq[u] = __ldg(row + kh * dk + d0 + i);
            xk[u] = __ldg(row + kd + kh * dk + d0 + i);
        }
    }
#pragma unroll
    for (int u = 0; u < SLICE_PER; u++) {
        int e = threadIdx.x + 256 * u, t = e / DSL, i = e % DSL;
        bool in = t < n && d0 + i < dk;
        kc[t * ld + i] = in ? xk[u] * fk[t] : 0.f;
        qc[t * ld + i] = in ? xq[u] * fq[t] : 0.f;
    }
}

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
        stageSlice(&kc[0][0], &qc[0][0], DSL + 1, qkv, cd, t0, n, kh, dk, kd, d0, fq, fk);
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
// Two blocks per SM (≤ 128 registers): the grid is 192 blocks for
// Qwen3.5-27B's 48 value heads, each walking every chunk of the pass, so
// one per SM would leave a second wave.
//
// snap, when not null, holds a device address per chunk: after chunk c the
// state is also written to snap[c] (same [vheads, dk, dv] layout) where
// that is not zero. A prefill pass that keeps the hybrid's snapshots at
// chunk boundaries inside it (GatedDeltaRuleSegments) so runs as one
// launch, where segment by segment it paid a launch pair, a state round
// trip and a tail wave per segment (~2 ms a snapshot on Qwen3.5-27B).
extern "C" __global__ void __launch_bounds__(256, 2)
    delta_chunk(float* out, const float* qkv, const float* a, const float* b, float* state, const float* aLog,
                const float* dtBias, const float* kq, const float* inv, int rows, int kheads, int vheads, int dk,
                int dv, const unsigned long long* snap) {
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
            stageSlice(kc, qc, DSL, qkv, cd, t0, n, kh, dk, kd, d0, fq, fk);
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
        float o[8], vv[8];
#pragma unroll
        for (int x = 0; x < 8; x++) {
            int t = warp + 8 * x;
            vv[x] = t < n && col ? __ldg(qkv + (long)(t0 + t) * cd + 2L * kd + (long)h * dv + jg) : 0.f;
        }
#pragma unroll
        for (int x = 0; x < 8; x++) {
            int t = warp + 8 * x;
            ws[t * 32 + lane] = be[t] * (vv[x] - eg[t] * aks[x]);
            o[x] = eg[t] * aqs[x];
        }
        __syncthreads();  // everyone is done with the slices in r
        // A in two halves of TILE_PER/2 loads in flight (all sixteen held
        // with the outputs o spilled at two blocks per SM).
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float g[TILE_PER / 2];
#pragma unroll
            for (int u = 0; u < TILE_PER / 2; u++) {
                int e = threadIdx.x + 256 * (u + hf * TILE_PER / 2), t = e / DC, s = e % DC;
                g[u] = s < t && t < n ? __ldg(kk + e) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < TILE_PER / 2; u++) {
                int e = threadIdx.x + 256 * (u + hf * TILE_PER / 2), t = e / DC, s = e % DC;
                float v = 0.f;
                if (s < t && t < n) v = be[t] * (float)exp(gs[t] - gs[s]) * g[u];
                r[e] = v;
            }
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
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {  // P, as A
            float g[TILE_PER / 2];
#pragma unroll
            for (int u = 0; u < TILE_PER / 2; u++) {
                int e = threadIdx.x + 256 * (u + hf * TILE_PER / 2), t = e / DC, s = e % DC;
                g[u] = s <= t && t < n ? __ldg(qk + e) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < TILE_PER / 2; u++) {
                int e = threadIdx.x + 256 * (u + hf * TILE_PER / 2), t = e / DC, s = e % DC;
                float v = 0.f;
                if (s <= t && t < n) v = (float)exp(gs[t] - gs[s]) * g[u];
                r[e] = v;
            }
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
            float kx[SLICE_PER];
#pragma unroll
            for (int u = 0; u < SLICE_PER; u++) {
                int e = threadIdx.x + 256 * u, s = e / DSL, i = e % DSL;
                kx[u] = s < n && d0 + i < dk ? __ldg(qkv + (long)(t0 + s) * cd + kd + kh * dk + d0 + i) : 0.f;
            }
            __syncthreads();  // r free (P, or the previous slice, consumed)
#pragma unroll
            for (int u = 0; u < SLICE_PER; u++) {
                int e = threadIdx.x + 256 * u, s = e / DSL, i = e % DSL;
                float x = 0.f;
                if (s < n && d0 + i < dk) x = dn[s] * (kx[u] * fk[s]);
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
        if (snap != nullptr) {
            unsigned long long sp = snap[c];  // the same for the whole block
            if (sp != 0) {
                __syncthreads();  // every warp's rows of the updated state
                float* D = (float*)sp + (long)h * dk * dv;
                for (int i = warp; i < dk; i += 8)
                    if (col) D[(long)i * dv + jg] = ss[i * 32 + lane];
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

