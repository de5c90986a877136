// Decode attention of the CUDA backend (included by kernels.cu, one
// module): the KV store, split-K attn_partial (a block per query head) and
// attn_gqa (a block per GQA group, cp.async K tiles), each merging its
// splits in the last block to finish.
#pragma once

#include "kv_elem.cuh"

// grid (rows, element blocks): one thread per element of k and v; T is
// the cache's element type (kv_elem.cuh), as in every kernel below.
template <class T>
__device__ __forceinline__ void storeKVRows(T* K, T* V, const float* k, const float* v, const int* slots, int kw,
                                            int vw) {
    long r = blockIdx.x;
    long s = slots[r];
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i < kw) kvSt(K + s * kw + i, k[r * kw + i]);
    if (i < vw) kvSt(V + s * vw + i, v[r * vw + i]);
}
extern "C" __global__ void store_kv(float* K, float* V, const float* k, const float* v, const int* slots, int kw,
                                    int vw) { PROBE_KERNEL();
    storeKVRows(K, V, k, v, slots, kw, vw);
}
extern "C" __global__ void store_kv_h(__half* K, __half* V, const float* k, const float* v, const int* slots, int kw,
                                      int vw) { PROBE_KERNEL();
    storeKVRows(K, V, k, v, slots, kw, vw);
}

// combineSplits merges the splits of one (row, head) with the block's 128
// threads: every warp finds the global max, each split's weight is
// computed once into shared memory. splits ≤ 256.
// Partials are read with ld.global.cg (L2): other blocks wrote them.
__device__ void combineSplits(float* dst, const float* part, long rh, int splits, int dv) {
    __shared__ float fac[256];
    const float* p = part + rh * splits * (dv + 2);
    int lane = threadIdx.x & 31;
    float M = -INFINITY;
    for (int s = lane; s < splits; s += 32) M = fmaxf(M, __ldcg(p + s * (dv + 2) + dv));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        float ms = __ldcg(p + s * (dv + 2) + dv);
        fac[s] = ms == -INFINITY ? 0.f : expf(ms - M);
    }
    __syncthreads();
    float L = 0.f;
    for (int s = lane; s < splits; s += 32) L += fac[s] * __ldcg(p + s * (dv + 2) + dv + 1);
    L = warpSum(L);
    float inv = 1.f / L;
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float o = 0.f;
        for (int s = 0; s < splits; s++) o += fac[s] * __ldcg(p + s * (dv + 2) + d);
        dst[rh * dv + d] = o * inv;
    }
}

