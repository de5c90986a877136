// The tensor-core FP8 GEMVs of fp8mma.cu with their weights streamed
// through shared memory (included by fp8mma.cu; fp8pipe.go launches them,
// by default; POCKET_FP8_PIPE=0 keeps fp8mma's).
//
// Why: ncu on the Qwen3.5-27B FP8 decode step showed the fp8mma kernels at
// 50-63% of DRAM bandwidth, stalled on L1TEX scoreboards with ~4 active
// warps per scheduler. A warp there holds two 128-column units (4 KiB) in
// registers ahead of the one it computes, and the grid gives an SM only
// ~16 warps (one per 16-row tile: the gate/up GEMV of that model has 2176
// tiles for 132 SMs), so an SM has ~64 KiB in flight where the bf16 GEMVs,
// at 32 warps per SM, keep twice that and reach 85-90% of DRAM.
//
// Here each warp streams its units through a ring of S stages in dynamic
// shared memory with cp.async (16 bytes per lane per copy), so S-1 units
// are in flight per warp without holding registers; a block is T tiles of
// wpr warps each, sized in Go so that the grid is one block per SM. The
// arithmetic is MmaDot's, in the same order (unitDot only interleaves its
// two chains), over an activation staged with a power-of-two scale a unit
// (pipeStageBy) rather than one a block: the results equal fp8mma's for the
// same wpr up to the f16 rounding of elements whose scale differs.
//
// A copy instruction moves whole 128-byte lines of 4 rows (lanes 8i..8i+7
// one row) into a row-major stage, swizzled so that the fragment reads are
// free of bank conflicts; the warp syncs before reading what its other
// lanes copied. Measured on an H200 (Qwen3.5-27B FP8, ncu at locked
// clocks), gate/up+SwiGLU GEMV:
//   - fp8mma (two units in flight in registers):                  59.3 µs, 63% of DRAM
//   - this ring with each lane copying its own fragment pieces
//     (64 bytes of 8 rows per copy, 5 units in flight):           59.3 µs, 63%
//   - whole-line copies (this kernel):                            53.8 µs, 70%
//   - the same reading tile-contiguous bytes (a layout experiment
//     with wrong results: what repacking the weights would give): 52.6 µs, 71%
// So neither bytes in flight nor DRAM page locality is what held fp8mma
// back, but the L2 requests of 64-byte pieces.
//
// Dynamic shared memory: the f16 activation (padded to whole units), its
// per-unit factors (pipeStageBy), then the warps' rings, 2 KiB per stage
// per warp.
//
// Tiled weights (fp8_tile16; fp8tiles.go makes the copies): a matrix may
// also be read from a copy laid out tile by tile, byte (R, C) at
//   (R/16)·16·in + (C/128)·2048 + (R%16)·128 + C%128,
// rows padded with zeros to a multiple of 16, so that a unit's 16 rows are
// one run of 2048 bytes (a SwiGLU tile's 8 gate or up rows, half of one).
// The kernels take the layout per matrix (a bit of `lay`), the arithmetic
// is the same in the same order: the sums equal the row layout's bit for
// bit. Read tile by tile, the Qwen3.5-27B FP8 decode step gains 1.0–1.3%
// on an H200 (docs/benchmarks.md, 2026-12-02 from 00:31); cuBLASLt's
// prefill GEMM reads the row layout, so the tiles are a second copy, made
// where the device has the room.

#include "tc.cuh"

#define PIPE_STAGE 2048 // bytes of one unit of one warp: 4 pieces × 32 lanes × 16 bytes

// pipeSwz is the stage offset of row j, 16-byte column c (of 8): rows are
// 128 bytes, odd rows have their halves swapped, so the 8 lanes of a
// fragment-read phase (rows 2q, 2q+1, columns t or 4+t) hit 8 distinct
// 16-byte bank groups.
__device__ __forceinline__ uint32_t pipeSwz(int j, int c) { return j * 128 + ((c ^ ((j & 1) << 2)) << 4); }

