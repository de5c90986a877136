// The ring-streamed FP8 GEMV (fp8pipe.cuh) with its work split evenly over
// the SMs by (tile, unit) rather than by whole tiles — "stream-K" (included
// by fp8mma.cu after fp8pipe.cuh; fp8pipe.go launches it where planStreamK
// says it fills the SMs better than whole tiles do).
//
// Why: the output projections of Qwen3.5-27B (5120 rows: 320 tiles of 16)
// go one block per SM with whole tiles: 3 tiles a block make 107 blocks,
// and 25 of the 132 SMs stream nothing. In the captured step those
// projections ran at 81% of their byte time — 107/132 — where the SwiGLU
// GEMV, whose 2176 tiles of 8 outputs split evenly, ran at 94%.
//
// Here the matrix is tiles × U work items (U = 128-column units per row),
// in tile-major order. Block b takes items [b·N/B, (b+1)·N/B) and its warp
// w an even, contiguous share of those; the plan keeps a warp's share at
// most U items, so it spans at most two tiles and a block's range at least
// U, so a tile spans at most two blocks. A warp streams its items through
// its ring as PipeDot does (stride 1: the source row changes at a tile's
// end), and leaves one partial sum per tile it touched (a segment) in
// shared memory. The block sums its segments per tile in warp order, so
// the result does not depend on timing.
//
// A tile cut by a block boundary has its two partial sums written to
// part[boundary][0 (the earlier block), 1] and counted in cnt[boundary]
// (atomicAdd after a __threadfence); the block that counts second adds
// part 0 + part 1 — in that order, whichever block it is — into y and
// resets the counter to zero for the next launch (every later launch on
// the same scratch waits, through griddepcontrol.wait, for this grid).
//
// Dynamic shared memory: the f16 activation (padded to whole units), the
// warps' rings (2 KiB a stage), then two segments a warp: 16 sums and a
// tile index each.

template <int S>
struct SeqDot {
    const uint8_t* w;
    int in, out, U, lim;
    uint32_t ring;
    int it, iu;              // issue cursor: tile and unit of the next item to copy
    uint32_t r0, r1, r2, r3; // byte offsets of the lane's rows of tile it (+ its column)

    // rows points the issue cursor's sources at tile t: copy k reads row
    // 16t + 4k + lane/8 (clamped to the last row; those sums are not stored).
    __device__ __forceinline__ void rows(int t) {
        int i = (threadIdx.x & 31) >> 3, col = (threadIdx.x & 7) * 16, base = t * 16 + i;
        r0 = (uint32_t)min(base, out - 1) * in + col;
        r1 = (uint32_t)min(base + 4, out - 1) * in + col;
        r2 = (uint32_t)min(base + 8, out - 1) * in + col;
        r3 = (uint32_t)min(base + 12, out - 1) * in + col;
        asm volatile("" : "+r"(r0), "+r"(r1), "+r"(r2), "+r"(r3));
    }

    // issue copies the cursor's item into stage slot and advances the cursor.
    // A tail past in (the second half of a 64-column last unit) is
    // zero-filled from a valid address of the row (source size 0).
    __device__ __forceinline__ void issue(int slot) {
        int lane = threadIdx.x & 31;
        uint32_t c = iu * UNIT, s = ring + slot * PIPE_STAGE + pipeSwz(lane >> 3, lane & 7);
        bool ok = (int)c < lim;
        uint32_t off = ok ? c : c - (uint32_t)(in - lim), n = ok ? 16 : 0;
        cpAsync16(s, w + (r0 + off), n);
        cpAsync16(s + 512, w + (r1 + off), n);
        cpAsync16(s + 1024, w + (r2 + off), n);
        cpAsync16(s + 1536, w + (r3 + off), n);
        if (++iu == U) {
            iu = 0;
            rows(++it);
        }
    }