// Split-K attention (flash-decoding): block (row·head, split) covers
// positions [split·chunk, min(+chunk, ctx)) of query row `row` with 4 warps
// (one position per warp at a time, online softmax), and writes a partial
// (acc[dv], max, sum); the last split to finish merges them into dst.
// Head dims up to 256.
#define MAXD 8
template <class T>
__device__ __forceinline__ void attnPartial(float* dst, float* part, int* counters, const float* q, const T* K,
                                            const T* V, const int* table, const int* startp, int heads, int kvh,
                                            int dk, int dv, int bs, int chunk, float scale) {
    __shared__ float sm[4], sl[4], sacc[4][MAXD * 32];
    int rh = blockIdx.x, row = rh / heads, h = rh % heads, kh = h / (heads / kvh);
    int splits = gridDim.y;
    int ctx = *startp + row + 1;
    int lo = blockIdx.y * chunk, hi = min(lo + chunk, ctx);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float qv[MAXD], acc[MAXD];
    const float* qr = q + (long)rh * dk;
#pragma unroll
    for (int i = 0; i < MAXD; i++) {
        int d = lane + 32 * i;
        qv[i] = d < dk ? qr[d] * scale : 0.f;
        acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    long kw = (long)kvh * dk, vw = (long)kvh * dv;
    for (int p = lo + warp; p < hi; p += 4) {
        long slot = (long)table[p / bs] * bs + p % bs;
        const T* kp = K + slot * kw + (long)kh * dk;
        const T* vp = V + slot * vw + (long)kh * dv;
        float vv[MAXD];
#pragma unroll
        for (int i = 0; i < MAXD; i++) {
            int d = lane + 32 * i;
            vv[i] = d < dv ? kvLd(vp + d) : 0.f;
        }
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < MAXD; i++) {
            int d = lane + 32 * i;
            if (d < dk) s += qv[i] * kvLd(kp + d);
        }
        s = warpSum(s);
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), e = expf(s - mn);
        l = l * corr + e;
#pragma unroll
        for (int i = 0; i < MAXD; i++) acc[i] = acc[i] * corr + e * vv[i];
        m = mn;
    }
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int i = 0; i < MAXD; i++) {
        int d = lane + 32 * i;
        if (d < dv) sacc[warp][d] = acc[i];
    }
    __syncthreads();
    float M = fmaxf(fmaxf(sm[0], sm[1]), fmaxf(sm[2], sm[3]));
    float f[4];
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        f[w] = sm[w] == -INFINITY ? 0.f : expf(sm[w] - M);
        L += sl[w] * f[w];
    }
    float* out = part + ((long)rh * splits + blockIdx.y) * (dv + 2);
    for (int d = threadIdx.x; d < dv; d += blockDim.x)
        out[d] = sacc[0][d] * f[0] + sacc[1][d] * f[1] + sacc[2][d] * f[2] + sacc[3][d] * f[3];
    if (threadIdx.x == 0) { out[dv] = M; out[dv + 1] = L; }
    // The last split of this (row, head) to finish merges them all
    // (lastArrival), which saves a second launch per layer.
    if (lastArrival(counters + rh, splits)) combineSplits(dst, part, rh, splits, dv);
}
#define ATTN_PARTIAL_KERNEL(NAME, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(128)                                                             \
        NAME(float* dst, float* part, int* counters, const float* q, const T* K, const T* V, const int* table,    \
             const int* startp, int heads, int kvh, int dk, int dv, int bs, int chunk, float scale) {              \
        PROBE_KERNEL();                                                                                           \
        attnPartial(dst, part, counters, q, K, V, table, startp, heads, kvh, dk, dv, bs, chunk, scale);           \
    }
ATTN_PARTIAL_KERNEL(attn_partial, float)
ATTN_PARTIAL_KERNEL(attn_partial_h, __half)

// ---------------------------------------------------------------- GQA decode attention
// attn_gqa is the decode attention (any rows, but meant for few): block
// (row·kv head·head subgroup, split) covers positions
// [split·chunk, min(+chunk, ctx)) for all hg ≤ 8 query heads of its subgroup
// of the GQA group at once, so each K/V row is read from DRAM once per
// group rather than once per query head. Positions go in tiles of T (32;
// 16 when a head dim is over 128):
//   - K rows by cp.async into shared memory (row stride dk+4 floats: the
//     score threads' 16-byte reads of 8 different rows hit distinct banks),
//     the next tile's issued as soon as the scores of this one are done;
//   - V rows straight into registers (16-byte loads, not kept in L1), the
//     thread that multiplies them owns their columns;
//   - scores: thread (t, j) dots position t with all hg heads over the
//     float4 columns j, j+128/T, ... (each K element read from shared memory
//     once), the 128/T slices summed by the softmax warps;
//   - online softmax per head: warp w owns heads w and w+4, lane = position;
//   - P·V: thread (column group cg of 4, slice sl) accumulates its
//     columns of all hg heads over positions sl, sl+nsl, ... of the tile;
//     the slices are summed once at the end through shared memory.
// Each block writes one partial per head (acc[dv], max, sum; the layout
// of attn_partial's, so combine is the same arithmetic); the last split of
// the block row to finish (counter per (row, kv head, subgroup), left at
// zero) merges them. One split writes dst directly.
// ctx comes from the device (*startp + row + 1), so under graph capture
// (splits sized from the table's capacity) the chunk is recomputed from
// the real context: chunk = max(ceil(ctx/splits), minchunk) and splits
// past ctx are empty (no partial; the merge reads the first ceil(ctx/chunk)).
// Positions ≥ ctx are never read. dk, dv ≤ 256 and multiples of 4;
// heads % kvh == 0; hg = ceil(G / ceil(G/8)) for G = heads/kvh, with
// ceil(G/hg) subgroups.
#define GQ_HG 8
#define GQ_T 32
#define GQ_KS 4224 // floats: a K tile T·(dk+4) ≤ 32·132 or 16·260; the slice sums; the merge factors

