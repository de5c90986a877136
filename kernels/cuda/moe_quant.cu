// Indexed expert GEMVs of the MoE decode path (kernels.MoEOps, moe.go) for
// GGUF block-format experts: the same two launches as moe.cu's bf16/FP8
// kernels (gate+up+SwiGLU for every (row, slot), then down with the
// weighted sum over the slots), reading the blocks where LoadWeight put
// them through the per-layer table of expert addresses. A module of its
// own (moe_quant.go loads it on the first GGUF expert set), so moe.cu's
// module is the same for bf16/FP8 models.
//
// The blocks are decoded in registers by quant_blocks.cuh's sub32, one
// 32-element sub-block at a time, and multiplied by the fp32 activations
// in qdot32's factored form: the exact path of quant.cu's qgemv (no int8
// rounding of the activations), so an expert's dot products are the CPU's
// up to the order of fp32 sums. Gate/up and down each have one format per
// layer (all experts alike); down may differ from gate/up (Q4_K_M files
// store ffn_down_exps in Q6_K or Q5_K), so each kernel is instantiated per
// format and moe.go launches the pair the set needs.
//
// Compiled to compute_90 PTX by `go generate` (moe_quant.go); the PTX is
// committed and embedded.
#include "common.cuh"
#include "moe_common.cuh"
#include "quant_blocks.cuh"

// loadX32 reads 32 activations (16-byte aligned) into registers.
__device__ __forceinline__ void loadX32(const float* p, float (&xv)[32]) {
    const float4* v = (const float4*)p;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float4 t = __ldg(v + j);
        xv[4 * j] = t.x;
        xv[4 * j + 1] = t.y;
        xv[4 * j + 2] = t.z;
        xv[4 * j + 3] = t.w;
    }
}

// subDot is sub-block t of a block-format row times its 32 activations xv
// (half sums sx0, sx1 from xsum16).
template <int F>
__device__ __forceinline__ float subDot(const uint8_t* row, int t, const float (&xv)[32], float sx0, float sx1,
                                        const float* lut) {
    int s;
    const uint8_t* blk = subAddr<F>(row, t, s);
    float q[32], a[2], b[2];
    sub32<F>(blk, s, q, a, b, lut);
    return qdot32<F>(q, a, b, xv, sx0, sx1);
}

// prefetchSub asks L2 for the bytes around sub-block t of a row before any
// of them is decoded, so that all of a lane's DRAM reads are in flight at
// once (qgemv's prefetch; bpt is the bytes per sub-block, rounded down).
template <int F>
__device__ __forceinline__ void prefetchSub(const uint8_t* row, int t) {
    const int bpt = Fmt<F>::BB * 32 / Fmt<F>::BE;
    const uint8_t* p = row + (long)t * bpt;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + bpt));
}

// moeGateupQ: h[r,k,o] = silu(gate_e[o]·x[r]) * (up_e[o]·x[r]) for e the
// k-th expert of row r (0 for a slot that names no expert). Grid
// (ceil(inter/8), rows*K), 8 warps, one output per warp; the lanes stride
// over the row's hidden/32 sub-blocks, decoding gate's and up's sub-block
// t against one load of x. rb: bytes per weight row.
template <int F>
__device__ __forceinline__ void moeGateupQ(float* __restrict__ h, const float* __restrict__ x,
                                           const float* __restrict__ sel, const uint64_t* __restrict__ gp,
                                           const uint64_t* __restrict__ up, int inter, int hidden, int K, int E,
                                           long rb) {
    __shared__ float lutS[16];
    const float* lut = loadLUT<F>(lutS); // a barrier: before any return
    const int r = blockIdx.y / K, k = blockIdx.y % K;
    const int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= inter) return;
    const int e = expertOf(sel, r, K, k, E);
    float g = 0.f, u = 0.f;
    if (e >= 0) {
        const uint8_t* gw = (const uint8_t*)gp[e] + (long)o * rb;
        const uint8_t* uw = (const uint8_t*)up[e] + (long)o * rb;
        const float* xr = x + (long)r * hidden;
        const int nsub = hidden >> 5;
        for (int t = lane; t < nsub; t += 32) {
            prefetchSub<F>(gw, t);
            prefetchSub<F>(uw, t);
        }
        for (int t = lane; t < nsub; t += 32) {
            float xv[32], sx0, sx1;
            loadX32(xr + 32 * t, xv);
            xsum16<F>(xv, sx0, sx1);
            g += subDot<F>(gw, t, xv, sx0, sx1, lut);
            u += subDot<F>(uw, t, xv, sx0, sx1, lut);
        }
        g = warpSum(g);
        u = warpSum(u);
    }
    if (lane == 0) h[((long)r * K + k) * inter + o] = e >= 0 ? silu_mul(g, u) : 0.f;
}

