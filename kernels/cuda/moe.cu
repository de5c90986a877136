// Mixture-of-experts kernels (kernels.MoEOps): routing on the device and
// SwiGLU experts whose weights are found through the routed ids, so a
// decode step needs no host round trip and can be captured as a graph.
// Compiled to compute_90 PTX (see moe.go's go:generate line); the PTX is
// committed and embedded.
//
// Routing buffer layout (kernels.RouteLen): per row, K expert ids stored
// as exact floats, then their K combine weights.
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "moe_common.cuh"

#define MOE_MAX_EXPERTS 1024
#define MOE_MAX_GROUPS 64
#define MOE_MAX_TOPK 32
#define NO_IDX 0x7fffffff

// better is the selection order of kernels.Router.Route: a higher key,
// ties to the lower index (a stable sort, descending).
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// argmaxWarp leaves the warp's best (bv, bi) of its lanes' in every lane.
__device__ __forceinline__ void argmaxWarp(float& bv, int& bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
}

// ---------------------------------------------------------------- routing
// One block of 256 threads per row. Scores in double rounded to float (as
// the Go reference computes them); the softmax sum is reduced in another
// order than the reference's, which moves it by an ulp of a double at most.
extern "C" __global__ void __launch_bounds__(256) moe_route(float* sel, const float* logits, const float* bias, int E,
                                                            int K, int sigmoid, int normTopK, int groups, int topkGroup,
                                                            float scale) {
    __shared__ float score[MOE_MAX_EXPERTS];
    __shared__ float key[MOE_MAX_EXPERTS];
    __shared__ unsigned char ok[MOE_MAX_EXPERTS];
    __shared__ float gscore[MOE_MAX_GROUPS];
    __shared__ unsigned char gok[MOE_MAX_GROUPS];
    __shared__ int chosen[MOE_MAX_TOPK];
    __shared__ float redF[8];
    __shared__ double redD[8];
    __shared__ int redI[8];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nw = blockDim.x >> 5;
    const float* lg = logits + (long)blockIdx.x * E;

    if (sigmoid) {
        for (int i = tid; i < E; i += blockDim.x) score[i] = (float)(1.0 / (1.0 + exp(-(double)lg[i])));
    } else {
        float m = -INFINITY;
        for (int i = tid; i < E; i += blockDim.x) m = fmaxf(m, lg[i]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) redF[warp] = m;
        __syncthreads();
        m = redF[0];
        for (int w = 1; w < nw; w++) m = fmaxf(m, redF[w]);
        double sum = 0;
        for (int i = tid; i < E; i += blockDim.x) {
            double e = exp((double)(lg[i] - m));
            score[i] = (float)e;
            sum += e;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) redD[warp] = sum;
        __syncthreads();
        sum = 0;
        for (int w = 0; w < nw; w++) sum += redD[w];
        // The reference divides the float-rounded exponential.
        for (int i = tid; i < E; i += blockDim.x) score[i] = (float)((double)score[i] / sum);
    }
    for (int i = tid; i < E; i += blockDim.x) {
        key[i] = bias ? score[i] + bias[i] : score[i];
        ok[i] = 1;
    }
    __syncthreads();

    if (groups > 1) {
        // A group's score is the sum of its two best keys; the best
        // topkGroup groups (ties to the lower group) stay selectable.
        int per = E / groups;
        for (int g = tid; g < groups; g += blockDim.x) {
            float b1 = key[g * per], b2 = -INFINITY;
            for (int i = 1; i < per; i++) {
                float v = key[g * per + i];
                if (v > b1) {
                    b2 = b1;
                    b1 = v;
                } else if (v > b2) {
                    b2 = v;
                }
            }
            gscore[g] = per > 1 ? b1 + b2 : b1;
            gok[g] = 0;
        }
        __syncthreads();
        if (tid == 0) {
            for (int t = 0; t < topkGroup; t++) {
                int bi = NO_IDX;
                float bv = -INFINITY;
                for (int g = 0; g < groups; g++)
                    if (!gok[g] && better(gscore[g], g, bv, bi)) {
                        bv = gscore[g];
                        bi = g;
                    }
                if (bi != NO_IDX) gok[bi] = 1;
            }
        }
        __syncthreads();
        for (int i = tid; i < E; i += blockDim.x) ok[i] = gok[i / per];
        __syncthreads();
    }

    // Top K by repeated block-wide argmax over the selectable keys.
    for (int k = 0; k < K; k++) {
        float bv = -INFINITY;
        int bi = NO_IDX;
        for (int i = tid; i < E; i += blockDim.x)
            if (ok[i] && better(key[i], i, bv, bi)) {
                bv = key[i];
                bi = i;
            }
        argmaxWarp(bv, bi);
        if (lane == 0) {
            redF[warp] = bv;
            redI[warp] = bi;
        }
        __syncthreads();
        if (tid == 0) {
            for (int w = 1; w < nw; w++)
                if (better(redF[w], redI[w], bv, bi)) {
                    bv = redF[w];
                    bi = redI[w];
                }
            // Only NaN keys are left: take the first selectable expert so
            // the ids stay in range.
            if (bi == NO_IDX)
                for (int i = 0; i < E && bi == NO_IDX; i++)
                    if (ok[i]) bi = i;
            if (bi == NO_IDX) bi = 0;
            chosen[k] = bi;
            ok[bi] = 0;
        }
        __syncthreads();
    }

    if (tid == 0) {
        float* out = sel + (long)blockIdx.x * 2 * K;
        float sum = 0.f;
        for (int k = 0; k < K; k++) sum += score[chosen[k]];
        for (int k = 0; k < K; k++) {
            float w = score[chosen[k]];
            if (normTopK && sum > 0.f) w = w / sum;
            out[k] = (float)chosen[k];
            out[K + k] = w * scale;
        }
    }
}

