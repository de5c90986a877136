// The one-row FP8 expert products of a mixture-of-experts layer (the
// decode step of kernels.MoEOps.MoEExperts) on the ring GEMVs of
// fp8pipe.cuh (included by fp8mma.cu after it; moe.go launches them through
// fp8pipe.go's plans, POCKET_MOE_PIPE=0 keeps moe.cu's kernels).
//
// Why: ncu on the MiniMax-M2 slice's decode step put moe.cu's kernels, a
// warp per output row on CUDA cores, at 2.5 TB/s (gate/up) and 1.2 TB/s
// (down), where the dense FP8 rings run at 3.5: a warp there holds one or
// two 16-byte loads in flight and walks a 3 KiB row (the down kernel also
// reads four bytes of activation per weight byte, and finds its expert
// through two dependent loads each step).
//
// Both kernels see the K routed experts of the row as one matrix:
//   - gate/up (f8pipe_moe_swiglu_S): K·inter/8 tiles of 8 outputs, tile t
//     in slot t/(inter/8) (pipeSwiGLU's tiles, each warp its own
//     expert's pointers), writing h [K, inter] as moe.cu's kernel does;
//   - down (f8pipe_moe_down_S): 16-row tiles of the output over K·inter
//     columns, a 128-column unit u from slot u/(inter/128)'s matrix; the
//     activation staged in shared memory is w_k·h_k, so the tile's sums
//     are the routed sum itself.
// The expert ids come from moe_route, the gate/up kernel's predecessor: it
// waits for it before anything, then lets the down kernel launch, which
// may therefore read them (and stream its first weights) before its own
// wait for h.
//
// Both stage their activation as the dense rings do (pipeStageBy: a power
// of two a 128-column unit, its inverse a factor of the unit's products).
// Dynamic shared memory of the down kernel: its slots' table (moeTable),
// then the activation and its factors, then the rings; the gate/up
// kernel's is fp8pipe.cuh's.
#include "moe_common.cuh"

#define MOE_PIPE_MAXK 32
#define MOE_TABLE_BYTES 768 // sizeof(moeTable) rounded up to 256

// moeTable is a row's K slots: their experts' weight and scale matrices
// (expert 0's for a slot without an expert, whose copies read nothing)
// and routing weights (0 there), and which slots hold an expert.
struct moeTable {
    const uint8_t* w[MOE_PIPE_MAXK];
    const float* s[MOE_PIPE_MAXK];
    float wt[MOE_PIPE_MAXK];
    unsigned valid; // bit k: slot k holds an expert
};

// moeSlot reads slot k's expert id of row 0 through L2 (__ldcg): the down
// kernel reads it before its PDL wait, so no line of it may come from an
// L1 filled by an earlier step.
__device__ __forceinline__ int moeSlot(const float* sel, int K, int k, int E) {
    float f = __ldcg(sel + k);
    return (f >= 0.f && f < (float)E) ? (int)f : -1;
}

// pipeMoeSwiGLU is pipeSwiGLU for the K experts of row 0 of sel: h[k·inter
// + o] = silu(gate_e·x)·(up_e·x) for e slot k's expert (0 when the slot
// has none), x taken through the RMSNorm of weight nw where nw is set.
template <int S>
__device__ __forceinline__ void pipeMoeSwiGLU(float* h, const float* __restrict__ x, const float* __restrict__ nw,
                                              float eps, const float* sel, const uint64_t* __restrict__ gp,
                                              const uint64_t* __restrict__ up, const uint64_t* __restrict__ gs,
                                              const uint64_t* __restrict__ us, int inter, int hidden, int K, int E,
                                              int wpr, int b0, int nsc) {
    const int units = hidden / UNIT, xsb = hidden * 2 + pipeFacBytes(units); // hidden % 128 == 0 (planPipeMoE)
    __half* xs = (__half*)pipeShm;
    float* fac = (float*)(pipeShm + hidden * 2);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = (blockDim.x >> 5) / wpr;
    int tpe = inter / 8, T = blockIdx.x * G + warp / wpr, k = T / tpe, base = (T - k * tpe) * 8;
    if (nw != nullptr) pipeNormPrefetch(nw, hidden); // (fp8pipe.cuh)
    pdlWait(); // the routing
    pdlLaunchDependents();
    int e = k < K ? moeSlot(sel, K, k, E) : -1, ei = max(e, 0);
    const uint8_t *wg = (const uint8_t*)gp[ei], *wu = (const uint8_t*)up[ei];
    const float *sg = (const float*)gs[ei], *su = (const float*)us[ei];
    int o = base + (lane >> 2), t = lane & 3;
    uint32_t off = (uint32_t)o * hidden + 16 * t, soff = (uint32_t)(o / b0) * nsc;
    PipeDot<S> d;
    pipeSources(d, wg, wu, base, base, inter, hidden, false);
    d.prefetch(Rows{wg, wu, sg, su, off, off, soff, soff}, hidden, warp % wpr, wpr, e >= 0, pipeRingAt<S>(xsb));
    // One staging for both cases (a second instantiation would add its
    // code to every kernel): without a norm, x times 1, exactly x.
    const bool norm = nw != nullptr;
    const float4* n4 = (const float4*)nw;
    pipeStageBy<true>(
        xs, fac, x, hidden,
        [=](int i, bool ok) { return ok && norm ? __ldg(n4 + i) : make_float4(1.f, 1.f, 1.f, 1.f); },
        [](float4 a, int, float4 g) { return make_float4(a.x * g.x, a.y * g.y, a.z * g.z, a.w * g.w); });
    float accA, accB;
    d.finish(xs, accA, accB, fac);
    const float sc = norm ? pipeNormFactor(hidden, eps) : 1.f;
    __syncwarp(); // as pipeGemv
    swigluStore(h, pipeRedAt<S>(xsb), accA, accB, sc, G, wpr, K * inter);
}