__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

// gqaStageK issues the cp.async copies of a tile's n K rows (slots sl)
// into Ks: float rows dk+4 floats apart, 16 bytes (4 elements) a copy;
// float16 rows dk+8 halves apart (16-byte aligned), 8 elements a copy
// (dk a multiple of 8).
template <class T>
__device__ __forceinline__ void gqaStageK(float* Ks, const T* Kh, const int* sl, int n, int dk, long kw) {
    if constexpr (sizeof(T) == 4) {
        const int dk4 = dk >> 2, kp4 = dk4 + 1;
        for (int i = threadIdx.x; i < n * dk4; i += 128) {
            int t = i / dk4, c = i - t * dk4;
            cpAsync16(&Ks[(t * kp4 + c) * 4], Kh + (long)sl[t] * kw + c * 4);
        }
    } else {
        const int dk8 = dk >> 3;
        __half* Kt = (__half*)Ks;
        for (int i = threadIdx.x; i < n * dk8; i += 128) {
            int t = i / dk8, c = i - t * dk8;
            cpAsync16(Kt + t * (dk + 8) + c * 8, Kh + (long)sl[t] * kw + c * 8);
        }
    }
}

// gqaK4 reads elements 4c..4c+3 of row tt of the staged K tile.
template <class T>
__device__ __forceinline__ float4 gqaK4(const float* Ks, int tt, int c, int dk) {
    if constexpr (sizeof(T) == 4) return ((const float4*)Ks)[tt * ((dk >> 2) + 1) + c];
    else return kvLd4((const __half*)Ks + tt * (dk + 8) + c * 4);
}

// gqaV4 loads four elements of a V row as stored (not kept in L1);
// kvWiden4 widens them where they are used (kv_elem.cuh says why).
__device__ __forceinline__ float4 gqaV4(const float* p) {
    uint4 u = ldstream((const uint4*)p);
    return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
}
__device__ __forceinline__ uint2 gqaV4(const __half* p) { return kvRaw4(p); }

