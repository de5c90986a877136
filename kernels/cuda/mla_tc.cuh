// DeepSeek's latent attention on the bf16 tensor cores (mla_tc), included by
// mla.cu: the same job, grid and partials as mla_partial_576 there.
#pragma once

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
                cpAsync16((uint32_t)__cvta_generic_to_shared(dstb + p * MT_KS + 4 * c),
                          sl[i] >= 0 ? K + sl[i] * MT_DK + 4 * c : K, sl[i] >= 0 ? 16 : 0);
        }
        cpCommit();
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
                make_uint2(packbf(qv[u].x * scale, qv[u].y * scale), packbf(qv[u].z * scale, qv[u].w * scale));
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
        cpWait<0>();
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
                const uint32_t a[4] = {a0, a1, a2, a3};
                mma_bf16(s2[(k0 >> 4) & 1], a, packbf(b0.x, b0.y), packbf(b1.x, b1.y));
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
            uint2 pk = make_uint2(packbf(e[0], e[1]), packbf(e[2], e[3]));
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
                const uint32_t a[4] = {a0, a1, a2, a3};
                const float* vr = kb + (k0 + 2 * t4) * MT_KS + oc + g;
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    const float* v = vr + j * 8;
                    mma_bf16(acc[j], a, packbf(v[0], v[MT_KS]), packbf(v[8 * MT_KS], v[9 * MT_KS]));
                }
            }
        }
    }
    cpWait<0>();
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
