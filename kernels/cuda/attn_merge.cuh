// The merge of the decode attention's split partials, for a kernel other
// than the attention (POCKET_ATTN_DEFER): attn_merge_E (decode.cu) writes
// the heads' outputs, qx_merge (quant_mmv.cuh) rounds them to int8 for
// a block-format o projection. Timing probes on an H200 priced the
// attention's own last-split merge (a threadfence, the counter's atomic,
// then the partials' loads, each a dependent round trip at the end of the
// attention) at 2.7 µs a layer on Qwen3-8B Q4_K_M and 4.3 on Llama-3-8B.
// Here the partials' loads are the successor's first and only round trip.
//
// The deferred partials' layout: the accumulators of head h, split s at
// part[(h·splits + s)·HD], so that a lane's E of them are one or two
// vector loads; then, after all heads' accumulators, each split's max
// and sum as a pair. The split count is re-derived from the device-side
// context exactly as attnDecode does.
#pragma once

// attnSplits is attnDecode's number of non-empty splits.
__device__ __forceinline__ int attnSplits(const int* startp, int splits, int minchunk, int P) {
    const int ctx = *startp + 1;
    const int chunk = (max((ctx + splits - 1) / splits, minchunk) + P - 1) / P * P;
    return (ctx + chunk - 1) / chunk;
}

// ldv loads a lane's E consecutive floats (16-byte aligned for E ≥ 4),
// bypassing L1 (the partials were written by another grid). Volatile asm,
// so that nvcc keeps them ahead of the shuffles in program order (it had
// sunk them next to their uses: 40 registers, a few loads in flight).
template <int E>
__device__ __forceinline__ void ldv(float (&a)[E], const float* p) {
    if (E == 2) {
        asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(a[0]), "=f"(a[1]) : "l"(p));
    } else {
#pragma unroll
        for (int i = 0; i < E / 4; i++)
            asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"
                         : "=f"(a[4 * i]), "=f"(a[4 * i + 1]), "=f"(a[4 * i + 2]), "=f"(a[4 * i + 3])
                         : "l"(p + 4 * i));
    }
}

// attnPartialStore is a split's partial for head h in that layout.
template <int E>
__device__ __forceinline__ void attnPartialStore(float* part, const float (&acc)[E], float m, float l, int h, int heads,
                                                 int splits, int split) {
    constexpr int HD = 32 * E;
    const int lane = threadIdx.x & 31;
    float* pa = part + ((long)h * splits + split) * HD + lane * E;
#pragma unroll
    for (int e = 0; e < E; e++) pa[e] = acc[e];
    if (lane == 0) {
        float* pm = part + (long)heads * splits * HD + ((long)h * splits + split) * 2;
        pm[0] = m;
        pm[1] = l;
    }
}

// attnMergeBatch folds splits [s0, s0+B) ∩ [s0, to) of a head into a
// lane's E unnormalised accumulators o with their max M and sum L (pa:
// the lane's accumulators of split 0, pm: split 0's max and sum). Lane
// j < B loads split j's max and sum, every lane its accumulators of all B
// splits, all in flight together (one round trip); the weights are then
// broadcast by shuffles.
template <int E, int B>
__device__ __forceinline__ void attnMergeBatch(float (&o)[E], float& M, float& L, const float* pa, const float* pm,
                                               int s0, int to) {
    constexpr int HD = 32 * E;
    const int lane = threadIdx.x & 31;
    const int sj = s0 + (lane & (B - 1));
    const bool mine = lane < B && sj < to;
    // Every lane loads a split's max and sum (splits past the range
    // the last one again, weight 0): no branch, so that these and the
    // B accumulator loads are in flight together.
    float ml[2];
    ldv<2>(ml, pm + 2 * min(sj, to - 1));
    float a[B][E];
#pragma unroll
    for (int j = 0; j < B; j++) ldv<E>(a[j], pa + (long)min(s0 + j, to - 1) * HD);
    // ptxas sinks loads next to their uses (volatile asm only fixes
    // nvcc's order); a warp barrier keeps them all issued here.
    __syncwarp();
    const float m = mine ? ml[0] : -INFINITY, l = mine ? ml[1] : 0.f;
    float nM = m;
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) nM = fmaxf(nM, __shfl_xor_sync(0xffffffffu, nM, k));
    nM = fmaxf(nM, M);
    const float c = expf(M - nM); // 0 on the first batch (M = -inf)
    const float w = mine ? expf(m - nM) : 0.f;
    float lb = w * l;
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) lb += __shfl_xor_sync(0xffffffffu, lb, k);
    L = fmaf(L, c, lb);
#pragma unroll
    for (int e = 0; e < E; e++) o[e] *= c;
#pragma unroll
    for (int j = 0; j < B; j++) {
        const float wj = __shfl_sync(0xffffffffu, w, j);
#pragma unroll
        for (int e = 0; e < E; e++) o[e] = fmaf(wj, a[j][e], o[e]);
    }
    M = nM;
}

// attnMergePart folds splits [from, to) of head h into a lane's E
// unnormalised accumulators o, with their max M and sum L (M = -inf, L =
// 0 for an empty range): one warp, a round trip for each batch of up to
// sixteen splits, or thirty-two where a head's accumulators are at most
// four a lane (128 registers of loads in flight; the attention's own K/V
// batch registers are dead by then). More splits are folded in online.
// Llama-3-8B at 576 positions has 18 splits (a TP2 rank 36): a round trip
// fewer at the end of every attention layer.
template <int E>
__device__ __forceinline__ void attnMergePart(float (&o)[E], float& M, float& L, const float* part, int h, int heads,
                                              int splits, int from, int to) {
    constexpr int HD = 32 * E;
    const int lane = threadIdx.x & 31;
    const float* pa = part + (long)h * splits * HD + lane * E;
    const float* pm = part + (long)heads * splits * HD + (long)h * splits * 2;
    M = -INFINITY;
    L = 0.f;
#pragma unroll
    for (int e = 0; e < E; e++) o[e] = 0.f;
    constexpr int WIDE = E <= 4 ? 32 : 16; // splits a round trip where more than 16 remain
    for (int s0 = from; s0 < to;) {
        if (WIDE > 16 && to - s0 > 16) {
            attnMergeBatch<E, WIDE>(o, M, L, pa, pm, s0, to);
            s0 += WIDE;
        } else {
            attnMergeBatch<E, 16>(o, M, L, pa, pm, s0, to);
            s0 += 16;
        }
    }
}

// attnMerge leaves in o a lane's E elements of head h's output from its
// nsplit partials (attnMergePart over all of them, normalised).
template <int E>
__device__ __forceinline__ void attnMerge(float (&o)[E], const float* part, int h, int heads, int splits, int nsplit) {
    float M, L;
    attnMergePart<E>(o, M, L, part, h, heads, splits, 0, nsplit);
    const float inv = 1.f / L;
#pragma unroll
    for (int e = 0; e < E; e++) o[e] *= inv;
}
