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
// DeepSeek sparse attention first scores every visible position with the
// lightning indexer (dsa_scores) and picks each row's TopK positions
// (dsa_topk); the attention then walks that list instead of 0..pos.
//
// Compiled to compute_90 PTX by `go generate` (mla.go); the PTX is
// committed and embedded.

#include <stdint.h>

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

// ---------------------------------------------------------------- attention on the tensor cores

// mla_tc: mla_partial_576's job (same grid meaning, partials and
// direct output) on the bf16 tensor cores, FlashMLA's shape: the heads of
// a row are the rows of the products, the shared latent rows both K and V.
// A block takes MT_HB heads of one query row and its split's positions in
// tiles of MT_NT, double-buffered in shared memory by cp.async as the
// cache holds them (fp32), rounded to bf16 as fragments are built; q is
// scaled and rounded to bf16 once. Per tile:
//   S = Q·Kᵀ   [MT_HB × MT_NT] over 576: a warp an m16 × n8 tile;
//   softmax    a head's running max and sum, the tile's probabilities as
//              bf16 (P) and each head's rescale factor, through shared memory;
//   O += P·V   [MT_HB × 512]: a warp an m16 × 128 columns (64 accumulators).
// At 8192 positions the CUDA-core kernel ran ~2.3 G multiply-adds a
// DeepSeek-V3 layer a step at ~15 TFLOP/s (155 µs); here they are tensor
// work and the step reads the cache about once (the blocks of a split's
// head groups meet in L2).
#define MT_DK 576
#define MT_DV 512
#define MT_HB 32                 // heads a block (2 m16 tiles)
#define MT_NT 32                 // positions a tile
#define MT_KS (MT_DK + 4)        // fp32 stride of a staged latent row: conflict-free V loads
#define MT_QS (MT_DK + 8)        // bf16 stride of a staged query head: conflict-free A loads
#define MT_SS (MT_NT + 1)        // fp32 stride of a head's scores
#define MT_PS (MT_NT + 8)        // bf16 stride of a head's probabilities
#define MT_SHM (2 * MT_NT * MT_KS * 4 + MT_HB * MT_QS * 2 + MT_HB * MT_SS * 4 + MT_HB * MT_PS * 2 + 3 * MT_HB * 4)