// MoeDownDot is PipeDot over the K slots' down matrices: unit u of the
// K·inter columns is unit u%upe of slot u/upe's matrix. The issuing and
// the computing cursor each walk (slot, unit) by the warp's stride.
template <int S>
struct MoeDownDot {
    const moeTable* tb;
    uint32_t ring, row, step; // the lane's copy offset (row base+lane/8, its column) and 4 rows
    uint32_t sa, sb;          // the scale-row offsets of rows base+g and base+8+g
    int stride, upe, nu, ui, ki, ji, kc, jc;
    unsigned valid;

    // issue copies the unit at the issuing cursor into stage slot and
    // moves the cursor on.
    __device__ __forceinline__ void issue(int slot) {
        int lane = threadIdx.x & 31;
        uint32_t s = ring + slot * PIPE_STAGE + pipeSwz(lane >> 3, lane & 7), n = (valid >> ki) & 1 ? 16 : 0;
        const uint8_t* p = tb->w[ki] + (row + (uint32_t)ji * UNIT);
        cpAsync16(s, p, n);
        cpAsync16(s + 512, p + step, n);
        cpAsync16(s + 1024, p + 2 * step, n);
        cpAsync16(s + 1536, p + 3 * step, n);
        ui += stride;
        for (ji += stride; ji >= upe; ji -= upe) ki++;
    }

    __device__ __forceinline__ void prefetch(const moeTable* table, unsigned validSlots, int base, int inter, int K,
                                             int first, int strideUnits, bool active, int b0, int nsc,
                                             uint32_t ringAddr) {
        int lane = threadIdx.x & 31, g = lane >> 2;
        tb = table;
        valid = validSlots;
        ring = ringAddr;
        row = (uint32_t)(base + (lane >> 3)) * inter + (lane & 7) * 16;
        step = 4 * (uint32_t)inter;
        sa = (uint32_t)((base + g) / b0) * nsc;
        sb = (uint32_t)((base + 8 + g) / b0) * nsc;
        upe = inter / UNIT;
        nu = active ? K * upe : 0;
        stride = strideUnits;
        ui = first;
        ki = first / upe;
        ji = first - ki * upe;
        kc = ki;
        jc = ji;
#pragma unroll
        for (int s = 0; s < S - 1; s++) {
            if (ui < nu) issue(s);
            cpCommit();
        }
    }

    // finish is PipeDot::finish over the slots (xs holds w_k·h_k,
    // unit u times fac[u]).
    __device__ __forceinline__ void finish(const __half* xs, const float* fac, int first, float& accA, float& accB) {
        int t = threadIdx.x & 3;
        accA = accB = 0.f;
        int rd = 0;
        for (int u = first; u < nu; u += stride) {
            __syncwarp();
            if (ui < nu) issue(rd == 0 ? S - 1 : rd - 1);
            cpCommit();
            cpWait<S - 1>();
            __syncwarp();
            uint4 a0, b0, a1, b1;
            stageFrag(ring + rd * PIPE_STAGE, a0, b0, a1, b1);
            rd = rd == S - 1 ? 0 : rd + 1;
            const float* sc = tb->s[kc];
            float fa = __ldg(sc + sa + jc), fb = __ldg(sc + sb + jc);
            for (jc += stride; jc >= upe; jc -= upe) kc++;
            const uint4* xp = (const uint4*)(xs + u * UNIT + 16 * t);
            unitDot(accA, accB, fa, fb, a0, b0, a1, b1, xp[0], xp[1], xp[8], xp[9], fac[u]);
        }
        cpWait<0>();
    }
};

