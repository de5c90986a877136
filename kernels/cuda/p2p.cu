// One-shot all-reduce over peer-mapped (NVLink) memory for the small
// all-reduces of tensor-parallel decode (p2p.go has the design and the
// host side). Compiled to compute_90 PTX by `go generate` (p2p.go); the PTX
// is committed and embedded.
//
// Every rank owns an exchange region in its own device memory, mapped into
// every peer process with CUDA IPC:
//
//     flags: uint32 [P2P_MAXB blocks][P2P_MAXW sources]       (P2P_FLAG_BYTES)
//     data:  float  [2 parities][world sources][slot floats]
//
// One call (one kernel, grid G, the same G and block size on every rank
// because they depend only on n):
//
//  1. e = epoch+1, where epoch is a word in this rank's (unshared) device
//     memory that the kernel itself advances (see 4), so a replayed graph
//     uses a fresh value on every replay without host arguments.
//  2. push: block b stores its elements of buf into slot [e&1][rank] of every
//     peer's region (NVLink stores), then, after a barrier, thread q stores
//     e into peer q's flag [b][rank] with st.release.sys: the barrier and the
//     release (cumulative at system scope) make the block's data stores
//     visible to peer q before the flag.
//  3. wait: thread q spins with ld.acquire.sys on this rank's flag [b][q]
//     until it reaches e (signed difference, so wrap-around is harmless),
//     then a barrier; the block sums its elements over the sources in rank
//     order 0..world-1 (its own from buf, the others from its slots, read
//     past L1) and writes them back to buf: every rank computes the same
//     additions in the same order, so all hold the same bits.
//  4. the last block to finish (a counter in local memory) resets the
//     counter and stores epoch = e for the next call.
//
// Why a slot of parity e&1 is free when a peer writes it: a rank in call e
// has finished call e-1, in which it saw every peer's call-(e-1) flag, so
// every peer had started call e-1 and (stream order) finished call e-2, the
// last call that used parity e&1. A flag may be overwritten by the next
// call's value before its waiter sees it (the writer can be one call
// ahead, never two), hence "reached", not "equal".
//
// A spin is bounded by timeout_ns of %globaltimer: a peer that died or
// stopped makes the waiting block give up, set err (local, so later calls
// skip their waits and return at once) and *herr (mapped host memory that
// the host polls without touching the stream); the sums are then garbage
// and the host reports the group broken.
#include <stdint.h>

#define P2P_MAXW 8
#define P2P_MAXB 128
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

