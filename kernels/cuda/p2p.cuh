// The peer-memory exchange protocol of p2p.cu, shared with the kernels
// that fuse it into their epilogue (decode.cu's gemv_add_ar): the layout
// of a rank's exchange region and the release/acquire steps. p2p.cu
// describes the protocol.
#pragma once
#include <stdint.h>

// P2P_MAXB is the flags' blocks: p2p_allreduce launches at most 128 (p2pGrid),
// a fused GEMV one block per group of its output rows.
#define P2P_MAXW 8
#define P2P_MAXB 1024
#define P2P_FLAG_BYTES (P2P_MAXB * P2P_MAXW * 4)

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// p2pSlot is source src's data slot of parity par in the region at base.
__device__ __forceinline__ float* p2pSlot(uint8_t* base, uint64_t par, int world, int src, uint64_t slot) {
    return (float*)(base + P2P_FLAG_BYTES) + (par * world + src) * slot;
}

// p2pFlag is block b's flag for source src in the region at base.
__device__ __forceinline__ uint32_t* p2pFlag(uint8_t* base, int b, int src) {
    return (uint32_t*)base + b * P2P_MAXW + src;
}

// p2pAwait spins until the flag f has reached e (signed difference: a
// peer one call ahead may have overwritten it already) or timeout_ns have
// passed; then it marks the group broken in state[2] (local: later calls
// skip their waits) and *herr (mapped host memory the host polls).
__device__ __forceinline__ void p2pAwait(const uint32_t* f, uint32_t e, uint32_t* state, volatile uint32_t* herr,
                                         uint64_t timeout_ns) {
    if ((int32_t)(ld_acquire_sys(f) - e) >= 0) return;
    const uint64_t t0 = globaltimer();
    uint32_t spins = 0;
    while ((int32_t)(ld_acquire_sys(f) - e) < 0) {
        if ((++spins & 255u) == 0 && globaltimer() - t0 > timeout_ns) {
            atomicExch(&state[2], 1u);
            *herr = 1u;
            __threadfence_system();
            break;
        }
    }
}

// p2pCallDone counts the calling block done; the grid's last block resets
// the count and publishes epoch e for the next call (every block read the
// epoch before).
__device__ __forceinline__ void p2pCallDone(uint32_t* state, uint32_t e) {
    if (atomicAdd(&state[1], 1u) == gridDim.x - 1u) {
        state[1] = 0;
        *(volatile uint32_t*)&state[0] = e;
    }
}