// stageFrag reads a lane's fragments of the unit in the stage at shared
// address s: rows g and g+8, pieces t and 4+t.
__device__ __forceinline__ void stageFrag(uint32_t s, uint4& a0, uint4& b0, uint4& a1, uint4& b1) {
    int lane = threadIdx.x & 31, t = lane & 3, g = lane >> 2;
    a0 = lds128(s + pipeSwz(g, t)), b0 = lds128(s + pipeSwz(8 + g, t));
    a1 = lds128(s + pipeSwz(g, 4 + t)), b1 = lds128(s + pipeSwz(8 + g, 4 + t));
}

// unitDot adds a unit's products, times the unit's activation factor f (a
// power of two: pipeStageBy) and the block scales sa and sb, to accA (row
// g) and accB (row g+8): piece() of both pieces, their k-steps issued
// alternately so that no mma waits for the one before it (ncu showed these
// kernels bound by each warp's instruction latency, and fp8mma's code ran
// the two chains of four dependent mma's one after the other). Same
// operations in the same order as MmaDot (which has f = 1: one scale).
__device__ __forceinline__ void unitDot(float& accA, float& accB, float sa, float sb, uint4 a0, uint4 b0, uint4 a1,
                                        uint4 b1, uint4 x0, uint4 x1, uint4 y0, uint4 y1, float f) {
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
    kstep<0>(d0, a0, b0, x0, x1);
    kstep<0>(d1, a1, b1, y0, y1);
    kstep<1>(d0, a0, b0, x0, x1);
    kstep<1>(d1, a1, b1, y0, y1);
    kstep<2>(d0, a0, b0, x0, x1);
    kstep<2>(d1, a1, b1, y0, y1);
    kstep<3>(d0, a0, b0, x0, x1);
    kstep<3>(d1, a1, b1, y0, y1);
    accA = fmaf(sa, (d0[0] + d1[0]) * f, accA);
    accB = fmaf(sb, (d0[2] + d1[2]) * f, accB);
}

// PipeDot is MmaDot over a ring: units first, first+stride, ... of a
// lane's two rows; ring is the shared address of stage 0 of the warp's
// ring; copies 0 and 1 read from pa and pa + oa, copies 2 and 3 from pb
// and pb + ob in unit 0 (pipeSources), lim is how far the lane's 16-byte
// column may start (in - its offset). S-1 units are in flight while one
// is computed.
//
// The sources are two pointers and two 32-bit offsets rather than four
// pointers: with four, ptxas recomputed all four 64-bit addresses from
// the row indices in every unit (~40 of the ~154 instructions of
// f8pipe_add_3's unit, and these kernels are bound by each warp's
// instruction latency). With these, 135: Qwen3.5-27B FP8 decode 121.7 and
// 121.8 against 121.0 and 121.1 tok/s, interleaved — within the noise.
template <int S>
struct PipeDot {
    Rows r;
    int u, stride, nu, in;
    uint32_t ring, oa, ob;
    int lim;
    const uint8_t *pa, *pb;
    uint32_t ustep; // bytes from one unit of a row to the next: 128 (rows), 2048 (tiles)

    // issue copies unit uu into stage slot. A tail past in (the second half
    // of a 64-column last unit) is zero-filled (source size 0, from a valid
    // address in the row).
    __device__ __forceinline__ void issue(int slot, int uu) {
        int lane = threadIdx.x & 31;
        uint32_t c = uu * UNIT, s = ring + slot * PIPE_STAGE + pipeSwz(lane >> 3, lane & 7);
        // (Tiled matrices have no tails: in % 128 == 0.)
        bool ok = (int)c < lim;
        uint32_t off = ok ? uu * ustep : c - (uint32_t)(in - lim), n = ok ? 16 : 0;
        // pipeSwz(4k + i, col) = 512k + pipeSwz(i, col): 4k is even.
        cpAsync16(s, pa + off, n);
        cpAsync16(s + 512, pa + (oa + off), n);
        cpAsync16(s + 1024, pb + off, n);
        cpAsync16(s + 1536, pb + (ob + off), n);
    }