// spinExpired is a spin loop's timeout check (every 256 spins, against
// %globaltimer): once past timeout_ns it raises the error in state[2]
// (local: later calls skip their waits) and *herr (mapped host memory the
// host polls) and reports true, and the spinner gives up.
__device__ __forceinline__ bool spinExpired(uint32_t& spins, uint64_t t0, uint64_t timeout_ns, uint32_t* state,
                                            volatile uint32_t* herr) {
    if ((++spins & 255u) != 0 || globaltimer() - t0 <= timeout_ns) return false;
    atomicExch(&state[2], 1u);
    *herr = 1u;
    __threadfence_system();
    return true;
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// state: [0] epoch, [1] blocks done in the current call, [2] error (local).
// peers: the exchange regions as mapped in this process, by rank (own
// included). slot: floats per source slot (a multiple of 64). buf must be
// 16-byte aligned; n <= slot. With acc (16-byte aligned, or null) the sums
// are added to acc instead of replacing buf (the residual add of a
// row-split projection; acc holds the same bits on every rank, so the
// results agree too).
extern "C" __global__ void __launch_bounds__(512)
    p2p_allreduce(float* buf, const uint64_t* peers, uint32_t* state, volatile uint32_t* herr, int n, int rank,
                  int world, uint64_t slot, uint64_t timeout_ns, float* acc) {
    __shared__ uint32_t s_e, s_skip;
    __shared__ uint8_t* s_peer[P2P_MAXW];
    const int tid = threadIdx.x, b = blockIdx.x, G = gridDim.x, T = blockDim.x;
    // Launched with programmatic dependent launch: wait for the projection
    // that wrote buf (and, through it, every earlier kernel, the previous
    // call included: state), then let the next kernel launch at once, so
    // that its GEMV streams weights while this one waits on the peers.
    // Without the attribute both return at once.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (tid == 0) {
        s_e = *(volatile uint32_t*)&state[0] + 1u;
        s_skip = *(volatile uint32_t*)&state[2];
    }
    if (tid < world) s_peer[tid] = (uint8_t*)peers[tid];
    __syncthreads();
    const uint32_t e = s_e;
    const uint64_t par = e & 1u;
    const int n4 = n >> 2;
    const float4* x4 = (const float4*)buf;

    // 2. push
    for (int q = 0; q < world; q++) {
        if (q == rank) continue;
        float* dst = (float*)(s_peer[q] + P2P_FLAG_BYTES) + (par * world + rank) * slot;
        float4* d4 = (float4*)dst;
        for (int i = b * T + tid; i < n4; i += G * T) d4[i] = x4[i];
        if (b == 0)
            for (int i = 4 * n4 + tid; i < n; i += T) dst[i] = buf[i];
    }
    __syncthreads();
    if (tid < world && tid != rank)
        st_release_sys((uint32_t*)s_peer[tid] + b * P2P_MAXW + rank, e);

    // 3. wait
    if (tid < world && tid != rank && !s_skip) {
        const uint32_t* f = (const uint32_t*)s_peer[rank] + b * P2P_MAXW + tid;
        if ((int32_t)(ld_acquire_sys(f) - e) < 0) {
            const uint64_t t0 = globaltimer();
            uint32_t spins = 0;
            while ((int32_t)(ld_acquire_sys(f) - e) < 0)
                if (spinExpired(spins, t0, timeout_ns, state, herr)) break;
        }
    }
    __syncthreads();
    const float* own = (const float*)(s_peer[rank] + P2P_FLAG_BYTES) + par * world * slot;
    float4* y4 = (float4*)(acc ? acc : buf);
    for (int i = b * T + tid; i < n4; i += G * T) {
        float4 sum = rank == 0 ? x4[i] : __ldcg((const float4*)own + i);
        for (int s = 1; s < world; s++) sum = add4(sum, s == rank ? x4[i] : __ldcg((const float4*)(own + s * slot) + i));
        y4[i] = acc ? add4(y4[i], sum) : sum;
    }
    if (b == 0)
        for (int i = 4 * n4 + tid; i < n; i += T) {
            float sum = rank == 0 ? buf[i] : __ldcg(own + i);
            for (int s = 1; s < world; s++) sum += s == rank ? buf[i] : __ldcg(own + s * slot + i);
            if (acc)
                acc[i] += sum;
            else
                buf[i] = sum;
        }

    // 4. the last block advances the epoch (every block read it in 1.)
    if (tid == 0) {
        if (atomicAdd(&state[1], 1u) == (uint32_t)G - 1u) {
            state[1] = 0;
            *(volatile uint32_t*)&state[0] = e;
        }
    }
}

// p2p_allreduce_ll: the same all-reduce for n <= P2P_LL_FLOATS, n a
// multiple of 4·P2P_LL_THREADS (a decode step's block output; p2p.go sends
// other sizes to the flag kernel), in the low-latency form of NCCL's LL
// protocol: every 4-byte value travels with the call's epoch in the same
// 8-byte word (a 16-byte store carries two such words, each written
// whole), so a receiver knows a value has arrived when its word shows the
// epoch. No barrier, no release fence, no separate flag: the flag protocol
// pays a system-scope release (the block's NVLink stores acknowledged) and
// a second one-way trip for the flag before a peer can read the data.
//
// Region (after the flag kernel's data): ll [2 parities][world sources]
// [P2P_LL_FLOATS / 2] uint4 {v0, e, v1, e}. Block b of n/(4·threads)
// takes float4s [b·threads, (b+1)·threads), one a thread, and keeps its
// own epoch (state[P2P_LL_EPOCH + b], read after the wait with the values,
// one round trip; written by thread 0 at the end): blocks need no count of
// finished blocks, whose atomic was a round trip at the end of every block
// of the flag kernel. The parity argument is the flag kernel's, block by
// block: block b of a rank in its call e has seen every peer's block b of
// call e-1, so that block had started call e-1 after its call e-2 (a
// kernel waits for the one before it), the last to use the slot of parity
// e&1. A block writes all of its words whenever its epoch advances, so a
// stale word carries the epoch of an earlier use of the slot, never e (the
// region starts zeroed, epochs at 1, and a 32-bit epoch comes round only
// after 2^32 uses).
#define P2P_LL_FLOATS 8192
#define P2P_LL_THREADS 128
#define P2P_LL_EPOCH 16 // state word of block 0's epoch (state is 64 words)

__device__ __forceinline__ void st_volatile_v4(uint4* p, uint4 v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ uint4 ld_volatile_v4(const uint4* p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)
                 : "memory");
    return v;
}

