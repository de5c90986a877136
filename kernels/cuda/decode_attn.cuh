// attn_decode: the attention of a one-token decode step with the query and
// key heads' RMSNorm + RoPE and the KV store folded in
// (kernels.FusedAttention). Without it a layer runs rope_store, then the
// split-K attention, each a launch whose fixed cost (~4 and ~8 µs per layer
// on an H200 at a 512-token context, for microseconds of traffic) was ~9%
// of the Llama-3-8B decode step. What is left is a chain of dependent
// memory round trips, so the kernel is arranged to shorten it:
//
// Grid (kv heads, splits), one warp per query head of the GQA group (G ≤ 8
// warps). Lane l holds elements [l·E, l·E+E) of a head (E = hd/32: 2, 4 or
// 8), so a K or V row is one coalesced 4E-byte load per lane (2E over a
// float16 cache, kv_elem.cuh). A split is a whole number of chunks of
// P = 64/E positions, walked in batches of PB positions (128 registers of
// K and V per lane, all loads of a batch in flight together): P of float32
// rows, 2P (at most 32) of float16 ones. Measured on an H200, a float16
// cache decodes Llama-3-8B at 8000 positions at 205.9-206.0 tok/s against
// 205.4 (float32; with batches of P, 198.5-198.8), but Qwen3-8B Q4_K_M at
// 192 positions ~3% slower (the widening, half-empty batches; cheaper
// score sums, scoreScatter, won back 0.8%): this attention waits on
// its chain of round trips, not on the cache's bytes, so float16 buys
// memory, not speed.
//   - Before waiting for the q/k/v projection (griddepcontrol.wait), each
//     warp reads the block table and issues the first batch's K and V
//     loads: the cache rows of earlier positions are not written by this
//     step, so they stream while the projection drains. The position, the
//     rotary factors and the norm weights are read then too.
//   - Then it loads its query row with the key and value rows (one round
//     trip), norms and ropes the query head through a shared-memory row
//     (any rotary width, NeoX or interleaved pairs), scaled for the
//     softmax. The split holding the newest position (ctx-1) ropes the key
//     head in every warp, uses it and the value row from registers for
//     that position, and warp 0 stores both in the cache.
//   - Online softmax per batch, the next batch's table entries loaded
//     while one computes.
// Splits past the context are empty; the last non-empty split to finish
// merges the partials (attn_merge.cuh's layout and merge, as the deferred
// entries' successors do). The deferred entries
// (attn_decode_d_E) leave the merge to the op after them instead
// (attn_merge.cuh, attn_merge.go): a block-format o projection does it in
// its int8 rounding, saving the merge's dependent round trips. At a head
// dim of 128, attn_decode_q_4 merges itself and rounds for that
// projection instead, saving the rounding's launch.
#define AD_MAXG 8
#include "attn_merge.cuh"
#include "qround.cuh"

// ropeFreqs loads the inverse frequencies of the pairs j = lane + 32m <
// half that this lane rotates (0 past half), and ropeCS leaves in c[m],
// sn[m] their rotary factors (times rscale) at position p, as ropePairs
// (decode.cu) computes them: they depend on the position only, so the
// kernel works them out before the PDL wait, once for the query and the
// key.
template <int E>
__device__ __forceinline__ void ropeFreqs(float (&fr)[E / 2], const float* invf, int half) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < E / 2; m++) fr[m] = lane + 32 * m < half ? invf[lane + 32 * m] : 0.f;
}
template <int E>
__device__ __forceinline__ void ropeCS(float (&c)[E / 2], float (&sn)[E / 2], float p, const float (&fr)[E / 2],
                                       float rscale) {
#pragma unroll
    for (int m = 0; m < E / 2; m++) {
        c[m] = cosf(p * fr[m]) * rscale;
        sn[m] = sinf(p * fr[m]) * rscale;
    }
}