    // prefetch issues the first S-1 units (one commit group each, empty
    // past the warp's last unit).
    __device__ __forceinline__ void prefetch(const Rows& rows, int inCols, int first, int strideUnits, bool active,
                                             uint32_t ringAddr) {
        r = rows;
        in = inCols;
        nu = active ? (inCols + UNIT - 1) / UNIT : 0;
        u = first;
        stride = strideUnits;
        ring = ringAddr;
#pragma unroll
        for (int s = 0; s < S - 1; s++) {
            if (u + s * stride < nu) issue(s, u + s * stride);
            cpCommit();
        }
    }

    // frag reads a lane's fragments of the unit in stage slot.
    __device__ __forceinline__ void frag(int slot, uint4& a0, uint4& b0, uint4& a1, uint4& b1) {
        stageFrag(ring + slot * PIPE_STAGE, a0, b0, a1, b1);
    }

    // finish streams the rest against the f16 activation xs (padded with
    // zeros to a whole unit) and leaves rows g and g+8 of the warp's
    // columns in accA and accB, unit u's products times fac[u]
    // (pipeStageBy's per-unit factors).
    __device__ __forceinline__ void finish(const __half* xs, float& accA, float& accB, const float* fac) {
        int t = threadIdx.x & 3;
        const float *psa = r.sca + r.sa, *psb = r.scb + r.sb; // the rows' block scales
        asm volatile("" : "+l"(psa), "+l"(psb));
        accA = accB = 0.f;
        int rd = 0;
        for (; u < nu; u += stride) {
            // Unit u+(S-1)·stride goes into the stage read last iteration:
            // every lane must be done reading it.
            __syncwarp();
            if (u + (S - 1) * stride < nu) issue(rd == 0 ? S - 1 : rd - 1, u + (S - 1) * stride);
            cpCommit();
            cpWait<S - 1>(); // every group but the newest S-1: unit u is done
            __syncwarp();    // the other lanes' copies
            uint4 a0, b0, a1, b1;
            frag(rd, a0, b0, a1, b1);
            rd = rd == S - 1 ? 0 : rd + 1;
            float sa = __ldg(psa + u), sb = __ldg(psb + u);
            const uint4* xp = (const uint4*)(xs + u * UNIT + 16 * t);
#ifdef FP8_LOADONLY
            // Diagnostic build (as quant_mmv.cuh's QMV_LOADONLY): every
            // fragment and activation word folded in, no mma.
            {
                const uint4 q0 = xp[0], q1 = xp[1], q8 = xp[8], q9 = xp[9];
                uint32_t f = a0.x ^ a0.y ^ a0.z ^ a0.w ^ b0.x ^ b0.y ^ b0.z ^ b0.w ^ a1.x ^ a1.y ^ a1.z ^ a1.w ^ b1.x ^
                             b1.y ^ b1.z ^ b1.w ^ q0.x ^ q0.y ^ q0.z ^ q0.w ^ q1.x ^ q1.y ^ q1.z ^ q1.w ^ q8.x ^ q8.y ^
                             q8.z ^ q8.w ^ q9.x ^ q9.y ^ q9.z ^ q9.w;
                accA += sa * __uint_as_float(f & 0x007fffffu);
                accB += sb * __uint_as_float((f >> 3) & 0x007fffffu);
            }
#else
            unitDot(accA, accB, sa, sb, a0, b0, a1, b1, xp[0], xp[1], xp[8], xp[9], fac[u]);
#endif
        }
        cpWait<0>(); // nothing of the ring outlives the warp
    }
};