    // frag reads a lane's fragments of the unit in stage slot (PipeDot's).
    __device__ __forceinline__ void frag(int slot, uint4& a0, uint4& b0, uint4& a1, uint4& b1) {
        int lane = threadIdx.x & 31, t = lane & 3, g = lane >> 2;
        uint32_t s = ring + slot * PIPE_STAGE;
        a0 = lds128(s + pipeSwz(g, t)), b0 = lds128(s + pipeSwz(8 + g, t));
        a1 = lds128(s + pipeSwz(g, 4 + t)), b1 = lds128(s + pipeSwz(8 + g, 4 + t));
    }
};

// streamKScales points psa and psb at the block-scale rows of the lane's
// rows g and g+8 of tile t.
__device__ __forceinline__ void streamKScales(const float*& psa, const float*& psb, const float* sc, int t, int out,
                                              int b0, int nsc) {
    int g = (threadIdx.x & 31) >> 2;
    psa = sc + (long)(min(t * 16 + g, out - 1) / b0) * nsc;
    psb = sc + (long)(min(t * 16 + 8 + g, out - 1) / b0) * nsc;
}

// pipeStreamK is y = W·x (MODE 0) or y += W·x (MODE 1; y must not alias
// x) over tiles tiles of 16 rows, the work split as above; part holds
// 2·16 floats and cnt one counter per block boundary (gridDim.x + 1).
template <int S, int MODE>
__device__ __forceinline__ void pipeStreamK(float* y, const float* __restrict__ x, const uint8_t* w, const float* sc,
                                            int out, int in, int b0, int nsc, int tiles, float* part, int* cnt) {
    __shared__ int last[2];
    const int U = (in + UNIT - 1) / UNIT, pad = U * UNIT;
    const int W = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long total = (long)tiles * U;
    const int lo = (int)(total * blockIdx.x / gridDim.x), hi = (int)(total * (blockIdx.x + 1) / gridDim.x);
    const int n = hi - lo;
    const int wlo = lo + (int)((long)n * warp / W), m = lo + (int)((long)n * (warp + 1) / W) - wlo;
    __half* xs = (__half*)pipeShm;
    float* segv = (float*)(pipeShm + pad * 2 + W * S * PIPE_STAGE); // [W][2][16]
    int* segt = (int*)(segv + W * 32);                               // [W][2]

    SeqDot<S> d;
    d.w = w, d.in = in, d.out = out, d.U = U, d.lim = in - (lane & 7) * 16;
    d.ring = pipeRing<S>(pad);
    d.it = wlo / U, d.iu = wlo % U;
    d.rows(d.it);
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < m) d.issue(s);
        cpCommit();
    }
    pdlLaunchDependents();
    pdlWait();
    float k = gemvPrologue<0>(xs, x, nullptr, 0.f, in);

    int ct = wlo / U, cu = wlo % U, seg = 0;
    const float *psa, *psb;
    streamKScales(psa, psb, sc, ct, out, b0, nsc);
    asm volatile("" : "+l"(psa), "+l"(psb));
    if (lane == 0) segt[warp * 2] = segt[warp * 2 + 1] = -1;
    float accA = 0.f, accB = 0.f;
    const int t = lane & 3, g = lane >> 2;
    int rd = 0;
    for (int j = 0; j < m; j++) {
        // Item j+S-1 goes into the stage read last iteration: every lane
        // must be done reading it.
        __syncwarp();
        if (j + S - 1 < m) d.issue(rd == 0 ? S - 1 : rd - 1);
        cpCommit();
        cpWait<S - 1>(); // every group but the newest S-1: item j is done
        __syncwarp();    // the other lanes' copies
        uint4 a0, b0v, a1, b1v;
        d.frag(rd, a0, b0v, a1, b1v);
        rd = rd == S - 1 ? 0 : rd + 1;
        float sa = __ldg(psa + cu), sb = __ldg(psb + cu);
        const uint4* xp = (const uint4*)(xs + cu * UNIT + 16 * t);
        unitDot(accA, accB, sa, sb, a0, b0v, a1, b1v, xp[0], xp[1], xp[8], xp[9]);
        if (++cu == U || j == m - 1) {
            // The segment of tile ct ends: its sums (every lane of a row
            // holds it; lane 4g writes) go to shared memory.
            if (t == 0) {
                segv[(warp * 2 + seg) * 16 + g] = accA;
                segv[(warp * 2 + seg) * 16 + 8 + g] = accB;
            }
            if (lane == 0) segt[warp * 2 + seg] = ct;
            seg++;
            accA = accB = 0.f;
            if (cu == U) {
                cu = 0;
                streamKScales(psa, psb, sc, ++ct, out, b0, nsc);
            }
        }
    }
    cpWait<0>(); // nothing of the ring outlives the warp
    __syncthreads();

    // The block's tiles tA..tB; thread i sums row i%16 of tile tA + i/16.
    const int tA = lo / U, tB = (hi - 1) / U, i = threadIdx.x, tt = tA + i / 16, r = i % 16;
    const bool cutA = lo % U != 0, cutB = hi % U != 0; // tA began, tB goes on, in a neighbour
    const bool mine = n > 0 && tt <= tB;
    float v = 0.f;
    if (mine) {
        for (int ww = 0; ww < W; ww++) {
#pragma unroll
            for (int s = 0; s < 2; s++) {
                if (segt[ww * 2 + s] == tt) v += segv[(ww * 2 + s) * 16 + r];
            }
        }
    }
    // role: 1 for the later half of tile tA (boundary blockIdx.x), 0 for
    // the earlier half of tile tB (boundary blockIdx.x + 1), -1 whole.
    const int role = !mine ? -1 : tt == tA && cutA ? 1 : tt == tB && cutB ? 0 : -1;
    const int bd = blockIdx.x + (role == 0);
    const int o = tt * 16 + r;
    if (mine && role < 0 && o < out) y[o] = MODE == 1 ? y[o] + v * k : v * k;
    if (role >= 0) {
        part[(bd * 2 + role) * 16 + r] = v;
        __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) last[0] = cutA ? atomicAdd(cnt + blockIdx.x, 1) == 1 : 0;
    if (threadIdx.x == 32) last[1] = cutB ? atomicAdd(cnt + blockIdx.x + 1, 1) == 1 : 0;
    __threadfence();
    __syncthreads();
    if (role >= 0 && last[role == 0 ? 1 : 0]) {
        float s = __ldcg(part + (bd * 2) * 16 + r) + __ldcg(part + (bd * 2 + 1) * 16 + r);
        if (o < out) y[o] = MODE == 1 ? y[o] + s * k : s * k;
        if (r == 0) cnt[bd] = 0;
    }
}

#define PIPE_STREAMK_ARGS                                                                                  \
    float *y, const float *__restrict__ x, const uint8_t *w, const float *sc, int out, int in, int b0, int nsc, \
        int tiles, float *part, int *cnt
#define PIPE_STREAMK(NAME, S, MODE)                                                         \
    extern "C" __global__ void __launch_bounds__(768, 1) NAME(PIPE_STREAMK_ARGS) {          \
        pipeStreamK<S, MODE>(y, x, w, sc, out, in, b0, nsc, tiles, part, cnt);              \
    }
PIPE_STREAMK(f8pipe_k_r_3, 3, 0)
PIPE_STREAMK(f8pipe_k_r_4, 4, 0)
PIPE_STREAMK(f8pipe_k_r_6, 6, 0)
PIPE_STREAMK(f8pipe_k_r_8, 8, 0)
PIPE_STREAMK(f8pipe_k_add_3, 3, 1)
PIPE_STREAMK(f8pipe_k_add_4, 4, 1)
PIPE_STREAMK(f8pipe_k_add_6, 6, 1)
PIPE_STREAMK(f8pipe_k_add_8, 8, 1)
