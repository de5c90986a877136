// A whole FP8 SwiGLU MLP of one row in one persistent launch (included by
// fp8mma.cu after fp8pipe.cuh; fp8ffn.go launches it for
// kernels.FusedMLP):
//
//     x += Wd · (silu(Wg · rmsnorm(x)) · (Wu · rmsnorm(x)))
//
// Why: on the launch chain (pipeSwiGLU, then pipeGemv MODE 1) the down
// projection's blocks, at ~226 KiB of shared memory each, find an SM only
// when the gate/up block there has left, so the down projection's weights
// start streaming one block exit and one block launch after each SM's last
// gate/up warp; and gate/up's blocks, all with the same work, end over ~5 µs
// (docs/decode-step.md, the Qwen3.5-27B DeltaNet layer). Here one block per
// SM stays resident across both phases: a warp done with its gate/up tile
// issues its first down units into its ring at once, and the ring keeps
// streaming while the grid meets at its barrier and the block stages the
// activation. That is the "two GEMV phases in one persistent kernel" that
// docs/decode-step.md asked to price before anything larger.
//
// Phase 1 is pipeSwiGLU with one warp a tile of 8 outputs (wpr = 1, what
// planPipe picks for Qwen3.5-27B's 2176 tiles), tile b + nb·warp; phase 2
// pipeGemv MODE 1 with 8 warps a 16-row tile, G = 3 tiles a block. Each
// tile's sums are made in the same order as those kernels', so the results
// equal the launch chain's bit for bit.
//
// Every block must be resident at once (the barrier): the grid is one block
// per SM, and a block takes more than half an SM's shared memory, so no two
// share one. The dependents launch only after the barrier.

// gridArrive is a grid barrier over nb resident blocks: bar[0] counts the
// arrivals, bar[1] is the generation. The last block to arrive zeroes the
// count and bumps the generation; the others' thread 0 spins on it. The
// block barrier before thread 0's release orders every thread's stores
// ahead of it, the one after its acquire every thread's loads after it (the
// pattern of lastArrival, common.cuh). A spin past two seconds means a
// block never became resident: it traps (the worker restarts) rather than
// hang the device.
__device__ __forceinline__ void gridArrive(unsigned* bar, unsigned nb, bool wait) {
    __syncthreads();
    if (threadIdx.x == 0) {
#ifdef FFN_PROBE_ARRIVE
        PROBE_WAITED(); // diagnostic build: a block's "wait" is its arrival
#endif
        unsigned gen, old;
        // No block bumps the generation before this one arrives.
        asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(gen) : "l"(bar + 1) : "memory");
        __threadfence();
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(old) : "l"(bar) : "memory");
        if (old == nb - 1) {
            asm volatile("st.relaxed.gpu.u32 [%0], 0;" ::"l"(bar) : "memory");
            asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(bar + 1), "r"(gen + 1) : "memory");
        } else if (wait) {
            uint64_t t0, t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
            for (;;) {
                unsigned g;
                asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(g) : "l"(bar + 1) : "memory");
                if (g != gen) break;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                if (t - t0 > 2000000000ull) __trap();
            }
        }
    }
    __syncthreads();
}

// FFN_WPR is phase 2's warps a tile (pipeGemv's wpr for Qwen3.5-27B's down
// projection); fp8ffn.go plans with it.
#define FFN_WPR 8

template <int S>
__device__ __forceinline__ void pipeFFN(float* x, float* act, const float* __restrict__ nw, float eps,
                                        const uint8_t* wg, const float* sg, const uint8_t* wu, const float* su,
                                        const uint8_t* wd, const float* sd, int inter, int hid, int b0g, int nscg,
                                        int b0d, int nscd, unsigned* bar) {
    // The activation area holds either phase's: hid halves, then inter.
    const int pad = max((hid + UNIT - 1) / UNIT, (inter + UNIT - 1) / UNIT) * UNIT;
    __half* xs = (__half*)pipeShm;
    const int nb = gridDim.x, b = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t ring = pipeRing<S>(pad);
    {
        // Phase 1: act = silu(gate)·up of tile b + nb·warp (8 outputs).
        const int base = (b + nb * warp) * 8;
        const int o = min(base + (lane >> 2), inter - 1), t = lane & 3;
        const uint32_t off = (uint32_t)o * hid + 16 * t, soff = (uint32_t)(o / b0g) * nscg;
        PipeDot<S> d;
        pipeSources(d, wg, wu, base, base, inter, hid);
        d.prefetch(Rows{wg, wu, sg, su, off, off, soff, soff}, hid, 0, 1, base < inter, ring);
#ifdef FFN_PROBE_ARRIVE
        asm volatile("griddepcontrol.wait;" ::: "memory");
#else
        pdlWait();
#endif
        const float k = gemvPrologue<2>(xs, x, nw, eps, hid);
        float accA, accB;
        d.finish(xs, accA, accB);
        // One warp holds the tile's whole sums: swigluStore at wpr = 1.
        if ((lane & 3) == 0 && base + (lane >> 2) < inter) {
            const float gv = accA * k, uv = accB * k;
            act[base + (lane >> 2)] = gv / (1.f + expf(-gv)) * uv;
        }
        __syncwarp(); // every lane's last fragment reads are done: phase 2 refills the ring
    }
    // Phase 2: x += Wd·act, tiles of 16 rows b·G .. b·G + G-1 (pipeGemv's
    // order). Its first units stream before the barrier; x's rows have one
    // owner, and every block read x (phase 1's norm) before it arrived. A
    // block with no tile of its own arrives and leaves, and the next
    // launch's blocks take its SM early, as beside the down projection's
    // 107 blocks of the launch chain (spreading the tiles over every block
    // kept them out and cost the next in-projection 2-3 µs).
    const int G = (blockDim.x >> 5) / FFN_WPR, j = warp / FFN_WPR;
    const int base = (b * G + j) * 16;
    const bool mine = b * G * 16 < hid;
    PipeDot<S> d;
    pipeSources(d, wd, wd, base, base + 8, hid, inter);
    d.prefetch(gemvRows(wd, sd, base, hid, inter, b0d, nscd), inter, warp % FFN_WPR, FFN_WPR, base < hid, ring);
    gridArrive(bar, nb, mine);
    if (!mine) return;
    pdlLaunchDependents();
    const float k = gemvPrologue<0, true>(xs, act, nullptr, 0.f, inter);
    float accA, accB;
    d.finish(xs, accA, accB);
    __syncwarp(); // as pipeGemv
    gemvStore<1>(x, pipeRed<S>(pad), accA, accB, k, b, G, FFN_WPR, hid);
}

#define FFN_KERNEL(NAME, S)                                                                                     \
    extern "C" __global__ void __launch_bounds__(768, 1)                                                        \
        NAME(float* x, float* act, const float* __restrict__ nw, float eps, const uint8_t* wg, const float* sg, \
             const uint8_t* wu, const float* su, const uint8_t* wd, const float* sd, int inter, int hid,       \
             int b0g, int nscg, int b0d, int nscd, unsigned* bar) {                                             \
        PROBE_KERNEL();                                                                                         \
        pipeFFN<S>(x, act, nw, eps, wg, sg, wu, su, wd, sd, inter, hid, b0g, nscg, b0d, nscd, bar);             \
    }
FFN_KERNEL(f8ffn_4, 4)