// moeDownQ: y[r,o] = Σ_k w[r,k] · down_e[o,:]·h[r,k,:]. Grid
// (ceil(hidden/8), rows), one output per warp; the lanes walk the K ×
// inter/32 (slot, sub-block) pairs flattened, so all K experts' loads are
// in flight together, and the sum over k is in registers (no atomics:
// deterministic). rb: bytes per down row.
template <int F>
__device__ __forceinline__ void moeDownQ(float* __restrict__ y, const float* __restrict__ h,
                                         const float* __restrict__ sel, const uint64_t* __restrict__ dp, int hidden,
                                         int inter, int K, int E, long rb) {
    __shared__ float lutS[16];
    const float* lut = loadLUT<F>(lutS);
    const int r = blockIdx.y;
    const int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= hidden) return;
    const int nsub = inter >> 5, n = K * nsub;
    const float* ws = sel + (long)r * 2 * K + K;
    for (int j = lane; j < n; j += 32) {
        const int k = j / nsub, t = j - k * nsub;
        const int e = expertOf(sel, r, K, k, E);
        if (e >= 0) prefetchSub<F>((const uint8_t*)dp[e] + (long)o * rb, t);
    }
    float acc = 0.f;
    for (int j = lane; j < n; j += 32) {
        const int k = j / nsub, t = j - k * nsub;
        const int e = expertOf(sel, r, K, k, E);
        if (e < 0) continue;
        float xv[32], sx0, sx1;
        loadX32(h + ((long)r * K + k) * inter + 32 * t, xv);
        xsum16<F>(xv, sx0, sx1);
        acc += ws[k] * subDot<F>((const uint8_t*)dp[e] + (long)o * rb, t, xv, sx0, sx1, lut);
    }
    acc = warpSum(acc);
    if (lane == 0) y[(long)r * hidden + o] = acc;
}

#define MOEQ(F, name)                                                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                                             \
        moe_gateup_##name(float* __restrict__ h, const float* __restrict__ x, const float* __restrict__ sel,       \
                          const uint64_t* __restrict__ gp, const uint64_t* __restrict__ up, int inter, int hidden, \
                          int K, int E, long rb) {                                                                \
        moeGateupQ<F>(h, x, sel, gp, up, inter, hidden, K, E, rb);                                                \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                                             \
        moe_down_##name(float* __restrict__ y, const float* __restrict__ h, const float* __restrict__ sel,         \
                        const uint64_t* __restrict__ dp, int hidden, int inter, int K, int E, long rb) {           \
        moeDownQ<F>(y, h, sel, dp, hidden, inter, K, E, rb);                                                      \
    }

MOEQ(Q8_0, q8_0)
MOEQ(Q4_0, q4_0)
MOEQ(Q4_1, q4_1)
MOEQ(Q5_0, q5_0)
MOEQ(Q5_1, q5_1)
MOEQ(Q2_K, q2_k)
MOEQ(Q3_K, q3_k)
MOEQ(Q4_K, q4_k)
MOEQ(Q5_K, q5_k)
MOEQ(Q6_K, q6_k)
MOEQ(Q6_KG, q6_kg)
MOEQ(Q8_0G, q8_0g)
MOEQ(Q4_KG, q4_kg)
MOEQ(IQ1_S, iq1_s)
MOEQ(IQ1_M, iq1_m)
MOEQ(IQ2_XXS, iq2_xxs)
MOEQ(IQ2_XS, iq2_xs)
MOEQ(IQ2_S, iq2_s)
MOEQ(IQ3_XXS, iq3_xxs)
MOEQ(IQ3_S, iq3_s)
MOEQ(IQ4_NL, iq4_nl)
MOEQ(IQ4_XS, iq4_xs)
MOEQ(MXFP4, mxfp4)