// moe_route_wJ is moe_route for E ≤ 32·J experts and K ≤ 32 in one warp
// per row (moe.go picks it): lane l holds experts l + 32j, j < J, in
// registers; reductions are warp shuffles instead of a block's rounds of
// shared memory and barriers. ncu put moe_route at 7.6 µs for one row,
// and leaving it out of the MiniMax-M2 slice's decode graph saved 17 µs a
// layer. The same selection, ties included: scores in double rounded to
// float, a group's score the sum of its two best keys (the multiset's, in
// any order), top-k by repeated argmax with ties to the lower index, the
// chosen weights summed in selection order. Launched with PDL: the bias
// is read before the wait for the logits.
template <int J>
__device__ __forceinline__ void routeWarp(float* sel, const float* logits, const float* bias, int E, int K,
                                          int sigmoid, int normTopK, int groups, int topkGroup, float scale) {
    __shared__ float gscore[MOE_MAX_GROUPS];
    const int lane = threadIdx.x & 31;
    const float* lg = logits + (long)blockIdx.x * E;
    float b[J];
#pragma unroll
    for (int j = 0; j < J; j++) b[j] = bias != nullptr && lane + 32 * j < E ? bias[lane + 32 * j] : 0.f;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    float score[J], key[J];
    bool ok[J];
#pragma unroll
    for (int j = 0; j < J; j++) {
        ok[j] = lane + 32 * j < E;
        score[j] = ok[j] ? lg[lane + 32 * j] : 0.f;
    }
    if (sigmoid) {
#pragma unroll
        for (int j = 0; j < J; j++) score[j] = (float)(1.0 / (1.0 + exp(-(double)score[j])));
    } else {
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < J; j++)
            if (ok[j]) m = fmaxf(m, score[j]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        double sum = 0;
#pragma unroll
        for (int j = 0; j < J; j++) {
            double e = ok[j] ? exp((double)(score[j] - m)) : 0.0;
            score[j] = (float)e;
            sum += e;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        // The reference divides the float-rounded exponential.
#pragma unroll
        for (int j = 0; j < J; j++) score[j] = (float)((double)score[j] / sum);
    }
#pragma unroll
    for (int j = 0; j < J; j++) key[j] = bias != nullptr ? score[j] + b[j] : score[j];

    if (groups > 1) {
        // Each group's two best keys: the lane's, then the warp's.
        const int per = E / groups;
        for (int g = 0; g < groups; g++) {
            float b1 = -INFINITY, b2 = -INFINITY;
#pragma unroll
            for (int j = 0; j < J; j++) {
                const int i = lane + 32 * j;
                if (ok[j] && i / per == g) {
                    float v = key[j];
                    if (v > b1) {
                        b2 = b1;
                        b1 = v;
                    } else if (v > b2) {
                        b2 = v;
                    }
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                float c1 = __shfl_xor_sync(0xffffffffu, b1, o), c2 = __shfl_xor_sync(0xffffffffu, b2, o);
                b2 = fmaxf(fminf(b1, c1), fmaxf(b2, c2));
                b1 = fmaxf(b1, c1);
            }
            if (lane == 0) gscore[g] = per > 1 ? b1 + b2 : b1;
        }
        __syncwarp();
        // The best topkGroup groups (ties to the lower group), in every lane.
        unsigned long long gok = 0;
        for (int t = 0; t < topkGroup; t++) {
            int bi = NO_IDX;
            float bv = -INFINITY;
            for (int g = 0; g < groups; g++)
                if (!(gok >> g & 1) && better(gscore[g], g, bv, bi)) {
                    bv = gscore[g];
                    bi = g;
                }
            if (bi != NO_IDX) gok |= 1ull << bi;
        }
#pragma unroll
        for (int j = 0; j < J; j++) ok[j] = ok[j] && (gok >> ((lane + 32 * j) / per) & 1);
    }

    // Top K by repeated warp argmax over the selectable keys; lane k keeps
    // the k-th id, every lane the running sum of the chosen scores.
    int mine = 0;
    float mineW = 0.f, sum = 0.f;
    for (int k = 0; k < K; k++) {
        float bv = -INFINITY;
        int bi = NO_IDX;
#pragma unroll
        for (int j = 0; j < J; j++)
            if (ok[j] && better(key[j], lane + 32 * j, bv, bi)) {
                bv = key[j];
                bi = lane + 32 * j;
            }
        argmaxWarp(bv, bi);
        if (bi == NO_IDX) {
            // Only NaN keys are left: the first selectable expert keeps
            // the ids in range (then 0).
            int first = NO_IDX;
#pragma unroll
            for (int j = 0; j < J; j++)
                if (ok[j]) first = min(first, lane + 32 * j);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
            bi = first == NO_IDX ? 0 : first;
        }
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < J; j++)
            if (lane + 32 * j == bi) {
                s = score[j];
                ok[j] = false;
            }
        s = __shfl_sync(0xffffffffu, s, bi & 31);
        sum += s;
        if (lane == k) {
            mine = bi;
            mineW = s;
        }
    }
    if (lane < K) {
        float* out = sel + (long)blockIdx.x * 2 * K;
        float w = mineW;
        if (normTopK && sum > 0.f) w = w / sum;
        out[lane] = (float)mine;
        out[K + lane] = w * scale;
    }
}

#define ROUTE_W(J)                                                                                                  \
    extern "C" __global__ void __launch_bounds__(32) moe_route_w##J(float* sel, const float* logits, const float* bias, \
                                                                    int E, int K, int sigmoid, int normTopK,         \
                                                                    int groups, int topkGroup, float scale) {        \
        routeWarp<J>(sel, logits, bias, E, K, sigmoid, normTopK, groups, topkGroup, scale);                          \
    }
