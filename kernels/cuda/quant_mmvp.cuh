// qmvp: the o projection of a block-format decode step (Q4_K), its weights
// loaded into shared memory while the attention runs (included by
// quant.cu after quant_mmv.cuh; quant_mmvp.go launches it).
//
// Why: between the q/k/v GEMV and the o projection the attention runs a
// chain of short dependent round trips (~4-6 µs a layer on an H200) that
// reads almost nothing from DRAM, and the o projection after it streamed
// its 9.4 MB (Qwen3-8B Q4_K_M) at 59% of its byte time: only the first
// step of each warp's weights (registers) crossed the launch boundary.
// The whole o projection fits in the SMs' shared memory (~73 KB a block
// at one block an SM), so here each block's rows are copied in whole with
// cp.async before the PDL wait (a dozen 16-byte copies a thread, issued
// at once, no registers held for them). With qx_merge_e in front (the
// attention's merge and rounding triggering its dependents before its own
// wait) the blocks launch beside the attention's and the copies run under
// it; after the wait the block computes from shared memory (qdotQ4K's
// arithmetic, in the same order as qmv at one warp a row group, so the
// results equal qmv's at wpr 1). (A TMA bulk copy would take one thread,
// but needs PTX 8.0, which the nvcc 11.8 that builds this module lacks.)
//
// A block is 8 warps; warp w computes the row groups 4w, 4w + 32, ... of
// its rpb rows (rpb a multiple of 4; Go sizes it so that the grid is at
// most one block an SM).

extern "C" __global__ void __launch_bounds__(256, 2)
    qmvp_q4k(float* y, const uint8_t* __restrict__ w, long rb, int out, int rpb, const uint8_t* __restrict__ xq,
             const float2* __restrict__ xs, int in, int mode) {
    extern __shared__ __align__(16) uint8_t sw[];
    const int r0 = blockIdx.x * rpb, rows = min(rpb, out - r0);
    {
        // The weights are never written during a step: copy before the wait.
        const int n16 = (int)(rows * rb / 16);
        const uint4* src = (const uint4*)(w + (long)r0 * rb);
        const uint32_t dst = (uint32_t)__cvta_generic_to_shared(sw);
        for (int i = threadIdx.x; i < n16; i += 256)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + 16 * i), "l"(src + i) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    qPdlLaunch();
    qPdlWait(); // xq, xs: qx_merge_e's output
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads(); // every thread's copies are in
    const int lane = threadIdx.x & 31;
    for (int g = (threadIdx.x >> 5) * 4; g < rows; g += 32) {
        QRowsO<4> wr;
        wr.p = sw + (long)g * rb;
#pragma unroll
        for (int r = 0; r < 4; r++) wr.o[r] = (uint32_t)((min(g + r, rows - 1) - g) * rb);
        float acc[4];
        qdotQ4K<4, QRowsO<4>, true>(wr, xq, xs, in >> 8, 0, 1, true, acc);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const float v = warpSum(acc[r]);
            const int o = r0 + g + r;
            if (lane == 0 && g + r < rows) y[o] = mode == QMV_ADD ? y[o] + v : v;
        }
    }
}