// headRow norms (optional RMSNorm with weight nw, in registers when norm
// is set) and ropes (the factors of ropeCS) a head vector in registers
// (x, E elements a lane, lane-major) through the warp's shared row sv,
// and leaves the result in out (times mul).
// inv, when not zero, is the norm's 1/rms over the whole row of heads
// (wideInv), not over this head.
template <int E>
__device__ __forceinline__ void headRow(float* out, float* sv, float (&x)[E], const float (&nw)[E], bool norm,
                                         float eps, float inv, const float (&c)[E / 2], const float (&sn)[E / 2],
                                         int half, int neox, float mul) {
    constexpr int HD = 32 * E;
    const int lane = threadIdx.x & 31;
    if (norm) {
        if (inv == 0.f) {
            float s = 0.f;
#pragma unroll
            for (int e = 0; e < E; e++) s += x[e] * x[e];
            inv = rsqrtf(warpSum(s) / HD + eps);
        }
#pragma unroll
        for (int e = 0; e < E; e++) x[e] = x[e] * inv * nw[e];
    }
#pragma unroll
    for (int e = 0; e < E; e++) sv[lane * E + e] = x[e];
    __syncwarp();
#pragma unroll
    for (int m = 0; m < E / 2; m++) {
        const int j = lane + 32 * m;
        if (j < half) ropePair(sv, j, half, neox, c[m], sn[m]);
    }
    __syncwarp();
#pragma unroll
    for (int e = 0; e < E; e++) out[e] = sv[lane * E + e] * mul;
    __syncwarp();
}

// wideInv returns the 1/rms of the whole q row (nq floats) in .x and of
// the whole k row (nk) in .y, for norms over all heads at once
// (MiniMax-M2's q_norm and k_norm); every thread of the block calls it.
__device__ __forceinline__ float2 wideInv(const float* q, int nq, const float* k, int nk, float eps) {
    __shared__ float red[AD_MAXG][2];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float sq = 0.f, sk = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < nq / 4; i += blockDim.x) {
        float4 v = ((const float4*)q)[i];
        sq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
#pragma unroll 2
    for (int i = threadIdx.x; i < nk / 4; i += blockDim.x) {
        float4 v = ((const float4*)k)[i];
        sk += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    sq = warpSum(sq);
    sk = warpSum(sk);
    if (lane == 0) red[warp][0] = sq, red[warp][1] = sk;
    __syncthreads();
    sq = sk = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) sq += red[w][0], sk += red[w][1];
    return make_float2(rsqrtf(sq / nq + eps), rsqrtf(sk / nk + eps));
}

// storeKV writes a lane's E elements of the newest key and value rows at
// cache offset at (KT: the cache's element type, kv_elem.cuh).
template <int E, class KT>
__device__ __forceinline__ void storeKV(KT* K, KT* V, long at, const float* knew, const float* vnew) {
#pragma unroll
    for (int e = 0; e < E; e++) {
        kvSt(K + at + e, knew[e]);
        kvSt(V + at + e, vnew[e]);
    }
}

// ldBatch loads the K and V rows of positions p0 .. p0+P-1 below hi,
// except position skip (the newest, which is not in the cache yet), lane
// j < P of slot holding position p0+j's slot; the rows stay as stored
// until they are used (KVRow, kv_elem.cuh).
template <int E, int P, class KT>
__device__ __forceinline__ void ldBatch(KVRow<KT, E> (&kr)[P], KVRow<KT, E> (&vr)[P], const KT* K, const KT* V,
                                        int slot, int p0, int hi, int skip, long kw, long off) {
#pragma unroll
    for (int j = 0; j < P; j++) {
        long at = (long)__shfl_sync(0xffffffffu, slot, j) * kw + off;
        if (p0 + j < hi && p0 + j != skip) {
            kr[j].load(K + at);
            vr[j].load(V + at);
        }
    }
}

// scoreScatter sums each of a batch's 32 score partials over the warp's
// lanes and returns, in lane l, the total of position l: a reduce-scatter,
// each butterfly step (xor 16, 8, 4, 2, 1) halving the values a lane keeps
// (16, 8, 4, 2, 1 shuffles: 31 where 32 warp sums took 160). A lane's
// partial sums are the warp sums' own, so the totals are bit for bit
// theirs.
__device__ __forceinline__ float scoreScatter(float (&s)[32]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) {
        const bool up = lane & w; // keeps the upper half, sends the lower
#pragma unroll
        for (int j = 0; j < w; j++) {
            const float send = up ? s[j] : s[j + w];
            const float keep = up ? s[j + w] : s[j];
            s[j] = keep + __shfl_xor_sync(0xffffffffu, send, w);
        }
    }
    return s[0];
}