// pipeSources sets d's copy sources: copies 0, 1 from rows baseA+i of wa,
// copies 2, 3 from rows baseB+i of wb (i = 4·(k&1) + lane/8, clamped to
// out-1), each lane its 16-byte column of the 128-byte line. A tail past
// in (the second half of a 64-column last unit) is read from the lane's
// column moved back by its offset (a valid address in the row) with
// source size 0: zeros. tiled: wa and wb are tiled copies (fp8_tile16;
// baseA and baseB multiples of 8): rows past out are the copy's zero
// padding, not clamped (their sums are not stored either way).
template <int S>
__device__ __forceinline__ void pipeSources(PipeDot<S>& d, const uint8_t* wa, const uint8_t* wb, int baseA, int baseB,
                                            int out, int in, bool tiled) {
    int lane = threadIdx.x & 31, i = lane >> 3, col = (lane & 7) * 16;
    if (tiled) {
        d.pa = wa + (uint32_t)(baseA >> 4) * 16 * in + (baseA & 15) * 128 + i * 128 + col;
        d.pb = wb + (uint32_t)(baseB >> 4) * 16 * in + (baseB & 15) * 128 + i * 128 + col;
        d.oa = d.ob = 512; // rows i+4
        d.ustep = 2048;
    } else {
        int a0 = min(baseA + i, out - 1), a1 = min(baseA + 4 + i, out - 1);
        int b0 = min(baseB + i, out - 1), b1 = min(baseB + 4 + i, out - 1);
        d.pa = wa + (uint32_t)a0 * in + col;
        d.pb = wb + (uint32_t)b0 * in + col;
        d.oa = (uint32_t)(a1 - a0) * in;
        d.ob = (uint32_t)(b1 - b0) * in;
        d.ustep = UNIT;
    }
    d.lim = in - col; // may be negative (in = 64)
    // Opaque to ptxas, which otherwise rematerialises them from the row
    // indices in every unit (see PipeDot).
    asm volatile("" : "+l"(d.pa), "+l"(d.pb), "+r"(d.oa), "+r"(d.ob), "+r"(d.lim), "+r"(d.ustep));
}

extern __shared__ __align__(16) unsigned char pipeShm[];

// pipeRingAt is the shared address of this warp's ring, after xsBytes of
// activation (and its factors, and the MoE down kernel's table).
template <int S>
__device__ __forceinline__ uint32_t pipeRingAt(int xsBytes) {
    int warp = threadIdx.x >> 5;
    return (uint32_t)__cvta_generic_to_shared(pipeShm) + xsBytes + warp * S * PIPE_STAGE;
}

// pipeFacBytes is the shared memory of the ring kernels' per-unit factors
// (pipeStageBy), after xs: whole 128-byte lines (fp8pipe_plan.go's
// pipeFacBytes).
__device__ __forceinline__ int pipeFacBytes(int units) { return (units * 4 + 127) / 128 * 128; }

// pipeStageBy stages a ring GEMV's activation: mul(x's float4 i, i,
// pre(i, in range)) in f16 into xs[0, pad) (pre's loads are issued with
// x's: a norm weight; mul is times it, or times an expert's routing
// weight), each 128-column unit scaled by a power of two of its own, which
// puts its largest magnitude in [2^13, 2^14), and that power's inverse
// into fac[unit]; where NORM, each warp's sum of squares of the raw x into
// xPrologueRed[warp][0] (pipeNormFactor adds them). Warp w stages units w,
// w+W, ... (W warps), a float4 a lane; a unit's largest magnitude is one
// warp reduction.
//
// Why: xPrologueBy scales the whole activation by one power of two, the
// block's largest magnitude, so between x's arrival and the first unit
// every ring GEMV ran a block reduction (two barriers and a pass over the
// warps' maxima). The probes put it at ~0.5 µs of each launch's ~2.4 µs
// from its wait to x staged (PROBE_MARK/PROBE_MARK2), and a diagnostic
// build without it decoded Qwen3.5-27B FP8 2.0% faster. With this staging:
// fed decode 135.5-135.6 tok/s against 134.1-134.2, every interleaved
// round (one H200; conformance and the FP8 fixtures' parity as before:
// docs/benchmarks.md, 2026-12-02 from 15:52). Per-unit powers keep at
// least the precision of one: each unit's largest element gets f16's
// full range. The MoE rings stage theirs the same way (neutral in speed on
// the MiniMax-M2 and DeepSeek-V3 slices; a slot's w_k·h_k no longer shares
// one power with the other slots'). Per-unit "staged" flags in place of
// the final barrier lost 0.1-0.2% (docs/benchmarks.md, 2026-12-02 from
// 17:59).
#define PIPE_XK 6 // units a warp loads at once (Qwen3.5-27B: at most 6 a warp)
template <bool NORM, class Pre, class Mul>
__device__ __forceinline__ void pipeStageBy(__half* xs, float* fac, const float* __restrict__ x, int in, Pre pre,
                                            Mul mul) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
    const int units = (in + UNIT - 1) / UNIT, nv = in / 4;
    const float4* x4 = (const float4*)x;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    __half2* x2 = (__half2*)xs;
    float s = 0.f;
    for (int u0 = warp; u0 < units; u0 += PIPE_XK * W) {
        float4 v[PIPE_XK], g[PIPE_XK];
#pragma unroll
        for (int k = 0; k < PIPE_XK; k++) { // every load before any use: one L2 round trip
            const int i = (u0 + k * W) * 32 + lane;
            const bool ok = u0 + k * W < units && i < nv;
            v[k] = ok ? x4[i] : zero;
            g[k] = pre(i, ok);
        }
#pragma unroll
        for (int k = 0; k < PIPE_XK; k++) {
            const int u = u0 + k * W, i = u * 32 + lane;
            if (u >= units) break; // warp-uniform
            float4 a = v[k];
            if (NORM) s += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
            a = mul(a, i, g[k]);
            const int sh = stagePower(warpMax(fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w)))));
            const float sc = pow2f(sh);
            x2[2 * i] = __floats2half2_rn(a.x * sc, a.y * sc); // i past nv: the pad's zeros
            x2[2 * i + 1] = __floats2half2_rn(a.z * sc, a.w * sc);
            if (lane == 0) fac[u] = pow2f(-sh);
        }
        if (u0 == warp) PROBE_MARK2(); // thread 0's first loads are in
    }
    if (NORM) {
        s = warpSum(s);
        if (lane == 0) xPrologueRed[warp][0] = s;
    }
    __syncthreads();
}

