// Routing on the device (kernels.MoEOps.MoERoute), included by moe.cu:
// router logits to each row's K expert ids and weights, as
// kernels.Router.Route selects them, ties included (conformance checks the
// ids bit for bit). moe_route takes a block per row and any rule within
// the limits below; moe_route_wJ a warp per row for up to 32·J experts
// (moe.go picks).
#pragma once
#include <math.h>

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
                                                            float scale) { PROBE_KERNEL();
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
                                                                    int groups, int topkGroup, float scale) { PROBE_KERNEL();        \
        routeWarp<J>(sel, logits, bias, E, K, sigmoid, normTopK, groups, topkGroup, scale);                          \
    }
ROUTE_W(2)
ROUTE_W(4)
ROUTE_W(8)
ROUTE_W(16)
ROUTE_W(32)