// attnRound rounds a lane's four elements of head h's output (E = 4: qx's
// float4 32h + lane) to int8 as qx_norm does, for a block-format o
// projection (the ROUND entry).
template <int E>
__device__ __forceinline__ void attnRound(uint32_t* xq, float2* xs, const float (&o)[E], float mul, int h) {
    static_assert(E == 4, "attnRound: head dim 128");
    qRound(xq, xs, make_float4(o[0] * mul, o[1] * mul, o[2] * mul, o[3] * mul), h * 32 + (threadIdx.x & 31), true);
}

template <int E, bool DEFER, bool WIDE, bool ROUND, class KT>
__device__ __forceinline__ void attnDecode(float* dst, float* part, int* counters, const float* q, const float* k,
                                           const float* v, const float* nq, const float* nk, float eps, KT* K,
                                           KT* V, const int* pos, const int* slots, const float* invf,
                                           const int* table, const int* startp, int kvh, int half, int neox,
                                           float rscale, int bs, int minchunk, float scale, uint32_t* oq,
                                           float2* os) {
    constexpr int HD = 32 * E, P = 64 / E;
    // Splits are whole chunks of P positions (attn_merge.cuh's merges
    // count them so); a batch is PB positions: P of float32 rows, twice as
    // many of float16 rows in the same registers (at most a warp's lanes,
    // which hold the batch's slots), so a float16 cache takes half the
    // round trips.
    constexpr int PB = sizeof(KT) == 2 ? (2 * P < 32 ? 2 * P : 32) : P;
    __shared__ __align__(16) float sv[AD_MAXG][HD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = blockDim.x >> 5;
    const int kh = blockIdx.x, h = kh * G + warp, splits = gridDim.y;
    // The context, block table and earlier cache rows are in place before
    // the step's first kernel: read them before the wait, all in one round
    // trip. Most blocks land only once the q/k/v GEMV has left their SM,
    // about when it ends, so their prologue is on the critical path: the
    // split's table entries used to wait for the context (its chunk) and
    // the rotary factors for the position, two round trips before the K/V
    // loads and the wait. Lane l reads the table's entry l whatever the
    // context: the table's device buffers hold at least 32 words
    // (Backend.put's uploads, a capture's 64-word-aligned arena entries),
    // and entries past the sequence's are never used.
    // The rotary factors are worked out here too, from the position and
    // the frequencies loaded beside the context and the table, and a warp
    // barrier keeps the five loads together: with the factors computed
    // after the split's arithmetic (88a3aba), ptxas issued the position's
    // and the frequencies' loads only after the first use of the context,
    // a second round trip.
    // Qwen3-8B Q4_K_M on an H200, fed decode, four interleaved rounds
    // (docs/benchmarks.md, 2026-12-03 from 07:49): 598.3-599.5 tok/s
    // against 596.0-597.1; the probe's attention blocks pass their wait
    // 1.28 µs after landing on average, against 2.02.
    float fr[E / 2];
    const float at = (float)pos[0];
    ropeFreqs<E>(fr, invf, half);
    const int tlane = table[lane];
    const int ctx = *startp + 1;
    __syncwarp();
    float rc[E / 2], rs[E / 2];
    ropeCS<E>(rc, rs, at, fr, rscale);
    const int chunk = (max((ctx + splits - 1) / splits, minchunk) + P - 1) / P * P;
    const int nsplit = (ctx + chunk - 1) / chunk;
    const int lo = blockIdx.y * chunk, hi = min(lo + chunk, ctx);
    const long kw = (long)kvh * HD, off = (long)kh * HD + lane * E;
    KVRow<KT, E> kr[PB], vr[PB];
    // Lane j < PB holds the slot of position p0 + j of the batch at p0.
    const int ti = (lo + lane) / bs, te = __shfl_sync(0xffffffffu, tlane, ti & 31);
    int slot = lo + lane < hi && lane < PB ? (ti < 32 ? te : table[ti]) * bs + (lo + lane) % bs : 0;
    ldBatch<E, PB, KT>(kr, vr, K, V, slot, lo, hi, ctx - 1, kw, off);
    // The norm weights before the wait too; after it, the query, key and
    // value rows are loaded together, one round trip (Qwen3-8B Q4_K_M on
    // an H200, interleaved: 459.9-462.2 tok/s against 454.7-457.1 with a
    // round trip per head row and the factors computed after the wait,
    // once for q and once for k).
    float wq[E], wk[E];
    if (lo < hi) {
#pragma unroll
        for (int e = 0; e < E; e++) {
            wq[e] = nq != nullptr ? nq[(WIDE ? h * HD : 0) + lane * E + e] : 1.f;
            wk[e] = nk != nullptr && hi == ctx ? nk[(WIDE ? kh * HD : 0) + lane * E + e] : 1.f;
        }
    }
    pdlWait();
    pdlLaunchDependents();
    if (lo >= hi) return; // past the context: no partial, not counted

    float qv[E], knew[E], vnew[E];
    const bool newest = hi == ctx;
    float xq[E], xk[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        xq[e] = q[(long)h * HD + lane * E + e];
        xk[e] = newest ? k[(long)kh * HD + lane * E + e] : 0.f;
        vnew[e] = newest ? v[(long)kh * HD + lane * E + e] : 0.f;
    }
    // WIDE: the norms are over all heads' rows (nq, nk of heads·HD and
    // kvh·HD weights), one sum of squares each for the whole block.
    const float2 winv = WIDE ? wideInv(q, gridDim.x * G * HD, k, kvh * HD, eps) : make_float2(0.f, 0.f);
    headRow<E>(qv, sv[warp], xq, wq, nq != nullptr, eps, winv.x, rc, rs, half, neox, scale);
    if (newest) {
        headRow<E>(knew, sv[warp], xk, wk, nk != nullptr, eps, winv.y, rc, rs, half, neox, 1.f);
        if (warp == 0) storeKV<E, KT>(K, V, (long)slots[0] * kw + off, knew, vnew);
    }
    PROBE_MARK(); // the head rows in: the q/k/v round trip and the norms and RoPE

    float m = -INFINITY, l = 0.f, acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) acc[e] = 0.f;
    // A batch of 32's weights alternate between two halves of the warp's
    // shared row (free after headRow): a lane writes batch b+2's weights
    // only after batch b+1's __syncwarp, which every lane reaches after
    // reading batch b's.
    int batch = 0;
    for (int p0 = lo;;) {
        int np = p0 + PB + lane;
        int next = np < hi && lane < PB ? table[np / bs] * bs + np % bs : 0;
        if (newest) {
#pragma unroll
            for (int j = 0; j < PB; j++)
                if (p0 + j == ctx - 1) {
#pragma unroll
                    for (int e = 0; e < E; e++) kr[j].put(e, knew[e]), vr[j].put(e, vnew[e]);
                }
        }
        float s[PB];
#pragma unroll
        for (int j = 0; j < PB; j++) {
            float t = 0.f;
            if (p0 + j < hi) {
#pragma unroll
                for (int e = 0; e < E; e++) t = fmaf(qv[e], kr[j].at(e), t);
            }
            s[j] = t;
        }
        float mx;
        if constexpr (PB == 32) {
            // A batch of 32 (float16 rows at a head dim of 128): lane l's
            // position's score (scoreScatter), its weight, and the batch's
            // weights through the warp's shared row, bit for bit the
            // values of 32 warp sums and 32 exponentials in every lane.
            // Llama-3-8B at 8000 positions decodes 207.4-207.8 tok/s
            // against 205.7-206.2, Qwen3-8B Q4_K_M at 192 559.9-561.1
            // against 555.0-556.8 (H200). At 16 positions a batch (float32
            // rows) the reduction's longer chain lost: 199.9-200.3 against
            // 202.3-202.4 on Llama-3-8B at 8000, so smaller batches keep
            // their warp sums (two copies of the batch's softmax, so that
            // the float32 kernels stay as measured).
            const float sc = scoreScatter(s);
            const bool mine = p0 + lane < hi;
            mx = fmaxf(m, warpMax(mine ? sc : -INFINITY));
            float* wrow = sv[warp] + (batch & 1) * 32;
            wrow[lane] = mine ? expf(sc - mx) : 0.f;
            __syncwarp();
            const float corr = expf(m - mx); // m = -inf on the first batch: 0
            l *= corr;
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] *= corr;
#pragma unroll
            for (int j = 0; j < PB; j++) {
                if (p0 + j < hi) {
                    const float w = wrow[j];
                    l += w;
#pragma unroll
                    for (int e = 0; e < E; e++) acc[e] = fmaf(w, vr[j].at(e), acc[e]);
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < PB; j++) s[j] = warpSum(s[j]);
            mx = m;
#pragma unroll
            for (int j = 0; j < PB; j++)
                if (p0 + j < hi) mx = fmaxf(mx, s[j]);
            float corr = expf(m - mx); // m = -inf on the first batch: 0
            l *= corr;
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] *= corr;
#pragma unroll
            for (int j = 0; j < PB; j++) {
                if (p0 + j < hi) {
                    float w = expf(s[j] - mx);
                    l += w;
#pragma unroll
                    for (int e = 0; e < E; e++) acc[e] = fmaf(w, vr[j].at(e), acc[e]);
                }
            }
        }
        m = mx;
        batch++;
        p0 += PB;
        if (p0 >= hi) break;
        ldBatch<E, PB, KT>(kr, vr, K, V, next, p0, hi, ctx - 1, kw, off);
    }

    PROBE_MARK2(); // the batches done: from here the partial, the arrival and the merge
    float* out = dst + (long)h * HD + lane * E;
    if (!DEFER && nsplit == 1) {
        float inv = 1.f / l;
        if constexpr (ROUND) {
            attnRound<E>(oq, os, acc, inv, h);
            return;
        }
#pragma unroll
        for (int e = 0; e < E; e++) out[e] = acc[e] * inv;
        return;
    }
    // attn_merge.cuh's layout (vector loads for the merge): merged by
    // attn_merge_E, qx_merge or sigmoid_mul_merge_E (DEFER), or here by
    // the last split of the kv head to finish.
    attnPartialStore<E>(part, acc, m, l, h, gridDim.x * G, splits, blockIdx.y);
    if (DEFER) return;
    // The last split to arrive merges (lastArrival). Its merge loads each
    // split's accumulators as one or two vectors a lane (attnMerge): with
    // the old layout's rows of HD+2 floats, a lane's E were E scalar loads
    // of a sector each, and the in-graph probes (probe.cuh) found this
    // merge the longest part of the attention (a tail of 4 µs on
    // Llama-3-8B, 10-13 µs at head dim 256 on Qwen3.5-27B).
    if (!lastArrival(counters + kh, nsplit)) return;
    float o[E];
    attnMerge<E>(o, part, h, gridDim.x * G, splits, nsplit);
    if constexpr (ROUND) {
        attnRound<E>(oq, os, o, 1.f, h);
        return;
    }