ROUTE_W(2)
ROUTE_W(4)
ROUTE_W(8)
ROUTE_W(16)
ROUTE_W(32)

// ---------------------------------------------------------------- experts
// moe_gateup_*: h[r,k,o] = silu(gate_e·x[r]) * (up_e·x[r]) for e the k-th
// expert of row r. Grid (ceil(inter/8), rows*K), 8 warps, one output per
// warp; the weight rows of gate and up stream together.
extern "C" __global__ void __launch_bounds__(256) moe_gateup_bf16(float* __restrict__ h, const float* __restrict__ x,
                                                                  const float* __restrict__ sel,
                                                                  const uint64_t* __restrict__ gp,
                                                                  const uint64_t* __restrict__ up, int inter,
                                                                  int hidden, int K, int E) {
    int r = blockIdx.y / K, k = blockIdx.y % K;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= inter) return;
    int e = expertOf(sel, r, K, k, E);
    float g = 0.f, u = 0.f;
    if (e >= 0) {
        const uint4* gw = (const uint4*)((const uint16_t*)gp[e] + (long)o * hidden);
        const uint4* uw = (const uint4*)((const uint16_t*)up[e] + (long)o * hidden);
        const float4* xr = (const float4*)(x + (long)r * hidden);
        int chunks = hidden >> 3;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            uint4 a = ldstream(gw + c), b = ldstream(uw + c);
            float4 x0 = __ldg(xr + 2 * c), x1 = __ldg(xr + 2 * c + 1);
            const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            const uint32_t ua[4] = {a.x, a.y, a.z, a.w}, ub[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                g += __uint_as_float(ua[j] << 16) * xv[2 * j] + __uint_as_float(ua[j] & 0xffff0000u) * xv[2 * j + 1];
                u += __uint_as_float(ub[j] << 16) * xv[2 * j] + __uint_as_float(ub[j] & 0xffff0000u) * xv[2 * j + 1];
            }
        }
        g = warpSum(g);
        u = warpSum(u);
    }
    if (lane == 0) h[((long)r * K + k) * inter + o] = e >= 0 ? silu_mul(g, u) : 0.f;
}