__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ void mma16816bf(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                           uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mtCopy16(float* dst, const float* src, bool valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

extern "C" __global__ void __launch_bounds__(256, 1) mla_tc(MLA_PARTIAL_ARGS) {
    extern __shared__ __align__(16) float msm[];
    float* kt = msm;                                                     // [2][MT_NT][MT_KS]
    unsigned short* qs = (unsigned short*)(kt + 2 * MT_NT * MT_KS);      // [MT_HB][MT_QS] bf16
    float* ss = (float*)(qs + MT_HB * MT_QS);                            // [MT_HB][MT_SS]
    unsigned short* ps = (unsigned short*)(ss + MT_HB * MT_SS);          // [MT_HB][MT_PS] bf16
    float* sm_m = (float*)(ps + MT_HB * MT_PS);                          // running max, sum, rescale a head
    float* sm_l = sm_m + MT_HB;
    float* sm_c = sm_l + MT_HB;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int groups = (heads + MT_HB - 1) / MT_HB;
    const int row = blockIdx.x / groups, h0 = (blockIdx.x % groups) * MT_HB;
    const int splits = gridDim.y;
    const int n = sel ? cnt[row] : *startp + row + 1;
    const int lo = blockIdx.y * chunk, hi = min(lo + chunk, n);
    auto slotOf = [&](int i) -> long {
        int pos = sel ? sel[(long)row * topk + i] : i;
        return (long)table[pos / bs] * bs + pos % bs;
    };
    constexpr int C4 = MT_DK / 4;  // 16-byte chunks a latent row
    // A warp copies rows warp, warp+8, ... of a tile. Their cache slots are
    // loaded first, together: a table load between cp.asyncs (ordered by
    // their memory clobber) would be a round trip each.
    auto issue = [&](int base, int buf) {
        float* dstb = kt + buf * MT_NT * MT_KS;
        long sl[MT_NT / 8];
#pragma unroll
        for (int i = 0; i < MT_NT / 8; i++) {
            const int p = warp + 8 * i;
            sl[i] = base + p < hi ? slotOf(base + p) : -1;
        }
#pragma unroll
        for (int i = 0; i < MT_NT / 8; i++) {
            const int p = warp + 8 * i;
            for (int c = lane; c < C4; c += 32)
                mtCopy16(dstb + p * MT_KS + 4 * c, sl[i] >= 0 ? K + sl[i] * MT_DK + 4 * c : K, sl[i] >= 0);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    if (lo < hi) issue(lo, 0);
    // q, scaled, as bf16 (heads past the last are zero): every thread's
    // loads issued before any is converted.
    {
        constexpr int QV = MT_HB * C4 / 256;
        float4 qv[QV];
#pragma unroll
        for (int u = 0; u < QV; u++) {
            const int e = tid + 256 * u, hh = e / C4, c = (e - hh * C4) * 4, h = h0 + hh;
            qv[u] = h < heads ? *(const float4*)(q + ((long)row * heads + h) * MT_DK + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < QV; u++) {
            const int e = tid + 256 * u, hh = e / C4, c = (e - hh * C4) * 4;
            *(uint2*)(qs + hh * MT_QS + c) =
                make_uint2(bf16x2(qv[u].x * scale, qv[u].y * scale), bf16x2(qv[u].z * scale, qv[u].w * scale));
        }
    }
    if (tid < MT_HB) {
        sm_m[tid] = -INFINITY;
        sm_l[tid] = 0.f;
    }
    const int mg = warp & 1;                 // the warp's 16 heads
    const int sn = (warp >> 1) * 8;          // its 8 positions of S
    const int oc = (warp >> 1) * 128;        // its 128 columns of O
    float acc[16][4];
#pragma unroll
    for (int j = 0; j < 16; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    int buf = 0;
    for (int base = lo; base < hi; base += MT_NT, buf ^= 1) {
        const int np = min(MT_NT, hi - base);
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();  // the tile (and q) staged; the last tile's P read
        if (base + MT_NT < hi) issue(base + MT_NT, buf ^ 1);
        const float* kb = kt + buf * MT_NT * MT_KS;
        // S = Q·Kᵀ: rows mg*16.., positions sn..sn+7.
        {
            // Two accumulators (even and odd steps of 16): half the chain of
            // dependent mmas.
            float s2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            const unsigned short* qa = qs + (mg * 16 + g) * MT_QS + 2 * t4;
            const float* kr = kb + (sn + g) * MT_KS + 2 * t4;
#pragma unroll 6
            for (int k0 = 0; k0 < MT_DK; k0 += 16) {
                uint32_t a0 = *(const uint32_t*)(qa + k0), a1 = *(const uint32_t*)(qa + 8 * MT_QS + k0);
                uint32_t a2 = *(const uint32_t*)(qa + k0 + 8), a3 = *(const uint32_t*)(qa + 8 * MT_QS + k0 + 8);
                float2 b0 = *(const float2*)(kr + k0), b1 = *(const float2*)(kr + k0 + 8);
                mma16816bf(s2[(k0 >> 4) & 1], a0, a1, a2, a3, bf16x2(b0.x, b0.y), bf16x2(b1.x, b1.y));
            }
            float s[4];
#pragma unroll
            for (int i = 0; i < 4; i++) s[i] = s2[0][i] + s2[1][i];
            float* sr = ss + (mg * 16 + g) * MT_SS + sn + 2 * t4;
            sr[0] = s[0];
            sr[1] = s[1];
            sr[8 * MT_SS] = s[2];
            sr[8 * MT_SS + 1] = s[3];
        }
        __syncthreads();
        // Softmax of the tile: 8 threads a head, 4 positions each.
        {
            const int hh = tid >> 3, j0 = (tid & 7) * 4;
            float v[4], mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                v[i] = j0 + i < np ? ss[hh * MT_SS + j0 + i] : -INFINITY;
                mx = fmaxf(mx, v[i]);
            }
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mo = sm_m[hh], mn = fmaxf(mo, mx);
            float sum = 0.f, e[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                e[i] = expf(v[i] - mn);  // 0 for the positions past the tile's
                sum += e[i];
            }
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            uint2 pk = make_uint2(bf16x2(e[0], e[1]), bf16x2(e[2], e[3]));
            *(uint2*)(ps + hh * MT_PS + j0) = pk;
            __syncwarp();
            if ((tid & 7) == 0) {
                const float c = expf(mo - mn);
                sm_c[hh] = c;
                sm_l[hh] = sm_l[hh] * c + sum;
                sm_m[hh] = mn;
            }
        }
        __syncthreads();
        // O = O·c + P·V: rows mg*16.., columns oc..oc+127.
        {
            const float c0 = sm_c[mg * 16 + g], c1 = sm_c[mg * 16 + g + 8];
#pragma unroll
            for (int j = 0; j < 16; j++) {
                acc[j][0] *= c0;
                acc[j][1] *= c0;
                acc[j][2] *= c1;
                acc[j][3] *= c1;
            }
            const unsigned short* pa = ps + (mg * 16 + g) * MT_PS + 2 * t4;
#pragma unroll
            for (int k0 = 0; k0 < MT_NT; k0 += 16) {
                uint32_t a0 = *(const uint32_t*)(pa + k0), a1 = *(const uint32_t*)(pa + 8 * MT_PS + k0);
                uint32_t a2 = *(const uint32_t*)(pa + k0 + 8), a3 = *(const uint32_t*)(pa + 8 * MT_PS + k0 + 8);
                const float* vr = kb + (k0 + 2 * t4) * MT_KS + oc + g;
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    const float* v = vr + j * 8;
                    mma16816bf(acc[j], a0, a1, a2, a3, bf16x2(v[0], v[MT_KS]), bf16x2(v[8 * MT_KS], v[9 * MT_KS]));
                }
            }
        }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();  // the last tile's m and l
    // Rows g and g+8 of the warp's heads; columns oc + 8j + 2t4.
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int hh = mg * 16 + g + 8 * half, h = h0 + hh;
        if (h >= heads) continue;
        const float m = sm_m[hh], l = sm_l[hh];
        if (splits == 1) {
            const float inv = 1.f / l;
            float* o = dst + ((long)row * heads + h) * MT_DV + oc + 2 * t4;
#pragma unroll
            for (int j = 0; j < 16; j++)
                *(float2*)(o + 8 * j) = make_float2(acc[j][2 * half] * inv, acc[j][2 * half + 1] * inv);
            continue;
        }
        float* out = part + (((long)row * heads + h) * splits + blockIdx.y) * (MT_DV + 2);
#pragma unroll
        for (int j = 0; j < 16; j++)  // (MT_DV + 2) floats a partial: 8-byte aligned pairs
            *(float2*)(out + oc + 8 * j + 2 * t4) = make_float2(acc[j][2 * half], acc[j][2 * half + 1]);
        if (oc == 0 && t4 == 0) {
            out[MT_DV] = m;
            out[MT_DV + 1] = l;
        }
    }
}

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

// ---------------------------------------------------------------- DSA scores

#define DQMAX 8192  // indexer Heads*Dim held in shared memory (V3.2: 64×128)
#define DREG 8      // Dim ≤ 256
#define DTILE 64    // positions per block

// scores[row*stride + t] for t < start+rows: Σ_h W[row,h]·relu(Scale·Q[row,h]·key_t)
// for visible t (≤ start+row), -inf for the later positions of the pass
// (the reference's masked [rows, context] matrix). One warp per position;
// the heads are summed in order, each term only when positive, as on the
// CPU. Blocks: rows × tiles of DTILE positions (x = row*tiles + tile).
extern "C" __global__ void __launch_bounds__(256)
    dsa_scores(float* scores, const float* Q, const float* W, const float* keys, const int* table, const int* startp,
               int rows, int heads, int dim, int bs, int tiles, long stride, float scale) {
    __shared__ float qs[DQMAX];
    int row = blockIdx.x / tiles, t0 = (blockIdx.x % tiles) * DTILE;
    int start = *startp, n = start + row + 1, nc = start + rows;
    if (t0 >= nc) return;  // capture-time grids cover the whole table
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* qr = Q + (long)row * heads * dim;
    for (int i = threadIdx.x; i < heads * dim; i += blockDim.x) qs[i] = qr[i];
    __syncthreads();
    const float* wr = W + (long)row * heads;
    for (int t = t0 + warp; t < min(t0 + DTILE, nc); t += blockDim.x >> 5) {
        float sc = -INFINITY;
        if (t < n) {
            long slot = (long)table[t / bs] * bs + t % bs;
            const float* kp = keys + slot * dim;
            float kv[DREG];
#pragma unroll
            for (int i = 0; i < DREG; i++) {
                int d = lane + 32 * i;
                kv[i] = d < dim ? kp[d] : 0.f;
            }
            sc = 0.f;
            for (int hh = 0; hh < heads; hh++) {
                float dot = 0.f;
#pragma unroll
                for (int i = 0; i < DREG; i++) {
                    int d = lane + 32 * i;
                    if (d < dim) dot += qs[hh * dim + d] * kv[i];
                }
                float x = warpSum(dot) * scale;
                if (x > 0) sc = __fadd_rn(sc, __fmul_rn(wr[hh], x));  // unfused, as on the CPU
            }
        }
        if (lane == 0) scores[(long)row * stride + t] = sc;
    }
}

// dsa_scores_tc: the same scores for prompt passes on the tensor cores.
// The indexer's products are a GEMM per (row, head) × position, 3·10⁷
// multiply-adds a row at 8192 positions, which one warp a position ran at
// ~1.2 TFLOP/s (124 ms a V3.2 layer at 8192 tokens, two thirds of the
// prefill). Here a block takes DS_ROWS rows (M = rows × DS_HMAX heads, 16 a
// warp) against DS_CH tiles of DS_PT positions (N), K = dim, on mma.sync
// m16n8k8 tf32 in three products (3xTF32: a = a_hi + a_lo, b likewise;
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi), which keeps the dot products to
// fp32's accuracy, so the top-k picks what the fp32 reference picks (a
// single tf32 product is ~10⁻³ off, enough to move the boundary). The
// ReLU'd, scaled terms go through shared memory, and one thread a (row,
// position) sums its heads in order, each term only when positive, as on
// the CPU. Positions after a row's own are not written (dsa_topk reads
// them as -inf) and rows that keep every position (n ≤ topk) are skipped.
// dim a multiple of 8 up to DS_DMAX, heads ≤ DS_HMAX.
#define DS_ROWS 2
#define DS_HMAX 64
#define DS_PT 64
#define DS_CH 8
#define DS_DMAX 128
#define DS_QS (DS_DMAX + 4)  // padded stride of a staged head or key: conflict-free fragment loads
#define DS_XS (DS_PT + 8)    // padded stride of a staged term row: conflict-free float2 stores
#define DS_KREGION (DS_PT * DS_QS > DS_ROWS * DS_HMAX * DS_XS ? DS_PT * DS_QS : DS_ROWS * DS_HMAX * DS_XS)
#define DS_SHM ((DS_ROWS * DS_HMAX * DS_QS + DS_KREGION + DS_ROWS * DS_HMAX) * 4)

__device__ __forceinline__ void tf32Split(float f, uint32_t& hi, uint32_t& lo) {
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(f));
    float r = f - __uint_as_float(hi);
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(r));
}

__device__ __forceinline__ void mma1688(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Grid: ceil(rows / DS_ROWS) × chunks (x = pair*chunks + chunk), chunk c
// covering positions [c·DS_CH·DS_PT, (c+1)·DS_CH·DS_PT); 256 threads.
extern "C" __global__ void __launch_bounds__(256, 2)
    dsa_scores_tc(float* scores, const float* Q, const float* W, const float* keys, const int* table, const int* startp,
                  int rows, int heads, int dim, int bs, int chunks, long stride, float scale, int topk) {
    extern __shared__ float sm[];
    float* qs = sm;                                // [DS_ROWS][DS_HMAX][DS_QS]
    float* ks = qs + DS_ROWS * DS_HMAX * DS_QS;    // [DS_PT][DS_QS]; then the terms [DS_ROWS][DS_HMAX][DS_XS]
    float* ws = ks + DS_KREGION;                   // [DS_ROWS][DS_HMAX]
    const int r0 = (blockIdx.x / chunks) * DS_ROWS, t0 = (blockIdx.x % chunks) * DS_CH * DS_PT;
    const int start = *startp, nMax = start + min(r0 + DS_ROWS, rows);  // the block's last row sees t < nMax
    if (nMax <= topk || t0 >= nMax) return;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int d4 = dim >> 2;
    for (int i = tid; i < DS_ROWS * DS_HMAX * d4; i += blockDim.x) {
        int rh = i / d4, c = (i % d4) * 4, r = rh / DS_HMAX, h = rh % DS_HMAX;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + r < rows && h < heads) v = *(const float4*)(Q + ((long)(r0 + r) * heads + h) * dim + c);
        *(float4*)(qs + rh * DS_QS + c) = v;
    }
    for (int i = tid; i < DS_ROWS * DS_HMAX; i += blockDim.x) {
        int r = i / DS_HMAX, h = i % DS_HMAX;
        ws[i] = r0 + r < rows && h < heads ? W[(long)(r0 + r) * heads + h] : 0.f;
    }
    const int mw = warp & 3, rw = warp >> 2;  // the warp's 16 heads and row
    const bool active = mw * 16 < heads && r0 + rw < rows;
    const float* qa = qs + (rw * DS_HMAX + mw * 16) * DS_QS;
    for (int c = 0; c < DS_CH; c++) {
        const int tb = t0 + c * DS_PT;
        if (tb >= nMax) break;
        __syncthreads();  // q staged; the last tile's terms read
        for (int i = tid; i < DS_PT * d4; i += blockDim.x) {
            int p = i / d4, e = (i % d4) * 4, t = tb + p;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (t < nMax) v = *(const float4*)(keys + ((long)table[t / bs] * bs + t % bs) * dim + e);
            *(float4*)(ks + p * DS_QS + e) = v;
        }
        __syncthreads();
        float acc[DS_PT / 8][4];
#pragma unroll
        for (int j = 0; j < DS_PT / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        if (active) {
            for (int k0 = 0; k0 < dim; k0 += 8) {
                uint32_t ah[4], al[4];
                tf32Split(qa[g * DS_QS + k0 + t4], ah[0], al[0]);
                tf32Split(qa[(g + 8) * DS_QS + k0 + t4], ah[1], al[1]);
                tf32Split(qa[g * DS_QS + k0 + t4 + 4], ah[2], al[2]);
                tf32Split(qa[(g + 8) * DS_QS + k0 + t4 + 4], ah[3], al[3]);
#pragma unroll
                for (int j = 0; j < DS_PT / 8; j++) {
                    uint32_t bh0, bl0, bh1, bl1;
                    tf32Split(ks[(j * 8 + g) * DS_QS + k0 + t4], bh0, bl0);
                    tf32Split(ks[(j * 8 + g) * DS_QS + k0 + t4 + 4], bh1, bl1);
                    mma1688(acc[j], al, bh0, bh1);
                    mma1688(acc[j], ah, bl0, bl1);
                    mma1688(acc[j], ah, bh0, bh1);
                }
            }
        }
        __syncthreads();  // the keys are used: the terms take their place
        float* xs = ks;
        if (active) {
            float* x0 = xs + (rw * DS_HMAX + mw * 16 + g) * DS_XS + 2 * t4;
#pragma unroll
            for (int j = 0; j < DS_PT / 8; j++) {
                float v[4];
#pragma unroll
                for (int e = 0; e < 4; e++) v[e] = acc[j][e] * scale;
                *(float2*)(x0 + j * 8) = make_float2(v[0], v[1]);
                *(float2*)(x0 + 8 * DS_XS + j * 8) = make_float2(v[2], v[3]);
            }
        }
        __syncthreads();
        if (tid < DS_ROWS * DS_PT) {
            const int r = tid / DS_PT, p = tid % DS_PT, row = r0 + r, t = tb + p;
            if (row < rows && t < start + row + 1) {
                const float* x = xs + r * DS_HMAX * DS_XS + p;
                const float* w = ws + r * DS_HMAX;
                float sc = 0.f;
                for (int h = 0; h < heads; h++) {
                    float v = x[h * DS_XS];
                    if (v > 0) sc = __fadd_rn(sc, __fmul_rn(w[h], v));  // unfused, in order, as on the CPU
                }
                scores[(long)row * stride + t] = sc;
            }
        }
    }
}

// ---------------------------------------------------------------- DSA top-k

// Orderable key of a score: unsigned order equals float order, with -0
// folded onto +0 (they compare equal on the CPU).
__device__ __forceinline__ unsigned okey(float v) {
    unsigned u = v == 0.f ? 0u : __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The CPU's exact top-k (kernels/cpu/mla.go topK: libstdc++'s nth_element,
// or its partial_sort heap selection when k*64 <= n, with torch.topk's
// comparator) on one thread, over values v and positions ix in place. It
// only runs when exact ties straddle the selection boundary, the one case
// where which positions win depends on the algorithm; the k best end in
// ix[0..k).
__device__ bool gtv(const float* v, int a, int b) { return v[a] > v[b]; }

__device__ void swp(float* v, int* ix, int a, int b) {
    float t = v[a];
    v[a] = v[b];
    v[b] = t;
    int u = ix[a];
    ix[a] = ix[b];
    ix[b] = u;
}

// libstdc++ __adjust_heap + __push_heap on h = (v, ix)[0..n), the heap top
// being the worst element; the value moving in is (val, vi).
__device__ void adjustHeap(float* v, int* ix, int n, int hole, float val, int vi) {
    int top = hole, child = hole;
    while (child < (n - 1) / 2) {
        child = 2 * (child + 1);
        if (v[child] > v[child - 1]) child--;
        v[hole] = v[child];
        ix[hole] = ix[child];
        hole = child;
    }
    if (n % 2 == 0 && child == (n - 2) / 2) {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        ix[hole] = ix[child - 1];
        hole = child - 1;
    }
    for (int parent = (hole - 1) / 2; hole > top && v[parent] > val; parent = (hole - 1) / 2) {
        v[hole] = v[parent];
        ix[hole] = ix[parent];
        hole = parent;
    }
    v[hole] = val;
    ix[hole] = vi;
}

__device__ void heapSelect(float* v, int* ix, int n, int k) {
    if (k >= 2) {
        for (int parent = (k - 2) / 2;; parent--) {
            adjustHeap(v, ix, k, parent, v[parent], ix[parent]);
            if (parent == 0) break;
        }
    }
    for (int i = k; i < n; i++) {
        if (v[i] > v[0]) {
            float val = v[i];
            int vi = ix[i];
            v[i] = v[0];
            ix[i] = ix[0];
            adjustHeap(v, ix, k, 0, val, vi);
        }
    }
}

__device__ void exactTopK(float* v, int* ix, int n, int k) {
    if (k <= 0 || k >= n) return;
    if ((long)k * 64 <= n) {
        heapSelect(v, ix, n, k);
        return;
    }
    int first = 0, last = n, nth = k - 1;
    for (int depth = 2 * (31 - __clz(n)); last - first > 3; depth--) {
        if (depth == 0) {
            heapSelect(v + first, ix + first, last - first, nth - first + 1);
            swp(v, ix, first, nth);
            return;
        }
        // __unguarded_partition_pivot: median of (first+1, mid, last-1) to first.
        int mid = first + (last - first) / 2;
        int a = first + 1, mm = mid, z = last - 1;
        if (gtv(v, a, mm)) {
            if (gtv(v, mm, z)) swp(v, ix, first, mm);
            else if (gtv(v, a, z)) swp(v, ix, first, z);
            else swp(v, ix, first, a);
        } else if (gtv(v, a, z)) swp(v, ix, first, a);
        else if (gtv(v, mm, z)) swp(v, ix, first, z);
        else swp(v, ix, first, mm);
        int lo = first + 1, hi = last;
        for (;;) {
            while (gtv(v, lo, first)) lo++;
            hi--;
            while (gtv(v, first, hi)) hi--;
            if (lo >= hi) break;
            swp(v, ix, lo, hi);
            lo++;
        }
        if (lo <= nth) first = lo;
        else last = lo;
    }
    // __insertion_sort of what is left.
    for (int i = first + 1; i < last; i++) {
        float val = v[i];
        int vi = ix[i];
        if (val > v[first]) {
            for (int j = i; j > first; j--) {
                v[j] = v[j - 1];
                ix[j] = ix[j - 1];
            }
            v[first] = val;
            ix[first] = vi;
            continue;
        }
        int j = i;
        while (val > v[j - 1]) {
            v[j] = v[j - 1];
            ix[j] = ix[j - 1];
            j--;
        }
        v[j] = val;
        ix[j] = vi;
    }
}

// One block (256 threads) per query row writes the row's attended
// positions, ascending, to sel[row*topk ..] and their count to cnt[row]:
// all of 0..pos when at most topk are visible, else the topk best scores.
// The k-th largest score is found by a 4-pass radix select (8 bits a pass)
// over the visible positions; when the positions at or above it are
// exactly topk (no tie straddles the boundary) they are the answer, else
// the CPU's algorithm decides the ties (exactTopK, one thread). The
// selected positions are marked in flag (aux, reused) and compacted in
// position order by a block-wide scan.
extern "C" __global__ void __launch_bounds__(256)
    dsa_topk(float* scores, int* aux, int* sel, int* cnt, const int* startp, int rows, long stride, int topk) {
    __shared__ unsigned hist[256];
    __shared__ unsigned sPrefix, sMask;
    __shared__ int sNeed, sEq;
    __shared__ int wsum[8];
    __shared__ int sBase;
    int row = blockIdx.x, tid = threadIdx.x;
    int start = *startp, n = start + row + 1, nc = start + rows;
    float* v = scores + (long)row * stride;
    int* flag = aux + (long)row * stride;
    int* out = sel + (long)row * topk;
    if (n <= topk) {
        for (int t = tid; t < n; t += blockDim.x) out[t] = t;
        if (tid == 0) cnt[row] = n;
        return;
    }
    if (tid == 0) {
        sPrefix = 0;
        sMask = 0;
        sNeed = topk;
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[tid] = 0;
        __syncthreads();
        unsigned prefix = sPrefix, mask = sMask;
        for (int t = tid; t < n; t += blockDim.x) {
            unsigned k = okey(v[t]);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int need = sNeed, d = 255;
            for (; d > 0 && (int)hist[d] < need; d--) need -= hist[d];
            sNeed = need;
            sEq = hist[d];
            sPrefix = prefix | ((unsigned)d << shift);
            sMask = mask | (255u << shift);
        }
        __syncthreads();
    }
    unsigned thr = sPrefix;
    bool exact = sNeed == sEq;  // every score equal to the threshold is taken
    if (exact) {
        for (int t = tid; t < nc; t += blockDim.x) flag[t] = t < n && okey(v[t]) >= thr;
    } else {
        // Candidates as the CPU sees them: all start+rows positions, the
        // later ones at -inf (dsa_scores_tc leaves them unwritten), in
        // position order.
        for (int t = n + tid; t < nc; t += blockDim.x) v[t] = -INFINITY;
        __syncthreads();
        if (tid == 0) {
            for (int t = 0; t < nc; t++) flag[t] = t;
            exactTopK(v, flag, nc, topk);
        }
        __syncthreads();
        // flag[0..topk) holds the chosen positions: turn the chosen ones
        // into marks in v (the scores are no longer needed).
        for (int t = tid; t < nc; t += blockDim.x) v[t] = 0.f;
        __syncthreads();
        for (int i = tid; i < topk; i += blockDim.x) v[flag[i]] = 1.f;
        __syncthreads();
        for (int t = tid; t < nc; t += blockDim.x) flag[t] = v[t] != 0.f;
    }
    if (tid == 0) sBase = 0;
    __syncthreads();
    int warp = tid >> 5, lane = tid & 31;
    for (int t0 = 0; t0 < nc; t0 += blockDim.x) {
        int t = t0 + tid;
        bool f = t < nc && flag[t];
        unsigned ballot = __ballot_sync(0xffffffffu, f);
        if (lane == 0) wsum[warp] = __popc(ballot);
        __syncthreads();
        int off = sBase;
        for (int w = 0; w < warp; w++) off += wsum[w];
        off += __popc(ballot & ((1u << lane) - 1));
        if (f && off < topk) out[off] = t;
        __syncthreads();
        if (tid == 0)
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) sBase += wsum[w];
        __syncthreads();
    }
    if (tid == 0) cnt[row] = min(sBase, topk);
}

// ---------------------------------------------------------------- DSA mask

#define DSA_MASK_MAXW 1024  // words a row (contexts ≤ 32768)

// dsa_mask: mask [rows, words] of each row's selected positions (sel/cnt
// of dsa_topk: bit t%32 of word t/32), for the expanded prompt form's
// masked flash kernel (kernels.DSAMask). Block per row, built in shared
// memory.
extern "C" __global__ void __launch_bounds__(256)
    dsa_mask(unsigned* mask, const int* sel, const int* cnt, int topk, int words) {
    __shared__ unsigned m[DSA_MASK_MAXW];
    const int row = blockIdx.x, n = cnt[row];
    const int* s = sel + (long)row * topk;
    for (int w = threadIdx.x; w < words; w += blockDim.x) m[w] = 0u;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int t = s[i];
        atomicOr(&m[t >> 5], 1u << (t & 31));
    }
    __syncthreads();
    for (int w = threadIdx.x; w < words; w += blockDim.x) mask[(long)row * words + w] = m[w];
}