#pragma unroll
    for (int e = 0; e < E; e++) out[e] = o[e];
}

// Every entry comes twice: over a float32 cache (NAME) and a float16 one
// (NAME with an h after the E: attn_decode_4h, attn_decode_q_4h).
#define ATTN_DECODE_ARGS_T(KT)                                                                                      \
    float *dst, float *part, int *counters, const float *q, const float *k, const float *v, const float *nq,      \
        const float *nk, float eps, KT *K, KT *V, const int *pos, const int *slots, const float *invf,              \
        const int *table, const int *startp, int kvh, int half, int neox, float rscale, int bs, int minchunk,     \
        float scale
#define ATTN_DECODE_KERNEL_T(NAME, E, DEFER, WIDE, KT)                                                              \
    extern "C" __global__ void __launch_bounds__(32 * AD_MAXG) NAME(ATTN_DECODE_ARGS_T(KT)) { PROBE_KERNEL();      \
        attnDecode<E, DEFER, WIDE, false, KT>(dst, part, counters, q, k, v, nq, nk, eps, K, V, pos, slots, invf,   \
                                              table, startp, kvh, half, neox, rscale, bs, minchunk, scale, nullptr, \
                                              nullptr);                                                             \
    }
#define ATTN_DECODE_KERNEL(NAME, E, DEFER, WIDE)           \
    ATTN_DECODE_KERNEL_T(NAME, E, DEFER, WIDE, float)      \
    ATTN_DECODE_KERNEL_T(NAME##h, E, DEFER, WIDE, __half)
ATTN_DECODE_KERNEL(attn_decode_2, 2, false, false)
ATTN_DECODE_KERNEL(attn_decode_4, 4, false, false)
ATTN_DECODE_KERNEL(attn_decode_8, 8, false, false)
// Deferred (attn_merge.go): every split writes its partial in
// attn_merge.cuh's layout, and the op after the attention merges.
ATTN_DECODE_KERNEL(attn_decode_d_2, 2, true, false)
ATTN_DECODE_KERNEL(attn_decode_d_4, 4, true, false)
ATTN_DECODE_KERNEL(attn_decode_d_8, 8, true, false)
// Norms over the whole q and k rows (MiniMax-M2), merged and deferred.
ATTN_DECODE_KERNEL(attn_decode_w_2, 2, false, true)
ATTN_DECODE_KERNEL(attn_decode_w_4, 4, false, true)
ATTN_DECODE_KERNEL(attn_decode_w_8, 8, false, true)
ATTN_DECODE_KERNEL(attn_decode_dw_2, 2, true, true)
ATTN_DECODE_KERNEL(attn_decode_dw_4, 4, true, true)
ATTN_DECODE_KERNEL(attn_decode_dw_8, 8, true, true)

// attn_decode_q_4 merges itself (its last split) and rounds the heads'
// outputs to int8 into xq and xs instead of writing dst: the attention of
// a head dim of 128 whose output only a block-format o projection reads
// (attn_merge.go launches it when that projection comes), where the
// deferred entry left that to a qx_merge launch.
#define ATTN_DECODE_Q_KERNEL(NAME, KT)                                                                              \
    extern "C" __global__ void __launch_bounds__(32 * AD_MAXG)                                                      \
        NAME(ATTN_DECODE_ARGS_T(KT), uint32_t* xq, float2* xs) {                                                    \
        PROBE_KERNEL();                                                                                             \
        attnDecode<4, false, false, true, KT>(dst, part, counters, q, k, v, nq, nk, eps, K, V, pos, slots, invf,   \
                                              table, startp, kvh, half, neox, rscale, bs, minchunk, scale, xq, xs); \
    }
ATTN_DECODE_Q_KERNEL(attn_decode_q_4, float)
ATTN_DECODE_Q_KERNEL(attn_decode_q_4h, __half)

// attn_merge_E writes heads' outputs from the deferred partials: a warp
// per head, on PDL (the partials are its predecessor's output).
template <int E>
__device__ __forceinline__ void attnMergeTo(float* dst, const float* part, const int* startp, int heads, int splits,
                                            int minchunk) {
    // The context is in place before the step: the split count before the
    // wait, which depends on it (always ≥ 1) so that the division stays
    // ahead.
    const int nsplit = attnSplits(startp, splits, minchunk, 64 / E);
    if (nsplit > 0) pdlWait();
    pdlLaunchDependents();
    const int h = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (h >= heads) return;
    constexpr int HD = 32 * E;
    float o[E];
    attnMerge<E>(o, part, h, heads, splits, nsplit);
    float* out = dst + (long)h * HD + (threadIdx.x & 31) * E;
#pragma unroll
    for (int e = 0; e < E; e++) out[e] = o[e];
}
#define ATTN_MERGE_KERNEL(NAME, E)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) NAME(float* dst, const float* part, const int* startp,     \
                                                           int heads, int splits, int minchunk) { PROBE_KERNEL();               \
        attnMergeTo<E>(dst, part, startp, heads, splits, minchunk);                                             \
    }
ATTN_MERGE_KERNEL(attn_merge_2, 2)
ATTN_MERGE_KERNEL(attn_merge_4, 4)
ATTN_MERGE_KERNEL(attn_merge_8, 8)