// fp8dot16 is the dot product of 16 FP8 weights with 16 activations.
__device__ __forceinline__ float fp8dot16(uint4 a, const float4* xr) {
    const uint32_t ua[4] = {a.x, a.y, a.z, a.w};
    float t = 0.f;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float4 xv = __ldg(xr + q);
        float w[4];
        fp8x4f(ua[q], w);
        t += w[0] * xv.x + w[1] * xv.y + w[2] * xv.z + w[3] * xv.w;
    }
    return t;
}

// FP8 E4M3 with [b0, b1] block scales (nsc scales per row of blocks):
// hidden % 16 == 0 and b1 % 16 == 0, so a 16-byte chunk has one scale.
extern "C" __global__ void __launch_bounds__(256) moe_gateup_fp8(float* __restrict__ h, const float* __restrict__ x,
                                                                 const float* __restrict__ sel,
                                                                 const uint64_t* __restrict__ gp,
                                                                 const uint64_t* __restrict__ up,
                                                                 const uint64_t* __restrict__ gs,
                                                                 const uint64_t* __restrict__ us, int inter,
                                                                 int hidden, int K, int E, int b0, int b1, int nsc) {
    int r = blockIdx.y / K, k = blockIdx.y % K;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= inter) return;
    int e = expertOf(sel, r, K, k, E);
    float g = 0.f, u = 0.f;
    if (e >= 0) {
        const uint4* gw = (const uint4*)((const uint8_t*)gp[e] + (long)o * hidden);
        const uint4* uw = (const uint4*)((const uint8_t*)up[e] + (long)o * hidden);
        const float* gsr = (const float*)gs[e] + (long)(o / b0) * nsc;
        const float* usr = (const float*)us[e] + (long)(o / b0) * nsc;
        const float4* xr = (const float4*)(x + (long)r * hidden);
        int chunks = hidden >> 4;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            uint4 a = ldstream(gw + c), b = ldstream(uw + c);
            int sb = (c * 16) / b1;
            g += fp8dot16(a, xr + 4 * c) * __ldg(gsr + sb);
            u += fp8dot16(b, xr + 4 * c) * __ldg(usr + sb);
        }
        g = warpSum(g);
        u = warpSum(u);
    }
    if (lane == 0) h[((long)r * K + k) * inter + o] = e >= 0 ? silu_mul(g, u) : 0.f;
}

