// Multi-head latent attention kernels of the CUDA backend (mla.go): the
// optional kernels.MLAOps that DeepSeek-V3 and V3.2 need. The CPU backend
// (kernels/cpu/mla.go) is the reference.
//
// Every query head reads the same cached row per position ([latent ;
// rope key], HeadDimK wide, the latent doubling as the value), so a block
// serves MH heads of one query row: each tile of cached rows is loaded
// into shared memory once and scored by one warp per head. Like
// attn_partial/attn_combine in kernels.cu it is split-K flash decoding:
// each block covers a range of the row's positions and writes an
// unnormalised partial (acc, max, sum); mla_combine merges the ranges.
//
// DeepSeek's own dims (576/512) run on the tensor cores instead
// (mla_tc.cuh), with the same partials. DeepSeek sparse attention first
// scores every visible position with the lightning indexer and picks each
// row's TopK positions (dsa.cuh); the attention then walks that list
// instead of 0..pos.
//
// Compiled to compute_90 PTX by `go generate` (mla.go); the PTX is
// committed and embedded.

#include <stdint.h>

#include "tc.cuh"

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---------------------------------------------------------------- attention

#define MH 8        // heads (warps) per block
#define MTILE 8     // cached rows per shared-memory tile
#define MMAXD 1024  // largest HeadDimK (DeepSeek: 576)
#define MREG (MMAXD / 32)
#define MLD (MTILE * MMAXD / 4 / (MH * 32))  // float4s a thread stages of a tile

