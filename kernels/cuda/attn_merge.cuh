// The merge of the decode attention's split partials, for a kernel other
// than the attention (POCKET_ATTN_DEFER): attn_merge_E (decode.cu) writes
// the heads' outputs, qx_merge (quant_mmv.cuh) rounds them to int8 for
// a block-format o projection. Timing probes on an H200 priced the
// attention's own last-split merge (a threadfence, the counter's atomic,
// then the partials' loads, each a dependent round trip at the end of the
// attention) at 2.7 µs a layer on Qwen3-8B Q4_K_M and 4.3 on Llama-3-8B.
// Here the partials' loads are the successor's first and only round trip.
//
// The partials' layout is attn_partial's: per head and split, HD
// accumulators, then the split's max and sum. The split count is
// re-derived from the device-side context exactly as attnDecode does.
#pragma once

// attnSplits is attnDecode's number of non-empty splits.
__device__ __forceinline__ int attnSplits(const int* startp, int splits, int minchunk, int P) {
    const int ctx = *startp + 1;
    const int chunk = (max((ctx + splits - 1) / splits, minchunk) + P - 1) / P * P;
    return (ctx + chunk - 1) / chunk;
}

// attnMerge leaves in o a lane's E elements of one head's output from the
// partials ph of its nsplit splits: one warp per head, sixteen splits at a
// time, every lane loading each split's max and sum (broadcast reads)
// with its accumulators, so that up to sixteen splits cost one round trip;
// more are folded in online.
template <int E>
__device__ __forceinline__ void attnMerge(float (&o)[E], const float* ph, int nsplit) {
    constexpr int HD = 32 * E;
    const int lane = threadIdx.x & 31;
    float M = -INFINITY, L = 0.f;
#pragma unroll
    for (int e = 0; e < E; e++) o[e] = 0.f;
    for (int s0 = 0; s0 < nsplit; s0 += 16) {
        float a[16][E], m[16], l[16];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const bool in = s0 + j < nsplit;
            const float* pj = ph + (s0 + j) * (HD + 2);
            m[j] = in ? __ldcg(pj + HD) : -INFINITY;
            l[j] = in ? __ldcg(pj + HD + 1) : 0.f;
#pragma unroll
            for (int e = 0; e < E; e++) a[j][e] = in ? __ldcg(pj + lane * E + e) : 0.f;
        }
        float nM = M;
#pragma unroll
        for (int j = 0; j < 16; j++) nM = fmaxf(nM, m[j]);
        const float c = expf(M - nM); // 0 on the first batch (M = -inf)
        L *= c;
#pragma unroll
        for (int e = 0; e < E; e++) o[e] *= c;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const float w = s0 + j < nsplit ? expf(m[j] - nM) : 0.f;
            L = fmaf(w, l[j], L);
#pragma unroll
            for (int e = 0; e < E; e++) o[e] = fmaf(w, a[j][e], o[e]);
        }
        M = nM;
    }
    const float inv = 1.f / L;
#pragma unroll
    for (int e = 0; e < E; e++) o[e] *= inv;
}