template <class KT>
__device__ __forceinline__ void attnGQA(float* dst, float* part, int* counters, const float* __restrict__ q,
                                        const KT* __restrict__ K, const KT* __restrict__ V,
                                        const int* __restrict__ table, const int* startp, int heads, int kvh, int dk,
                                        int dv, int bs, int minchunk, int HG, float scale) {
    __shared__ __align__(16) float Ks[GQ_KS];
    __shared__ __align__(16) float Qs[GQ_HG * 256];
    __shared__ float sp[128 * GQ_HG];  // partial scores [j][g][t], t < T: 128/T·8·T
    __shared__ float P[GQ_HG * GQ_T];  // probabilities [g][t]
    __shared__ float corrS[GQ_HG], mS[GQ_HG], lS[GQ_HG], invS[GQ_HG];
    __shared__ int sslot[2][GQ_T];     // slots of this tile and the next

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int G = heads / kvh, nsub = (G + HG - 1) / HG;
    const int bx = blockIdx.x, sub = bx % nsub, kh = (bx / nsub) % kvh, row = bx / (nsub * kvh);
    const int h0 = kh * G + sub * HG, hg = min(HG, G - sub * HG);
    const int splits = gridDim.y;
    const int ctx = *startp + row + 1;
    const int chunk = max((ctx + splits - 1) / splits, minchunk);
    const int lo = blockIdx.y * chunk, hi = min(lo + chunk, ctx);
    const int T = max(dk, dv) <= 128 ? 32 : 16;
    const int ntiles = lo < hi ? (hi - lo + T - 1) / T : 0;
    const int dk4 = dk >> 2;
    const long kw = (long)kvh * dk, vw = (long)kvh * dv;
    const KT* Kh = K + (long)kh * dk;
    const KT* Vh = V + (long)kh * dv;
    // score threads: position tt, column slice j of nds
    const int tt = tid % T, j = tid / T, nds = 128 / T;
    // P·V threads: column group cg (4 floats), position slice sl of nsl
    // (threads past nsl·ncg idle there: 128 % (dv/4) of them)
    const int ncg = dv >> 2, nsl = 128 / ncg, cg = tid % ncg, sl = tid / ncg;

    float acc[GQ_HG][4];
#pragma unroll
    for (int g = 0; g < GQ_HG; g++) acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.f;
    float mw[2] = {-INFINITY, -INFINITY}, lw[2] = {0.f, 0.f}; // heads warp, warp+4

    if (ntiles > 0) {
        const float* qb = q + ((long)row * heads + h0) * dk; // the hg heads are adjacent
        for (int i = tid; i < hg * dk; i += 128) Qs[i] = qb[i] * scale;
        if (tid < min(T, hi - lo)) {
            int p = lo + tid;
            sslot[0][tid] = table[p / bs] * bs + p % bs;
        }
        __syncthreads();
        gqaStageK<KT>(Ks, Kh, sslot[0], min(T, hi - lo), dk, kw);
    }
    for (int it = 0; it < ntiles; it++) {
        const int cur = it & 1, tb = lo + it * T, n = min(T, hi - tb);
        const bool more = it + 1 < ntiles;
        // V rows of this tile into registers (rows ≥ n are zero, never used).
        typename KVRaw4<KT>::type vr[8];
#pragma unroll
        for (int r = 0; r < 8; r++) {
            int t = sl + nsl * r;
            vr[r] = {};
            if (sl < nsl && t < n) vr[r] = gqaV4(Vh + (long)sslot[cur][t] * vw + cg * 4);
        }
        // Slots of the next tile, into the buffer of tile it-1, whose
        // loads every thread issued before the previous iteration's S1.
        if (more) {
            int nn = min(T, hi - tb - T);
            if (tid < nn) {
                int p = tb + T + tid;
                sslot[cur ^ 1][tid] = table[p / bs] * bs + p % bs;
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads(); // S1: K tile (and the next slots) visible
        float s[GQ_HG];
#pragma unroll
        for (int g = 0; g < GQ_HG; g++) s[g] = 0.f;
        if (tt < n) {
            for (int c = j; c < dk4; c += nds) {
                float4 k = gqaK4<KT>(Ks, tt, c, dk);
#pragma unroll
                for (int g = 0; g < GQ_HG; g++) {
                    if (g < hg) {
                        float4 x = ((const float4*)Qs)[g * dk4 + c];
                        s[g] += x.x * k.x + x.y * k.y + x.z * k.z + x.w * k.w;
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < GQ_HG; g++)
            if (g < hg) sp[(j * GQ_HG + g) * T + tt] = s[g];
        __syncthreads(); // S2: scores written, Ks free
        if (more) gqaStageK<KT>(Ks, Kh, sslot[cur ^ 1], min(T, hi - tb - T), dk, kw);
#pragma unroll
        for (int w = 0; w < 2; w++) {
            int g = warp + 4 * w;
            if (g < hg) { // warp-uniform
                float x = -INFINITY;
                if (lane < n) {
                    x = 0.f;
                    for (int jj = 0; jj < nds; jj++) x += sp[(jj * GQ_HG + g) * T + lane];
                }
                float mn = fmaxf(mw[w], warpMax(x)); // finite: n ≥ 1
                float corr = expf(mw[w] - mn);       // 0 on the first tile
                float e = lane < n ? expf(x - mn) : 0.f;
                lw[w] = lw[w] * corr + warpSum(e);
                mw[w] = mn;
                if (lane < T) P[g * GQ_T + lane] = e;
                if (lane == 0) corrS[g] = corr;
            }
        }
        __syncthreads(); // S3: P and corr visible
        if (sl < nsl) {
#pragma unroll
            for (int g = 0; g < GQ_HG; g++) {
                if (g < hg) {
                    float c = corrS[g];
                    acc[g][0] *= c, acc[g][1] *= c, acc[g][2] *= c, acc[g][3] *= c;
                }
            }
#pragma unroll
            for (int r = 0; r < 8; r++) {
                int t = sl + nsl * r;
                if (t < n) {
                    const float4 v = kvWiden4(vr[r]);
#pragma unroll
                    for (int g = 0; g < GQ_HG; g++) {
                        if (g < hg) {
                            float p = P[g * GQ_T + t];
                            acc[g][0] += p * v.x, acc[g][1] += p * v.y;
                            acc[g][2] += p * v.z, acc[g][3] += p * v.w;
                        }
                    }
                }
            }
        }
        // The next iteration's writes of sp, P, corrS and Ks come after its
        // S1/S2, which every thread reaches only after this P·V.
    }
    const bool single = splits == 1; // then ntiles ≥ 1: lo = 0 < ctx
    if (ntiles > 0) {
        // Sum the position slices (Ks is free: the last tile's scores are
        // done and no K load is pending).
        if (sl < nsl) {
#pragma unroll
            for (int g = 0; g < GQ_HG; g++)
                if (g < hg)
                    *(float4*)&Ks[(sl * hg + g) * dv + cg * 4] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
        }
        if (lane == 0) {
#pragma unroll
            for (int w = 0; w < 2; w++) {
                int g = warp + 4 * w;
                if (g < hg) mS[g] = mw[w], lS[g] = lw[w];
            }
        }
        __syncthreads();
        for (int i = tid; i < hg * dv; i += 128) {
            int g = i / dv, d = i - g * dv;
            float o = 0.f;
            for (int z = 0; z < nsl; z++) o += Ks[(z * hg + g) * dv + d];
            long rh = (long)row * heads + h0 + g;
            if (single) {
                dst[rh * dv + d] = o / lS[g];
            } else {
                float* out = part + (rh * splits + blockIdx.y) * (dv + 2);
                out[d] = o;
                if (d == 0) out[dv] = mS[g], out[dv + 1] = lS[g];
            }
        }
    }
    if (single) return;
    // The last split of this block row to finish merges them all (as in
    // attn_partial); empty splits count too, and leave no partial.
    if (!lastArrival(counters + bx, splits)) return;
    const int ns = (ctx + chunk - 1) / chunk; // splits with positions (≤ splits)
    float* fac = Ks;                          // [g][256]
#pragma unroll
    for (int w = 0; w < 2; w++) {
        int g = warp + 4 * w;
        if (g < hg) {
            const float* pg = part + ((long)row * heads + h0 + g) * splits * (dv + 2);
            float M = -INFINITY;
            for (int z = lane; z < ns; z += 32) M = fmaxf(M, __ldcg(pg + z * (dv + 2) + dv));
            M = warpMax(M);
            float L = 0.f;
            for (int z = lane; z < ns; z += 32) {
                float f = expf(__ldcg(pg + z * (dv + 2) + dv) - M);
                fac[g * 256 + z] = f;
                L += f * __ldcg(pg + z * (dv + 2) + dv + 1);
            }
            L = warpSum(L);
            if (lane == 0) invS[g] = 1.f / L;
        }
    }
    __syncthreads();
    for (int i = tid; i < hg * dv; i += 128) {
        int g = i / dv, d = i - g * dv;
        long rh = (long)row * heads + h0 + g;
        const float* pg = part + rh * splits * (dv + 2) + d;
        float o = 0.f;
        for (int z = 0; z < ns; z++) o += fac[g * 256 + z] * __ldcg(pg + z * (dv + 2));
        dst[rh * dv + d] = o * invS[g];
    }
}
#define ATTN_GQA_KERNEL(NAME, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(128, 4)                                                          \
        NAME(float* dst, float* part, int* counters, const float* __restrict__ q, const T* __restrict__ K,        \
             const T* __restrict__ V, const int* __restrict__ table, const int* startp, int heads, int kvh, int dk, \
             int dv, int bs, int minchunk, int HG, float scale) {                                                 \
        PROBE_KERNEL();                                                                                           \
        attnGQA<T>(dst, part, counters, q, K, V, table, startp, heads, kvh, dk, dv, bs, minchunk, HG, scale);    \
    }
ATTN_GQA_KERNEL(attn_gqa, float)
ATTN_GQA_KERNEL(attn_gqa_h, __half)
