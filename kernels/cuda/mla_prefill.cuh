// DeepSeek's latent attention for prompt passes, expanded (included by
// kernels.cu after prefill_attn.cuh; the host side and the why are in
// mla_prefill.go and kernels.MLAPrefillOps): the flash kernel attn_prefill
// over keys [nope ; rope] and values read where the model leaves them, so
// nothing is copied into a per-head layout first.
#pragma once

// MLASrc: head h of a launch is head h0+h of `heads`. Its query row r is
// [q[r, h0+h, :DN] ; qpe[r, h0+h, :DR]] (q rows of heads·(DN+DR), as
// q_b_proj makes them; qpe the rotated rope parts), its key at position p
// [kv[p, h, :DN] ; kpe[p, :DR]] and its value kv[p, h, DN:DN+DV] (kv rows
// of hn·(DN+DV): the group's expansion of the latents); dst [rows, heads,
// DV]. DK is DN+DR padded with zero columns to a whole pair of mma
// k-steps (32): the fixtures' 16+8 runs as 32.
// With M, mask [rows, words] (kernels.DSAMask's) holds each query row's
// selected keys, 32 to a word.
template <int DN, int DR, int DV_, bool M = false>
struct MLASrc {
    static constexpr int DK = (DN + DR + 31) / 32 * 32, DV = DV_;
    static constexpr bool MASK = M;
    static_assert(DN % 4 == 0 && DR % 4 == 0 && DV % 16 == 0, "MLA head dims");
    const float *q, *qpe, *kvh, *kpe;
    const uint32_t* mask;
    int start, heads, hq, words;
    long kvw;
    __device__ __forceinline__ MLASrc(const float* q_, const float* qpe_, const float* kv, const float* kpe_,
                                      int start_, int heads_, int h0, int hn, int h, const uint32_t* mask_ = nullptr,
                                      int words_ = 0)
        : q(q_), qpe(qpe_), kvh(kv + (long)h * (DN + DV)), kpe(kpe_), mask(mask_), start(start_), heads(heads_),
          hq(h0 + h), words(words_), kvw((long)hn * (DN + DV)) {}
    __device__ __forceinline__ uint64_t selected64(int row, int k0) const {
        const uint32_t* w = mask + (long)row * words + (k0 >> 5);
        uint64_t lo = __ldg(w), hi = (k0 >> 5) + 1 < words ? __ldg(w + 1) : 0u;
        return lo | hi << 32;
    }
    __device__ __forceinline__ long rowOff(int p, int end) const { return p < end ? (long)p : -1L; }
    __device__ __forceinline__ float4 k4(long p, int c) const {
        if (c < DN) return *(const float4*)(kvh + p * kvw + c);
        if (c < DN + DR) return *(const float4*)(kpe + p * DR + (c - DN));
        return make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __device__ __forceinline__ float4 v4(long p, int c) const { return *(const float4*)(kvh + p * kvw + DN + c); }
    __device__ __forceinline__ float2 q2(int row, int, int c) const {
        long ri = (long)row * heads + hq;
        if (c < DN) return *(const float2*)(q + ri * (DN + DR) + c);
        if (c < DN + DR) return *(const float2*)(qpe + ri * DR + (c - DN));
        return make_float2(0.f, 0.f);
    }
    __device__ __forceinline__ long outRow(int row, int) const { return (long)row * heads + hq; }
};

// attn_prefill_mla_*: grid (query tiles of 64, hn heads), 128 threads.
#define ATTN_PREFILL_MLA(NAME, DN, DR, DV, OCC, LU)                                                            \
    extern "C" __global__ void __launch_bounds__(128, OCC)                                                     \
        NAME(float* dst, const float* q, const float* qpe, const float* kv, const float* kpe, int rows, int start, \
             int heads, int h0, int hn, float scale) {                                                         \
        attn_prefill<LU, false, 64>(MLASrc<DN, DR, DV>(q, qpe, kv, kpe, start, heads, h0, hn, blockIdx.y), dst, \
                                    rows, scale, nullptr, nullptr, 1, nullptr);                                \
    }
// DeepSeek-V3/V3.2's 128 + 64 and 128; the test fixtures' 16 + 8 and 16.
ATTN_PREFILL_MLA(attn_prefill_mla_192, 128, 64, 128, 2, 4)
ATTN_PREFILL_MLA(attn_prefill_mla_24, 16, 8, 16, 3, 2)

// attn_prefill_mla_*m: the same under a DSA mask (mask, words: MLASrc).
#define ATTN_PREFILL_MLA_MASK(NAME, DN, DR, DV, OCC, LU)                                                       \
    extern "C" __global__ void __launch_bounds__(128, OCC)                                                     \
        NAME(float* dst, const float* q, const float* qpe, const float* kv, const float* kpe, int rows, int start, \
             int heads, int h0, int hn, float scale, const uint32_t* mask, int words) {                         \
        attn_prefill<LU, false, 64>(                                                                           \
            MLASrc<DN, DR, DV, true>(q, qpe, kv, kpe, start, heads, h0, hn, blockIdx.y, mask, words), dst, rows,  \
            scale, nullptr, nullptr, 1, nullptr);                                                              \
    }
ATTN_PREFILL_MLA_MASK(attn_prefill_mla_192m, 128, 64, 128, 2, 4)
ATTN_PREFILL_MLA_MASK(attn_prefill_mla_24m, 16, 8, 16, 3, 2)

// kv_read_cols: dst [n, width] = columns [lo, lo+width) of the K rows of
// positions 0..n-1 (slot of p: table[p/bs]·bs + p%bs; rows of kw floats).
// Grid (n), threads over the columns.
extern "C" __global__ void kv_read_cols(float* dst, const float* K, const int* table, int bs, int kw, int lo,
                                        int width) {
    const int p = blockIdx.x;
    const float* src = K + ((long)table[p / bs] * bs + p % bs) * kw + lo;
    for (int c = threadIdx.x; c < width; c += blockDim.x) dst[(long)p * width + c] = src[c];
}