// moe_down_*: y[r,o] = Σ_k w[r,k] · down_e[o,:]·h[r,k,:]. Grid
// (ceil(hidden/8), rows), one output per warp; the lanes walk the K×inter
// products flattened, so all K experts' loads are in flight together, and
// the sum over k is in registers (no atomics: deterministic).
extern "C" __global__ void __launch_bounds__(256) moe_down_bf16(float* __restrict__ y, const float* __restrict__ h,
                                                                const float* __restrict__ sel,
                                                                const uint64_t* __restrict__ dp, int hidden, int inter,
                                                                int K, int E) {
    int r = blockIdx.y;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= hidden) return;
    int chunks = inter >> 3;
    const float* ws = sel + (long)r * 2 * K + K;
    float acc = 0.f;
#pragma unroll 4
    for (int j = lane; j < K * chunks; j += 32) {
        int k = j / chunks, c = j - k * chunks;
        int e = expertOf(sel, r, K, k, E);
        if (e < 0) continue;
        uint4 a = ldstream((const uint4*)((const uint16_t*)dp[e] + (long)o * inter) + c);
        const float4* hr = (const float4*)(h + ((long)r * K + k) * inter) + 2 * c;
        float4 x0 = hr[0], x1 = hr[1];
        float t = __uint_as_float(a.x << 16) * x0.x + __uint_as_float(a.x & 0xffff0000u) * x0.y +
                  __uint_as_float(a.y << 16) * x0.z + __uint_as_float(a.y & 0xffff0000u) * x0.w +
                  __uint_as_float(a.z << 16) * x1.x + __uint_as_float(a.z & 0xffff0000u) * x1.y +
                  __uint_as_float(a.w << 16) * x1.z + __uint_as_float(a.w & 0xffff0000u) * x1.w;
        acc += ws[k] * t;
    }
    acc = warpSum(acc);
    if (lane == 0) y[(long)r * hidden + o] = acc;
}

extern "C" __global__ void __launch_bounds__(256) moe_down_fp8(float* __restrict__ y, const float* __restrict__ h,
                                                               const float* __restrict__ sel,
                                                               const uint64_t* __restrict__ dp,
                                                               const uint64_t* __restrict__ ds, int hidden, int inter,
                                                               int K, int E, int b0, int b1, int nsc) {
    int r = blockIdx.y;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= hidden) return;
    int chunks = inter >> 4;
    const float* ws = sel + (long)r * 2 * K + K;
    float acc = 0.f;
#pragma unroll 4
    for (int j = lane; j < K * chunks; j += 32) {
        int k = j / chunks, c = j - k * chunks;
        int e = expertOf(sel, r, K, k, E);
        if (e < 0) continue;
        uint4 a = ldstream((const uint4*)((const uint8_t*)dp[e] + (long)o * inter) + c);
        float s = __ldg((const float*)ds[e] + (long)(o / b0) * nsc + (c * 16) / b1);
        const float4* hr = (const float4*)(h + ((long)r * K + k) * inter) + 4 * c;
        acc += ws[k] * (fp8dot16(a, hr) * s);
    }
    acc = warpSum(acc);
    if (lane == 0) y[(long)r * hidden + o] = acc;
}

// moe_add_gated: dst[r,:] += sigmoid(gate[r]) * src[r,:]. The product is
// rounded before the add (no FMA), as the CPU reference does it.
extern "C" __global__ void moe_add_gated(float* dst, const float* src, const float* gate, int rows, int dim) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)rows * dim) return;
    float w = (float)(1.0 / (1.0 + exp(-(double)gate[i / dim])));
    dst[i] = dst[i] + __fmul_rn(w, src[i]);
}