// pipeMoeDown: y = Σ_k w_k · down_{e_k}·h_k (add: y +=) for row 0 of sel
// and h [K, inter]; 16-row tiles of y (hidden % 16 == 0), wpr warps per
// tile.
template <int S>
__device__ __forceinline__ void pipeMoeDown(float* y, const float* __restrict__ h, const float* sel,
                                            const uint64_t* __restrict__ dp, const uint64_t* __restrict__ ds,
                                            int hidden, int inter, int K, int E, int wpr, int b0, int nsc, int add) {
    moeTable* tb = (moeTable*)pipeShm;
    __half* xs = (__half*)(pipeShm + MOE_TABLE_BYTES);
    int in = K * inter, warp = threadIdx.x >> 5, G = (blockDim.x >> 5) / wpr;
    float* fac = (float*)(pipeShm + MOE_TABLE_BYTES + in * 2); // inter % 128 == 0 (planPipeMoE)
    const int xsb = MOE_TABLE_BYTES + in * 2 + pipeFacBytes(in / UNIT);
    int base = (blockIdx.x * G + warp / wpr) * 16;
    // The ids are final: the gate/up kernel let this one launch after its
    // wait for the routing.
    if (warp == 0) { // K ≤ 32: a lane per slot
        int k = threadIdx.x, e = k < K ? moeSlot(sel, K, k, E) : -1, ei = max(e, 0);
        if (k < K) {
            tb->w[k] = (const uint8_t*)dp[ei];
            tb->s[k] = (const float*)ds[ei];
            tb->wt[k] = e >= 0 ? __ldcg(sel + K + k) : 0.f;
        }
        unsigned valid = __ballot_sync(0xffffffffu, e >= 0);
        if (k == 0) tb->valid = valid;
    }
    __syncthreads();
    MoeDownDot<S> d;
    d.prefetch(tb, tb->valid, base, inter, K, warp % wpr, wpr, base < hidden, b0, nsc,
               pipeRingAt<S>(xsb));
    pdlLaunchDependents();
    pdlWait(); // h
    const int q = inter / 4; // float4s per slot
    pipeStageBy<false>(
        xs, fac, h, in, [](int, bool) { return make_float4(0.f, 0.f, 0.f, 0.f); },
        [=](float4 v, int i, float4) {
            float w = i < K * q ? tb->wt[i / q] : 0.f;
            return make_float4(v.x * w, v.y * w, v.z * w, v.w * w);
        });
    float accA, accB;
    d.finish(xs, fac, warp % wpr, accA, accB);
    __syncwarp(); // every lane's last fragment reads are done: pipeRed may reuse the ring
    Red red = pipeRedAt<S>(xsb);
    if (add)
        gemvStore<1>(y, red, accA, accB, 1.f, blockIdx.x, G, wpr, hidden);
    else
        gemvStore<0>(y, red, accA, accB, 1.f, blockIdx.x, G, wpr, hidden);
}

#define MOE_SWIGLU_ARGS                                                                                           \
    float *h, const float *__restrict__ x, const float *__restrict__ nw, float eps, const float *sel,              \
        const uint64_t *__restrict__ gp, const uint64_t *__restrict__ up, const uint64_t *__restrict__ gs,         \
        const uint64_t *__restrict__ us, int inter, int hidden, int K, int E, int wpr, int b0, int nsc
#define MOE_DOWN_ARGS                                                                                      \
    float *y, const float *__restrict__ h, const float *sel, const uint64_t *__restrict__ dp,              \
        const uint64_t *__restrict__ ds, int hidden, int inter, int K, int E, int wpr, int b0, int nsc, int add
#define PIPE_MOE(S)                                                                                        \
    extern "C" __global__ void __launch_bounds__(768, 1) f8pipe_moe_swiglu_##S(MOE_SWIGLU_ARGS) { PROBE_KERNEL();          \
        pipeMoeSwiGLU<S>(h, x, nw, eps, sel, gp, up, gs, us, inter, hidden, K, E, wpr, b0, nsc);           \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(768, 1) f8pipe_moe_down_##S(MOE_DOWN_ARGS) { PROBE_KERNEL();              \
        pipeMoeDown<S>(y, h, sel, dp, ds, hidden, inter, K, E, wpr, b0, nsc, add);                         \
    }
PIPE_MOE(3)
PIPE_MOE(4)
PIPE_MOE(6)
PIPE_MOE(8)