// pipeStage is pipeStageBy times the norm weight nw where NORM.
template <bool NORM>
__device__ __forceinline__ void pipeStage(__half* xs, float* fac, const float* __restrict__ x,
                                          const float* __restrict__ nw, int in) {
    const float4* n4 = (const float4*)nw;
    if constexpr (NORM)
        pipeStageBy<true>(
            xs, fac, x, in,
            [=](int i, bool ok) { return ok ? __ldg(n4 + i) : make_float4(0.f, 0.f, 0.f, 0.f); },
            [](float4 a, int, float4 g) { return make_float4(a.x * g.x, a.y * g.y, a.z * g.z, a.w * g.w); });
    else
        pipeStageBy<false>(
            xs, fac, x, in, [](int, bool) { return make_float4(0.f, 0.f, 0.f, 0.f); },
            [](float4 a, int, float4) { return a; });
}

// pipeNormPrefetch asks L2, before the PDL wait, for the lines of the norm
// weight nw [in] that this warp's units will read (four 128-byte lines a
// unit, lanes 0-3).
//
// Why: a step streams ~27 GB through the 50 MB L2, so a layer's norm
// weight, last read a step ago, comes from DRAM, behind the saturating
// streams, after the wait. The probes put thread 0's x and norm weight in
// 3.37 µs after the gate/up GEMV's wait (1.69 where no norm weight is
// read); with the lines asked for before the wait 2.94, and a diagnostic
// build that read no norm weight at all was +0.4-0.5%. Prefetched:
// Qwen3.5-27B FP8 fed decode +0.2-0.3%, every round (one H200;
// docs/benchmarks.md, 2026-12-02 from 17:59). The weight is constant, so
// nothing the predecessor writes is read early.
__device__ __forceinline__ void pipeNormPrefetch(const float* nw, int in) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
    for (int u = warp; u * UNIT < in; u += W)
        if (lane < 4 && u * UNIT + lane * 32 < in)
            prefetchL2(nw + u * UNIT + lane * 32);
}

// pipeNormFactor is 1/rms of the x pipeStageBy<true> staged (after its
// barrier; read after the units, off the path to the first).
__device__ __forceinline__ float pipeNormFactor(int in, float eps) {
    float ss = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) ss += xPrologueRed[w][0];
    return rsqrtf(ss / in + eps);
}

// pipeRed puts each warp's partial row sums in the first stage of its own
// ring, drained when they are written (tileSums), instead of a static
// [32][16] array: those 2 KiB of static shared memory kept the down
// projection of Qwen3.5-27B (17408 columns: 34 KiB of activation) from a
// ring of 4 stages at 24 warps, by 1280 bytes.
template <int S>
__device__ __forceinline__ Red pipeRedAt(int xsBytes) {
    return Red{(float*)(pipeShm + xsBytes), S * PIPE_STAGE / 4};
}

