// In-graph timeline probes (included by common.cuh). Off unless the PTX is
// built with -DPOCKET_PROBE (scripts/probe-build.sh): then every kernel
// that opens with PROBE_KERNEL() leaves, per block, when its thread 0
// started, passed griddepcontrol.wait and ended, by %globaltimer, with the
// launch's %gridid and the SM. The backend finds the module's probe table
// and writes it out after a run (probe.go, POCKET_PROBE_OUT), and
// scripts/probe-summary.py lays one decode step out launch by launch.
//
// Why: ncu prices kernels one at a time, with nothing overlapping them, and
// nsys cannot run on the GPU machines; what a decode step loses is where
// launches meet inside the captured graph (docs/decode-step.md).
//
// It adds to thread 0's work a timer read and a store at entry and at the
// wait, and to each warp's lane 0 a timer read and an atomic at exit.
// Without POCKET_PROBE the macros are empty and the PTX is unchanged.
#pragma once

#ifdef POCKET_PROBE
// Launches kept, by gridid modulo this: 4+ decode steps of every model measured (Qwen3.5-27B
// FP8's step is 435 launches; at 1024 a probe kept under 2.4 of them, too few for a whole step
// once a variant added launches). Blocks recorded per launch, the lowest ids: every decode
// kernel but an LM head's GEMV has fewer (a GEMV's end is its last block's). The table is
// 256 MiB a module either way.
#define PROBE_LAUNCHES 2048
#define PROBE_BLOCKS 2048

// pocket_probe[gridid % PROBE_LAUNCHES][block]: {gridid, block << 32 |
// smid << 20 | blocks (20 bits), start, wait, end, first warp's end, mark, mark2}
// in ns of %globaltimer (wait: the first, as a kernel may wait once a
// pass; all ones where none was taken; mark: the first PROBE_MARK, a point
// a kernel names inside itself, e.g. the FP8 rings' activation staged;
// mark2: the first PROBE_MARK2, a second such point). end and the first warp's end
// apart say whether a block's warps end apart (each warp's own stream
// late) or together (the SM's). Thread 0 stores each field
// when it happens, so nothing is held in registers or shared memory across
// the kernel (the FP8 rings size their stages by what shared memory is
// left, and several kernels sit at their register bound).
__device__ unsigned long long pocket_probe[PROBE_LAUNCHES * PROBE_BLOCKS * 8];

__device__ __forceinline__ unsigned long long probeNow() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// probeSlot is thread 0's record, or null past PROBE_BLOCKS.
__device__ __forceinline__ unsigned long long* probeSlot() {
    unsigned long long grid;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
    const unsigned int blk = blockIdx.y * gridDim.x + blockIdx.x;
    if (blk >= PROBE_BLOCKS) return nullptr;
    return pocket_probe + ((grid % PROBE_LAUNCHES) * PROBE_BLOCKS + blk) * 8;
}

struct ProbeScope {
    __device__ __forceinline__ ProbeScope() {
        if (threadIdx.x != 0) return;
        if (unsigned long long* r = probeSlot()) {
            r[2] = probeNow();
            r[3] = ~0ull;
            r[5] = ~0ull;  // each warp lowers it to its end: the first warp's end
            r[6] = ~0ull;
            r[7] = ~0ull;
        }
    }
    // Every warp's lane 0 raises the end to its own (warps of a block may
    // finish apart: a block is several row groups in some GEMVs) and lowers
    // the first warp's end to it. The end needs no reset: an older launch's
    // end in the slot is earlier.
    __device__ __forceinline__ ~ProbeScope() {
        if ((threadIdx.x & 31) != 0) return;
        const unsigned long long end = probeNow();
        unsigned long long* r = probeSlot();
        if (r == nullptr) return;
        atomicMax(r + 4, end);
        atomicMin(r + 5, end);
        if (threadIdx.x != 0) return;
        unsigned long long grid;
        unsigned int sm;
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        const unsigned int blk = blockIdx.y * gridDim.x + blockIdx.x, n = gridDim.x * gridDim.y;
        r[0] = grid;
        r[1] = (unsigned long long)blk << 32 | (unsigned long long)(sm & 0xfffu) << 20 | (n & 0xfffffu);
    }
};
#define PROBE_KERNEL() ProbeScope probeScope_
// probeStamp lowers field f of thread 0's record to now: the first time
// the block passes the point.
__device__ __forceinline__ void probeStamp(int f) {
    if (threadIdx.x != 0) return;
    if (unsigned long long* r = probeSlot()) atomicMin(r + f, probeNow());
}
#define PROBE_WAITED() probeStamp(3)
#define PROBE_MARK() probeStamp(6)
#define PROBE_MARK2() probeStamp(7)
#else
#define PROBE_KERNEL() \
    do {               \
    } while (0)
#define PROBE_WAITED() PROBE_KERNEL()
#define PROBE_MARK() PROBE_KERNEL()
#define PROBE_MARK2() PROBE_KERNEL()
#endif