// llPoll waits until the four words of the two units at p carry e (or the
// timeout or an earlier error: then the values are garbage) and returns
// their four values. Both units are loaded together: the second is then
// not a round trip of its own after the first has arrived.
__device__ __forceinline__ float4 llPoll(const uint4* p, uint32_t e, bool skip, uint32_t* state,
                                         volatile uint32_t* herr, uint64_t timeout_ns) {
    uint4 a = ld_volatile_v4(p), b = ld_volatile_v4(p + 1);
    auto ready = [&]() { return a.y == e && a.w == e && b.y == e && b.w == e; };
    if (!ready() && !skip) {
        const uint64_t t0 = globaltimer();
        uint32_t spins = 0;
        do {
            if (spinExpired(spins, t0, timeout_ns, state, herr)) break;
            if (a.y != e || a.w != e) a = ld_volatile_v4(p);
            if (b.y != e || b.w != e) b = ld_volatile_v4(p + 1);
        } while (!ready());
    }
    return make_float4(__uint_as_float(a.x), __uint_as_float(a.z), __uint_as_float(b.x), __uint_as_float(b.z));
}

// EARLY (p2p_allreduce_ll_e, POCKET_P2P_EARLY=1, an A/B hook) lets the
// next kernel launch before this one's wait, so that the GEMV after the
// exchange is resident and streaming its first weights while the row-split
// projection before it drains, as it is on one GPU.
template <bool EARLY>
__device__ __forceinline__ void allreduceLL(float* buf, const uint64_t* peers, uint32_t* state,
                                            volatile uint32_t* herr, int n, int rank, int world, uint64_t ll_off,
                                            uint64_t timeout_ns, float* acc) {
    __shared__ uint32_t s_e, s_skip;
    __shared__ uint8_t* s_peer[P2P_MAXW];
    const int tid = threadIdx.x, u = blockIdx.x * P2P_LL_THREADS + tid;
    uint32_t* epoch = state + P2P_LL_EPOCH + blockIdx.x;
    // The peers' regions never move: before the wait.
    if (tid < world) s_peer[tid] = (uint8_t*)peers[tid];
    if (EARLY) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!EARLY) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    // The epoch, this thread's values and what they add to in one round
    // trip.
    if (tid == 0) {
        s_e = *(volatile uint32_t*)epoch + 1u;
        s_skip = *(volatile uint32_t*)&state[2];
    }
    const bool in = u < (n >> 2);
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 x = in ? ((const float4*)buf)[u] : zero;
    const float4 a0 = in && acc ? ((const float4*)acc)[u] : zero;
    __syncthreads();
    const uint32_t e = s_e;
    const uint64_t units = P2P_LL_FLOATS / 2; // uint4 words of a slot
    const uint64_t par = e & 1u;
    if (in) {
        const uint4 w0 = make_uint4(__float_as_uint(x.x), e, __float_as_uint(x.y), e);
        const uint4 w1 = make_uint4(__float_as_uint(x.z), e, __float_as_uint(x.w), e);
        for (int q = 0; q < world; q++) {
            if (q == rank) continue;
            uint4* d = (uint4*)(s_peer[q] + ll_off) + (par * world + rank) * units + 2 * u;
            st_volatile_v4(d, w0);
            st_volatile_v4(d + 1, w1);
        }
        const uint4* own = (const uint4*)(s_peer[rank] + ll_off) + par * world * units + 2 * u;
        float4 sum;
        for (int s = 0; s < world; s++) {
            float4 v = x;
            if (s != rank) v = llPoll(own + s * units, e, s_skip != 0, state, herr, timeout_ns);
            sum = s == 0 ? v : add4(sum, v);
        }
        ((float4*)(acc ? acc : buf))[u] = acc ? add4(a0, sum) : sum;
    }
    // Nothing else reads the block's epoch in this call (thread 0 read it
    // above); the next call reads it after its wait.
    if (tid == 0) *(volatile uint32_t*)epoch = e;
}

#define P2P_LL_ARGS                                                                                               \
    float *buf, const uint64_t *peers, uint32_t *state, volatile uint32_t *herr, int n, int rank, int world, \
        uint64_t ll_off, uint64_t timeout_ns, float *acc
extern "C" __global__ void __launch_bounds__(P2P_LL_THREADS) p2p_allreduce_ll(P2P_LL_ARGS) {
    allreduceLL<false>(buf, peers, state, herr, n, rank, world, ll_off, timeout_ns, acc);
}
extern "C" __global__ void __launch_bounds__(P2P_LL_THREADS) p2p_allreduce_ll_e(P2P_LL_ARGS) {
    allreduceLL<true>(buf, peers, state, herr, n, rank, world, ll_off, timeout_ns, acc);
}
