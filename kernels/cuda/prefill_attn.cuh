// Prefill attention of the CUDA backend (included by kernels.cu, one
// module): flash attention on the bf16 tensor cores (mma.sync m16n8k16)
// with GQA, causal masking of diagonal tiles only, the context optionally
// split across blocks and merged by attn_merge.
#pragma once

// Flash-style causal prefill attention with GQA: block (64-query tile,
// head), 4 warps of 16 query rows; K/V tiles of 64 positions go through
// shared memory as bf16, S = QKᵀ and O += PV on the tensor
// cores (mma.sync m16n8k16 bf16, fp32 accumulation; V's fragments by
// ldmatrix.trans), online softmax in fp32 registers. Heavier (later) query
// tiles start first.
//
// A few query tiles over a long context (an append to a long session)
// would leave most SMs idle, each block walking thousands of keys: there
// the context is cut into `splits` ranges of whole key tiles (block x =
// split·tiles + tile), each block writes its rows' normalised partial
// output and (max, sum) to part/ml, and attn_merge combines them.
// LU: K and V float4 loads in flight per thread while a tile is staged
// (8 only where the registers allow it without spilling). QS: the query
// fragments live in shared memory (ldmatrix per k-step pair, each tile)
// instead of 32 registers, which buys either 8 loads in flight or a
// fourth block per SM.
//
// BKV: key positions per tile. Head dim 256 (Qwen3.5 / Qwen3-Next's
// gated attention) takes tiles of 32: two 64×264 bf16 tiles would pass
// the 48 KiB of static shared memory, and its 16 query fragments and 32
// output fragments already hold ~190 registers a thread.
//
// Src says where the query, key and value elements live (DK and DV are
// its key and value head dims): PoolSrc is the paged KV cache (dk == dv),
// MLASrc the expanded latent attention of a prompt (mla_prefill.cuh).
// Src::start is the first query row's position; rowOff(p, end) a key
// position's row handle (-1 past end), k4/v4 four key/value elements of a
// row from column c, q2 two query elements, out a query row's output.
// With Src::MASK, selected64(row, k0) has bit j set when the row attends
// to key k0+j (k0 a multiple of 64; the causal limit applies as well).

// PoolSrc: q [rows, heads, D]; K and V rows of the paged cache (slot s of
// position p is table[p/bs]·bs + p%bs; elements of type KT, kv_elem.cuh),
// kvh heads of D each; dst [rows, heads, D].
template <int D, class KT = float>
struct PoolSrc {
    static constexpr int DK = D, DV = D;
    static constexpr bool MASK = false;
    __device__ __forceinline__ uint64_t selected64(int, int) const { return ~0ull; }
    const float* q;
    const KT *Kh, *Vh;
    const int* table;
    int start, heads, bs;
    long kw;
    __device__ __forceinline__ PoolSrc(const float* q_, const KT* K, const KT* V, const int* table_,
                                       const int* startp, int heads_, int kvh, int bs_, int h)
        : q(q_), table(table_), start(*startp), heads(heads_), bs(bs_), kw((long)kvh * D) {
        int kh = h / (heads / kvh);
        Kh = K + (long)kh * D;
        Vh = V + (long)kh * D;
    }
    __device__ __forceinline__ long rowOff(int p, int end) const {
        return p < end ? ((long)table[p / bs] * bs + p % bs) * kw : -1L;
    }
    __device__ __forceinline__ float4 k4(long off, int c) const { return kvLd4(Kh + off + c); }
    __device__ __forceinline__ float4 v4(long off, int c) const { return kvLd4(Vh + off + c); }
    // The same four elements as stored, widened by kvWiden4 (kv_elem.cuh
    // says why the staging loop wants them so).
    using Raw = typename KVRaw4<KT>::type;
    __device__ __forceinline__ Raw k4raw(long off, int c) const { return kvRaw4(Kh + off + c); }
    __device__ __forceinline__ Raw v4raw(long off, int c) const { return kvRaw4(Vh + off + c); }
    __device__ __forceinline__ float2 q2(int row, int h, int c) const {
        return *(const float2*)(q + ((long)row * heads + h) * D + c);
    }
    __device__ __forceinline__ long outRow(int row, int h) const { return (long)row * heads + h; }
};