// pipeGemv is gemv of fp8mma.cu (MODE 0 y = W·x, 1 y += W·x, 2 y =
// W·rmsnorm(x)) over the ring, for blocks of any number of warps (≤ 32):
// G = warps/wpr tiles per block, b the block's index within its matrix.
template <int S, int MODE>
__device__ __forceinline__ void pipeGemv(float* y, const float* __restrict__ x, const float* __restrict__ nw, float eps,
                                         const uint8_t* w, const float* sc, int out, int in, int wpr, int b0, int nsc,
                                         int b, bool tiled) {
    const int units = (in + UNIT - 1) / UNIT, xsb = units * UNIT * 2 + pipeFacBytes(units);
    __half* xs = (__half*)pipeShm;
    float* fac = (float*)(pipeShm + units * UNIT * 2);
    int warp = threadIdx.x >> 5, G = (blockDim.x >> 5) / wpr;
    int base = (b * G + warp / wpr) * 16;
    PipeDot<S> d;
    pipeSources(d, w, w, base, base + 8, out, in, tiled);
    d.prefetch(gemvRows(w, sc, base, out, in, b0, nsc), in, warp % wpr, wpr, base < out, pipeRingAt<S>(xsb));
    if (MODE == 2) pipeNormPrefetch(nw, in);
    // The next launch only after the wait: triggered before it, the next
    // grid is launched while this one's predecessor still runs, and its
    // wait returned ~3.8 µs after this grid's last block ended, not the
    // ~1.2 of a grid launched after its predecessor's wait (probes of
    // Qwen3.5-27B FP8: the gate/up GEMV after the out/o projection).
    // After the wait: 130.8-130.9 against 130.0-130.4 tok/s (interleaved
    // builds, one H200); the gate/up GEMV's wait then returns 2.3 µs after.
    pdlWait();
    pdlLaunchDependents();
    pipeStage<MODE == 2>(xs, fac, x, nw, in);
    PROBE_MARK(); // the activation staged
    float accA, accB;
    d.finish(xs, accA, accB, fac);
    const float k = MODE == 2 ? pipeNormFactor(in, eps) : 1.f;
    __syncwarp(); // every lane's last fragment reads are done: pipeRed may reuse the ring
    gemvStore<MODE>(y, pipeRedAt<S>(xsb), accA, accB, k, b, G, wpr, out);
}

// lay: bit m set when matrix m is a tiled copy.
#define PIPE_GEMV(NAME, S, MODE)                                                              \
    extern "C" __global__ void __launch_bounds__(768, 1) NAME(GEMV_ARGS, int lay) { PROBE_KERNEL();           \
        pipeGemv<S, MODE>(y, x, nullptr, 0.f, w, sc, out, in, wpr, b0, nsc, blockIdx.x, lay & 1); \
    }
// The block's matrix by selection, then one inlined call (not four, as
// the if-chain of fp8mma's NORM_KERNEL: less code, fewer registers).
#define PIPE_NORM(NAME, S)                                                                     \
    extern "C" __global__ void __launch_bounds__(768, 1) NAME(NORM_ARGS, int lay) { PROBE_KERNEL();            \
        int b = blockIdx.x, m = (b >= n0) + (b >= n1) + (b >= n2);                             \
        float* y = m == 0 ? y0 : m == 1 ? y1 : m == 2 ? y2 : y3;                              \
        const uint8_t* w = m == 0 ? w0 : m == 1 ? w1 : m == 2 ? w2 : w3;                      \
        const float* sc = m == 0 ? s0 : m == 1 ? s1 : m == 2 ? s2 : s3;                       \
        int out = m == 0 ? out0 : m == 1 ? out1 : m == 2 ? out2 : out3;                       \
        int first = m == 0 ? 0 : m == 1 ? n0 : m == 2 ? n1 : n2;                              \
        pipeGemv<S, 2>(y, x, nw, eps, w, sc, out, in, wpr, b0, nsc, b - first, (lay >> m) & 1); \
    }