// part[(row*heads+h)*splits + split][0..dv) = Σ e^{s-m} v, then m, l;
// with one split (long prefill passes) the normalised output goes straight
// to dst instead, and no combine runs. sel/cnt: the DSA position lists (sel[row*topk + i], cnt[row] of them),
// or null for all positions 0..start+row.
//
// DK/DV: the head dims fixed at compile time (DeepSeek's 576/512), or 0
// for the dims of the arguments (any dk ≤ MMAXD: the loops run to MMAXD,
// predicated). HW: heads a warp scores at once, each element of a staged
// row loaded from shared memory once for all of them. With one head a
// warp and runtime dims, the shared-memory loads and the predicated
// loops held the kernel to a third of an issue slot a cycle (ncu, 8192
// positions: 1.32 ms a DeepSeek-V3 layer a decode step).
template <int DK, int DV, int HW>
__device__ __forceinline__ void mlaPartial(float* dst, float* part, const float* q, const float* K, const int* table,
                                           const int* startp, const int* sel, const int* cnt, int heads, int dk,
                                           int dv, int bs, int chunk, int topk, float scale) {
    constexpr int NQ = DK ? DK / 32 : MREG, NA = DK ? DV / 32 : MREG, HB = MH * HW;
    constexpr int LD = DK ? (MTILE * DK / 4 + MH * 32 - 1) / (MH * 32) : MLD;
    static_assert(DK % 32 == 0 && DV % 32 == 0 && DK <= MMAXD, "MLA head dims");
    if (DK) {
        dk = DK;
        dv = DV;
    }
    __shared__ __align__(16) float tile[MTILE * (DK ? DK : MMAXD)];
    int groups = (heads + HB - 1) / HB;
    int row = blockIdx.x / groups, hb = (blockIdx.x % groups) * HB + (threadIdx.x >> 5) * HW;
    int lane = threadIdx.x & 31;
    int splits = gridDim.y;
    int n = sel ? cnt[row] : *startp + row + 1;
    int lo = blockIdx.y * chunk, hi = min(lo + chunk, n);
    float qv[HW][NQ], acc[HW][NA], m[HW], l[HW];
#pragma unroll
    for (int j = 0; j < HW; j++) {
        const int h = hb + j;
        const float* qr = q + ((long)row * heads + (h < heads ? h : 0)) * dk;
#pragma unroll
        for (int i = 0; i < NQ; i++) {
            int d = lane + 32 * i;
            qv[j][i] = DK || d < dk ? qr[d] * scale : 0.f;
        }
#pragma unroll
        for (int i = 0; i < NA; i++) acc[j][i] = 0.f;
        m[j] = -INFINITY;
        l[j] = 0.f;
    }
    // Tiles are staged by the whole block in float4s, every thread's loads
    // of a tile in flight together, and the next tile's loads are issued
    // before the current one is scored (dk % 4 == 0; mla.go checks).
    const int q4 = dk >> 2;
    auto slotOf = [&](int i) -> long {  // cached row of the range's i-th position
        int pos = sel ? sel[(long)row * topk + i] : i;
        return (long)table[pos / bs] * bs + pos % bs;
    };
    float4 nx[LD];
    auto issue = [&](int base) {  // the tile at base into nx
        int np = min(MTILE, hi - base);
#pragma unroll
        for (int u = 0; u < LD; u++) {
            int e = threadIdx.x + u * MH * 32, p = e / q4;
            nx[u] = p < np ? *(const float4*)(K + slotOf(base + p) * dk + 4 * (e - p * q4))
                           : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    if (lo < hi) issue(lo);
    for (int base = lo; base < hi; base += MTILE) {
        int np = min(MTILE, hi - base);
#pragma unroll
        for (int u = 0; u < LD; u++) {
            int e = threadIdx.x + u * MH * 32, p = e / q4;
            if (p < np) *(float4*)&tile[p * dk + 4 * (e - p * q4)] = nx[u];
        }
        __syncthreads();
        if (base + MTILE < hi) issue(base + MTILE);
        for (int p = 0; p < np; p++) {
            const float* kr = tile + p * dk;
            float s[HW];
#pragma unroll
            for (int j = 0; j < HW; j++) s[j] = 0.f;
#pragma unroll
            for (int i = 0; i < NQ; i++) {
                int d = lane + 32 * i;
                if (DK || d < dk) {
                    const float k = kr[d];
#pragma unroll
                    for (int j = 0; j < HW; j++) s[j] += qv[j][i] * k;
                }
            }
            // The heads' warp sums side by side (independent shuffles).
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int j = 0; j < HW; j++) s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
            float corr[HW], e[HW];
#pragma unroll
            for (int j = 0; j < HW; j++) {
                float mn = fmaxf(m[j], s[j]);
                corr[j] = expf(m[j] - mn);
                e[j] = expf(s[j] - mn);
                l[j] = l[j] * corr[j] + e[j];
                m[j] = mn;
            }
#pragma unroll
            for (int i = 0; i < NA; i++) {
                int d = lane + 32 * i;
                if (DK || d < dv) {
                    const float v = kr[d];
#pragma unroll
                    for (int j = 0; j < HW; j++) acc[j][i] = acc[j][i] * corr[j] + e[j] * v;
                }
            }
        }
        __syncthreads();  // the tile is overwritten next
    }
#pragma unroll
    for (int j = 0; j < HW; j++) {
        const int h = hb + j;
        if (h >= heads) continue;
        if (splits == 1) {
            float inv = 1.f / l[j];  // l > 0: position 0 (or the first selected one) is in range
            float* o = dst + ((long)row * heads + h) * dv;
#pragma unroll
            for (int i = 0; i < NA; i++) {
                int d = lane + 32 * i;
                if (DK || d < dv) o[d] = acc[j][i] * inv;
            }
            continue;
        }
        float* out = part + (((long)row * heads + h) * splits + blockIdx.y) * (dv + 2);
#pragma unroll
        for (int i = 0; i < NA; i++) {
            int d = lane + 32 * i;
            if (DK || d < dv) out[d] = acc[j][i];
        }
        if (lane == 0) {
            out[dv] = m[j];
            out[dv + 1] = l[j];
        }
    }
}

#define MLA_PARTIAL_ARGS                                                                                      \
    float *dst, float *part, const float *q, const float *K, const int *table, const int *startp, const int *sel, \
        const int *cnt, int heads, int dk, int dv, int bs, int chunk, int topk, float scale
#define MLA_PARTIAL_CALL(DK, DV, HW) \
    mlaPartial<DK, DV, HW>(dst, part, q, K, table, startp, sel, cnt, heads, dk, dv, bs, chunk, topk, scale)
// mla_partial: any shape, a head a warp (MH heads a block);
// mla_partial_576: DeepSeek's 576/512, MLA_HW heads a warp.
#define MLA_HW 4
extern "C" __global__ void __launch_bounds__(MH * 32) mla_partial(MLA_PARTIAL_ARGS) { MLA_PARTIAL_CALL(0, 0, 1); }
extern "C" __global__ void __launch_bounds__(MH * 32) mla_partial_576(MLA_PARTIAL_ARGS) {
    MLA_PARTIAL_CALL(576, 512, MLA_HW);
}

#include "mla_tc.cuh"

// Merges the splits of one (row, head), as attn_combine: block (row·heads
// + head, column chunk), a column a thread. splits ≤ 256; a split that saw
// no position has m = -inf and weighs nothing (split 0 always holds
// position 0 or the first selected one). The column chunks are what keep
// the GPU busy: one block a head read DeepSeek's partials (128 heads × 132
// splits, 35 MB) at ~530 GB/s.
extern "C" __global__ void mla_combine(float* dst, const float* part, int splits, int dv) {
    __shared__ float fac[256];
    __shared__ float red[32];
    long rh = blockIdx.x;
    const float* p = part + rh * splits * (dv + 2);
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, p[s * (dv + 2) + dv]);
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        float ms = p[s * (dv + 2) + dv];
        fac[s] = ms == -INFINITY ? 0.f : expf(ms - M);
    }
    __syncthreads();
    float L = 0.f;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) L += fac[s] * p[s * (dv + 2) + dv + 1];
    L = warpSum(L);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = L;
    __syncthreads();
    L = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) L += red[w];
    float inv = 1.f / L;
    for (int d = blockIdx.y * blockDim.x + threadIdx.x; d < dv; d += gridDim.y * blockDim.x) {
        float o = 0.f;
#pragma unroll 8
        for (int s = 0; s < splits; s++) o += fac[s] * p[s * (dv + 2) + d];
        dst[rh * dv + d] = o * inv;
    }
}

#include "dsa.cuh"