// stageTile copies a tile's BKV rows of W elements (row handles rowoff,
// -1: zeros) from ld(off, c) into T as bf16, LU float4 loads in flight a
// thread: the staging of attn_prefill when keys and values differ in width.
template <int LU, int BKV, int W, int P, class Ld>
__device__ __forceinline__ void stageTile(__nv_bfloat16 (*T)[P], const long* rowoff, Ld ld) {
    static_assert(BKV * W / 4 % (128 * LU) == 0, "tile not a whole number of load rounds");
#pragma unroll 1
    for (int it = 0; it < BKV * W / 4 / 128; it += LU) {
        float4 v[LU];
#pragma unroll
        for (int u = 0; u < LU; u++) {
            int e = threadIdx.x + (it + u) * 128;
            long off = rowoff[e / (W / 4)];
            v[u] = off >= 0 ? ld(off, (e % (W / 4)) * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < LU; u++) {
            int e = threadIdx.x + (it + u) * 128;
            int r = e / (W / 4), c = (e % (W / 4)) * 4;
            *(uint2*)&T[r][c] = make_uint2(packbf(v[u].x, v[u].y), packbf(v[u].z, v[u].w));
        }
    }
}

template <int LU, bool QS, int BKV, class Src>
__device__ __forceinline__ void attn_prefill(const Src& src, float* __restrict__ dst, int rows, float scale,
                                             float* __restrict__ part, float2* __restrict__ ml, int splits,
                                             uint32_t* __restrict__ bf) {
    constexpr int DK = Src::DK, DV = Src::DV, BQ = 64, KP = DK + 8, VP = DV + 8;
    __shared__ __align__(16) __nv_bfloat16 Ks[BKV][KP];
    __shared__ __align__(16) __nv_bfloat16 Vs[BKV][VP];
    __shared__ long rowoff[BKV];
    const int tiles = gridDim.x / splits, split = blockIdx.x / tiles;
    int tile = tiles - 1 - blockIdx.x % tiles, h = blockIdx.y;
    const int start = src.start;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r0 = tile * BQ + warp * 16;
    const float qs = scale * 1.4426950408889634f; // exp2 domain
    constexpr int QF = QS ? 1 : DK / 16;
    uint32_t qf[QF][4];
    __shared__ __align__(16) __nv_bfloat16 Qs[QS ? BQ : 1][KP];
    if constexpr (QS) {
        // Each warp stages its own 16 rows; only it reads them.
        for (int e = lane; e < 16 * DK / 2; e += 32) {
            int rr = e / (DK / 2), c = (e % (DK / 2)) * 2, row = r0 + rr;
            float2 v = row < rows ? src.q2(row, h, c) : make_float2(0.f, 0.f);
            *(uint32_t*)&Qs[warp * 16 + rr][c] = packbf(v.x * qs, v.y * qs);
        }
        __syncwarp();
    } else {
#pragma unroll
        for (int ks = 0; ks < QF; ks++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = r0 + g + (i & 1) * 8, col = ks * 16 + 2 * t + (i >> 1) * 8;
                float a = 0.f, b = 0.f;
                if (row < rows) {
                    float2 v = src.q2(row, h, col);
                    a = v.x * qs;
                    b = v.y * qs;
                }
                qf[ks][i] = packbf(a, b);
            }
    }
    float o[DV / 8][4];
#pragma unroll
    for (int n = 0; n < DV / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    int qlast = min(tile * BQ + BQ, rows) - 1;
    int ctxEnd = start + qlast + 1;
    // This split's keys: whole tiles of the full context, cut evenly.
    const int chunk = (((start + rows + BKV - 1) / BKV + splits - 1) / splits) * BKV;
    const int kLo = split * chunk;
    ctxEnd = min(ctxEnd, kLo + chunk);
    for (int k0 = kLo; k0 < ctxEnd; k0 += BKV) {
        __syncthreads();
        // Row offsets of the tile's positions (-1 past the context), then
        // K and V rows as bf16, four 16-byte loads in flight per thread.
        if (threadIdx.x < BKV) rowoff[threadIdx.x] = src.rowOff(k0 + threadIdx.x, ctxEnd);
        __syncthreads();
        if constexpr (DK == DV) {
#pragma unroll 1
            for (int it = 0; it < BKV * DK / 4 / 128; it += LU) {
                typename Src::Raw kr[LU], vr[LU];
#pragma unroll
                for (int u = 0; u < LU; u++) {
                    int e = threadIdx.x + (it + u) * 128;
                    int r = e / (DK / 4), c = (e % (DK / 4)) * 4;
                    long off = rowoff[r];
                    kr[u] = vr[u] = typename Src::Raw{};
                    if (off >= 0) {
                        kr[u] = src.k4raw(off, c);
                        vr[u] = src.v4raw(off, c);
                    }
                }
#pragma unroll
                for (int u = 0; u < LU; u++) {
                    int e = threadIdx.x + (it + u) * 128;
                    int r = e / (DK / 4), c = (e % (DK / 4)) * 4;
                    float4 kv = kvWiden4(kr[u]), vv = kvWiden4(vr[u]);
                    *(uint2*)&Ks[r][c] = make_uint2(packbf(kv.x, kv.y), packbf(kv.z, kv.w));
                    *(uint2*)&Vs[r][c] = make_uint2(packbf(vv.x, vv.y), packbf(vv.z, vv.w));
                }
            }
        } else {
            stageTile<LU, BKV, DK, KP>(Ks, rowoff, [&](long off, int c) { return src.k4(off, c); });
            stageTile<LU, BKV, DV, VP>(Vs, rowoff, [&](long off, int c) { return src.v4(off, c); });
        }
        __syncthreads();
        if (r0 >= rows || start + r0 + 15 < k0) continue; // this warp's rows see none of the tile
        // Src::MASK: rows g and g+8's selected keys of the tile; a tile none
        // of the warp's rows selects is skipped.
        uint64_t sel[2] = {~0ull, ~0ull};
        if constexpr (Src::MASK) {
#pragma unroll
            for (int i = 0; i < 2; i++) sel[i] = r0 + g + 8 * i < rows ? src.selected64(r0 + g + 8 * i, k0) : 0ull;
            if (!__any_sync(0xffffffffu, (sel[0] | sel[1]) != 0ull)) continue;
        }
        float s[BKV / 8][4];
#pragma unroll
        for (int n = 0; n < BKV / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        // B = Kᵀ: one ldmatrix.x4 of 8 key rows × 32 dims gives the
        // fragments of two k-steps (lane: matrix lane/8, row lane%8).
#pragma unroll
        for (int ks = 0; ks < DK / 16; ks += 2) {
            uint32_t qa[4], qb[4];
            const uint32_t *fa, *fb;
            if constexpr (QS) {
                // A fragments of k-steps ks, ks+1: matrices (rows 0-7 / 8-15) × (cols 0-7 / 8-15).
                const int qr = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, qc = (lane >> 4) * 8;
                unsigned qa0 = (unsigned)__cvta_generic_to_shared(&Qs[qr][ks * 16 + qc]);
                unsigned qb0 = (unsigned)__cvta_generic_to_shared(&Qs[qr][ks * 16 + 16 + qc]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(qa[0]), "=r"(qa[1]), "=r"(qa[2]), "=r"(qa[3])
                             : "r"(qa0));
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(qb[0]), "=r"(qb[1]), "=r"(qb[2]), "=r"(qb[3])
                             : "r"(qb0));
                fa = qa;
                fb = qb;
            } else {
                fa = qf[QS ? 0 : ks];
                fb = qf[QS ? 0 : ks + 1];
            }
#pragma unroll
            for (int n = 0; n < BKV / 8; n++) {
                uint32_t b[4];
                unsigned addr = (unsigned)__cvta_generic_to_shared(&Ks[n * 8 + (lane & 7)][ks * 16 + (lane >> 3) * 8]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                             : "r"(addr));
                mma_bf16(s[n], fa, b[0], b[1]);
                mma_bf16(s[n], fb, b[2], b[3]);
            }
        }
        // Tiles wholly before the warp's first row need no causal mask
        // (rows past `rows` are never written).
        const bool masked = k0 + BKV - 1 > start + r0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int row = r0 + g + 8 * i;
            int qpos = row < rows ? start + row : -1;
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < BKV / 8; n++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    int col = k0 + n * 8 + 2 * t + j;
                    if (masked && col > qpos) s[n][2 * i + j] = -INFINITY;
                    if constexpr (Src::MASK)
                        if (!((sel[i] >> (n * 8 + 2 * t + j)) & 1)) s[n][2 * i + j] = -INFINITY;
                    mx = fmaxf(mx, s[n][2 * i + j]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mn = fmaxf(m[i], mx);
            float ms = mn == -INFINITY ? 0.f : mn;
            float corr = exp2f(m[i] - ms);
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < BKV / 8; n++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    float p = exp2f(s[n][2 * i + j] - ms);
                    s[n][2 * i + j] = p;
                    sum += p;
                }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l[i] = l[i] * corr + sum;
            m[i] = mn;
#pragma unroll
            for (int n = 0; n < DV / 8; n++) {
                o[n][2 * i] *= corr;
                o[n][2 * i + 1] *= corr;
            }
        }
#pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++) {
            uint32_t a[4] = {packbf(s[2 * kk][0], s[2 * kk][1]), packbf(s[2 * kk][2], s[2 * kk][3]),
                             packbf(s[2 * kk + 1][0], s[2 * kk + 1][1]), packbf(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < DV / 8; n += 2) {
                // B = V[kv][d] (k = kv, n = d): ldmatrix.trans of the
                // row-major tile; lanes 0-15 give the 16 kv rows' addresses
                // at columns n, lanes 16-31 at columns n+1.
                uint32_t b[4];
                unsigned addr = (unsigned)__cvta_generic_to_shared(&Vs[kk * 16 + (lane & 15)][(n + (lane >> 4)) * 8]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                             : "r"(addr));
                mma_bf16(o[n], a, b[0], b[1]);
                mma_bf16(o[n + 1], a, b[2], b[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int row = r0 + g + 8 * i;
        if (row >= rows) continue;
        // A split past a row's causal end saw no key: l = 0, weight 0.
        float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
        long ri = src.outRow(row, h);
        float* out = dst + ri * DV;
        if (splits > 1) { // (PoolSrc only: its rows are [rows, heads])
            out = part + ((long)split * rows * gridDim.y + ri) * DV;
            if (t == 0) ml[(long)split * rows * gridDim.y + ri] = make_float2(m[i], l[i]);
        }
#pragma unroll
        for (int n = 0; n < DV / 8; n++)
            *(float2*)(out + n * 8 + 2 * t) = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
        if (bf && splits == 1) // the output projection's bf16 input
#pragma unroll
            for (int n = 0; n < DV / 8; n++) bf[(ri * DV + n * 8 + 2 * t) / 2] = packbf(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
    }
}

// attn_merge combines attn_prefill's split partials: block per (row,
// head), thread per output column. The maxima are in the exp2 domain.
extern "C" __global__ void attn_merge(float* dst, const float* part, const float2* ml, int n, int splits, int D,
                                      __nv_bfloat16* bf) {
    const long ri = blockIdx.x;
    float M = -INFINITY;
    for (int z = 0; z < splits; z++) {
        float2 v = ml[z * (long)n + ri];
        if (v.y > 0.f) M = fmaxf(M, v.x);
    }
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float num = 0.f, den = 0.f;
        for (int z = 0; z < splits; z++) {
            float2 v = ml[z * (long)n + ri];
            if (v.y <= 0.f) continue;
            float w = exp2f(v.x - M) * v.y;
            num += w * part[(z * (long)n + ri) * D + c];
            den += w;
        }
        dst[ri * D + c] = num / den;
        if (bf) bf[ri * D + c] = __float2bfloat16_rn(num / den);
    }
}

// Each kernel comes twice: NAME over a float32 cache, NAME_h over a
// float16 one.
#define ATTN_PREFILL_BKT(D, NAME, OCC, LU, QS, BK, KT)                                                         \
    extern "C" __global__ void __launch_bounds__(128, OCC) NAME(                                               \
        float* dst, const float* q, const KT* K, const KT* V, const int* table, const int* startp, int rows,    \
        int heads, int kvh, int bs, float scale, float* part, float2* ml, int splits, uint32_t* bf) {            \
        attn_prefill<LU, QS, BK>(PoolSrc<D, KT>(q, K, V, table, startp, heads, kvh, bs, blockIdx.y), dst, rows,   \
                                 scale, part, ml, splits, bf);                                                   \
    }
#define ATTN_PREFILL_BK(D, NAME, OCC, LU, QS, BK)             \
    ATTN_PREFILL_BKT(D, NAME, OCC, LU, QS, BK, float)         \
    ATTN_PREFILL_BKT(D, NAME##_h, OCC, LU, QS, BK, __half)
#define ATTN_PREFILL(D, NAME, OCC, LU, QS) ATTN_PREFILL_BK(D, NAME, OCC, LU, QS, 64)
// Two occupancies of the D=128 kernel: 3 blocks per SM (a 168-register
// cap, the default) and 2 (POCKET_ATTN_OCC=2).
ATTN_PREFILL(64, attn_prefill_64, 3, 4, false)
ATTN_PREFILL(128, attn_prefill_128, 2, 8, false)
ATTN_PREFILL(128, attn_prefill_128_3, 3, 4, false)
// Query fragments in shared memory: 8 loads in flight at 3 blocks per SM,
// or 4 in flight at 4 blocks per SM (POCKET_ATTN_PREFILL=q3 / q4).
ATTN_PREFILL(128, attn_prefill_128_q3, 3, 8, true)
ATTN_PREFILL(128, attn_prefill_128_q4, 4, 4, true)
// Head dim 256 in tiles of 32 keys, one block per SM.
ATTN_PREFILL_BK(256, attn_prefill_256, 1, 2, false, 32)