// pipeSwiGLU is normSwiGLU over the ring (tiles of 8 outputs).
template <int S>
__device__ __forceinline__ void pipeSwiGLU(float* act, const float* __restrict__ x, const float* __restrict__ nw,
                                           float eps, const uint8_t* wg, const float* sg, const uint8_t* wu,
                                           const float* su, int out, int in, int wpr, int b0, int nsc, bool tiled) {
    const int units = (in + UNIT - 1) / UNIT, xsb = units * UNIT * 2 + pipeFacBytes(units);
    __half* xs = (__half*)pipeShm;
    float* fac = (float*)(pipeShm + units * UNIT * 2);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, G = (blockDim.x >> 5) / wpr;
    int base = (blockIdx.x * G + warp / wpr) * 8;
    int o = min(base + (lane >> 2), out - 1), t = lane & 3;
    uint32_t off = (uint32_t)o * in + 16 * t, soff = (uint32_t)(o / b0) * nsc;
    PipeDot<S> d;
    pipeSources(d, wg, wu, base, base, out, in, tiled);
    d.prefetch(Rows{wg, wu, sg, su, off, off, soff, soff}, in, warp % wpr, wpr, base < out, pipeRingAt<S>(xsb));
    pipeNormPrefetch(nw, in);
    // The next launch only after the wait (see pipeGemv).
    pdlWait();
    pdlLaunchDependents();
    pipeStage<true>(xs, fac, x, nw, in);
    PROBE_MARK(); // as pipeGemv
    float accA, accB;
    d.finish(xs, accA, accB, fac);
    const float k = pipeNormFactor(in, eps);
    __syncwarp(); // as pipeGemv
    swigluStore(act, pipeRedAt<S>(xsb), accA, accB, k, G, wpr, out);
}

#define PIPE_SWIGLU(NAME, S)                                                                   \
    extern "C" __global__ void __launch_bounds__(768, 1) NAME(SWIGLU_ARGS, int lay) { PROBE_KERNEL();          \
        pipeSwiGLU<S>(act, x, nw, eps, wg, sg, wu, su, out, in, wpr, b0, nsc, lay == 3);      \
    }

// Rings of 3, 4, 6 and 8 stages (planPipe picks).
PIPE_GEMV(f8pipe_r_3, 3, 0)
PIPE_GEMV(f8pipe_r_4, 4, 0)
PIPE_GEMV(f8pipe_r_6, 6, 0)
PIPE_GEMV(f8pipe_r_8, 8, 0)
PIPE_GEMV(f8pipe_add_3, 3, 1)
PIPE_GEMV(f8pipe_add_4, 4, 1)
PIPE_GEMV(f8pipe_add_6, 6, 1)
PIPE_GEMV(f8pipe_add_8, 8, 1)
PIPE_NORM(f8pipe_norm_3, 3)
PIPE_NORM(f8pipe_norm_4, 4)
PIPE_NORM(f8pipe_norm_6, 6)
PIPE_NORM(f8pipe_norm_8, 8)
PIPE_SWIGLU(f8pipe_swiglu_3, 3)
PIPE_SWIGLU(f8pipe_swiglu_4, 4)
PIPE_SWIGLU(f8pipe_swiglu_6, 6)
PIPE_SWIGLU(f8pipe_swiglu_8, 8)

// fp8_tile16 writes dst, the tiled copy of the row-major [out, in] FP8
// matrix src (in % 128 == 0; dst holds cdiv(out, 16)·16 rows, the padding
// zeros; see the top of this file), one 16-byte piece a thread per pass.
extern "C" __global__ void fp8_tile16(uint8_t* dst, const uint8_t* src, int out, int in, long long pieces) {
    const int units = in / UNIT;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < pieces;
         q += (long long)gridDim.x * blockDim.x) {
        long long o = q * 16, tile = o >> 11;
        int within = (int)(o & 2047);
        long long r = tile / units * 16 + (within >> 7);
        int c = (int)(tile % units) * UNIT + (within & 127);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < out) v = *(const uint4*)(src + r * in + c);
        *(uint4*)(dst + o) = v;
    }
}
