// The low-latency all-reduce's exchange layout (p2p.cu describes the
// protocol), shared by p2p_allreduce_ll and the GEMV that pushes its rows
// into it (decode.cu, gemv_r4p): a slot of P2P_LL_FLOATS 8-byte words
// {value, epoch} per parity and source rank, at ll_off in every rank's
// region; block b of the all-reduce (P2P_LL_THREADS float4s) keeps its
// epoch in state word P2P_LL_EPOCH + b.
#pragma once
#include <stdint.h>

#define P2P_LL_FLOATS 8192
#define P2P_LL_THREADS 128
#define P2P_LL_EPOCH 16 // state word of block 0's epoch (state is 64 words)

__device__ __forceinline__ uint32_t ldVolatileU32(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// llWord is the address of word i of source src's slot of parity par in
// the region at base.
__device__ __forceinline__ uint2* llWord(uint8_t* base, uint64_t ll_off, uint32_t par, int world, int src, int i) {
    return (uint2*)(base + ll_off) + ((uint64_t)par * world + src) * P2P_LL_FLOATS + i;
}
