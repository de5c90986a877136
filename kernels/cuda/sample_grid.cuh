// The draw over many blocks (sample_draw_grid): sample_draw's rule and
// passes, with the vocabulary spread over a block an SM instead of one
// block's 32 warps. One block read the 152K logits and probabilities
// through one SM's share of L2 and walked the winning warp's 4748 ids 32
// at a time: 80-99 µs a temperature-only draw on an H200, 310-404 with
// top-p over the vocabulary (docs/benchmarks.md, 2026-12-01 from 08:40).
//
// The launch is cooperative (every block resident at once), so the blocks
// meet at grid barriers (gridSync) where the single block met at
// __syncthreads: a pass's per-block float sums go to a slot of their own
// in GridScratch, and after the barrier every block reduces all of them in
// the same fixed order, so every block reaches the same digit, boundary
// and target with no further exchange; integer sums (top-k's counts,
// top-p's masses in fixed point: gridMassSelect) go into one global
// histogram by atomics, whose order does not change them. Global warp s = block·32 + warp
// owns the s-th contiguous segment of the ids, so id order is still
// segment order. The ranking rules, tie handling and roundings are
// sample_draw's; only the order in which partial sums are added differs
// (it did between the host and one block already: conformance's `draw`
// cases hold both kernels to the host's cumulative distribution).

#define SG_MAXB 160   // blocks at most (an H200 has 132 SMs; one block each)
#define SG_MAXPH 48   // grid barriers a draw passes at most (~28 on the longest path)
#define SG_SLOT 17    // doubles a block writes a phase

// GridScratch is the grid's shared state in global memory (sample.go's
// sampleMod.grid, sampleGridBytes; zeroed once at allocation: bar counts
// back to zero at every barrier, the rest is set at each draw's start).
struct GridScratch {
    unsigned bar[2];  // arrivals, generation
    int draw, last, cnt, pad;
    int res[SG_MAXPH];  // a phase's one result (nth, last of a value), -1 unless found
    int hist[4][256];   // countSelect's histograms, a pass each
    unsigned long long mass[4][256];  // gridMassSelect's, in fixed point (SG_FIX)
    int cid[SAMPLE_SMALLK + 1];
    float cp[SAMPLE_SMALLK + 1];
    double part[SG_MAXPH][SG_MAXB][SG_SLOT];
};
static_assert(sizeof(GridScratch) <= (2 << 20), "sample.go allocates 2 MiB for GridScratch");

// gridSync is a barrier over the whole (co-resident) grid: writes before
// it are visible to every block after it.
__device__ __forceinline__ void gridSync(GridScratch* gs) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = &gs->bar[1];
        const unsigned g = *gen;  // read before arriving: it cannot move until we have
        __threadfence();
        if (atomicAdd(&gs->bar[0], 1u) == gridDim.x - 1) {
            atomicExch(&gs->bar[0], 0u);  // no block arrives again before the generation moves
            __threadfence();
            atomicAdd(&gs->bar[1], 1u);
        } else {
            while (*gen == g) __nanosleep(20);
        }
        __threadfence();
    }
    __syncthreads();
}

__device__ __forceinline__ Seg gridSeg(int n) {
    const int segs = gridDim.x * SAMPLE_WARPS, len = (n + segs - 1) / segs;
    const int s = blockIdx.x * SAMPLE_WARPS + (threadIdx.x >> 5);
    return Seg{min(n, s * len), min(n, (s + 1) * len)};
}

// Grid carries a draw's per-block state between the steps below.
struct Grid {
    GridScratch* gs;
    int ph;          // the next barrier's phase: the slot its writes go to
    double* tot;     // shared: warp totals in the block, and
    double* before;  // the block's total before each warp ([32]: the block's)
    double* gb;      // shared: [0] blocks before this one, [1] the grid's total
};

// blockPrefix reads the G block values slot[b][0] of phase ph (after its
// barrier) and leaves in g.gb this block's exclusive prefix and the total,
// both added in the same order by every block: lane l a contiguous run of
// ceil(G/32) blocks, then the lanes' scan.
__device__ void blockPrefix(Grid& g, int ph) {
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, G = gridDim.x, run = (G + 31) / 32;
        double mine = 0, upto = 0;  // upto: this block's prefix within the lane's run
        for (int r = 0; r < run; r++) {
            const int b = lane * run + r;
            if (b >= G) break;
            if (b == (int)blockIdx.x) upto = mine;
            mine += __ldcg(&g.gs->part[ph][b][0]);
        }
        double x = mine;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        const double all = __shfl_sync(0xffffffffu, x, 31);
        if ((int)blockIdx.x / run == lane) g.gb[0] = x - mine + upto;
        if (lane == 0) g.gb[1] = all;
    }
    __syncthreads();
}

// gridTotals is warpTotals over the grid: each thread's v summed by warp
// (g.tot, g.before within the block), by block and over the blocks
// (g.gb). One barrier. Returns the grid's total.
__device__ double gridTotals(Grid& g, double v) {
    const double mine = warpTotals(v, g.tot, g.before);
    if (threadIdx.x == 0) g.gs->part[g.ph][blockIdx.x][0] = mine;
    gridSync(g.gs);
    blockPrefix(g, g.ph++);
    const double all = g.gb[1];
    __syncthreads();
    return all;
}

// gridMax is the grid's largest v (NaN ignored).
__device__ float gridMax(Grid& g, float v, float* sh) {
    v = blockMax(v, sh);
    if (threadIdx.x == 0) g.gs->part[g.ph][blockIdx.x][0] = v;
    gridSync(g.gs);
    if (threadIdx.x < 32) {
        float m = -INFINITY;
        for (int b = threadIdx.x; b < (int)gridDim.x; b += 32) m = fmaxf(m, (float)__ldcg(&g.gs->part[g.ph][b][0]));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) sh[0] = m;
    }
    g.ph++;
    __syncthreads();
    v = sh[0];
    __syncthreads();
    return v;
}

// gridNth is nthOfValue over the grid: the id of the j-th (1-based) token
// in id order whose p has bits vb, in the set (lo, tie); -1 if fewer. Two
// barriers: the counts, then the one block that holds it says which.
__device__ int gridNth(Grid& g, const float* p, int n, unsigned vb, long j, float lo, int tie) {
    const Seg sg = gridSeg(n);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    gridTotals(g, (double)countOfValue(p, sg, lane, vb, lo, tie));
    const int slot = g.ph;
    const long b0 = (long)g.gb[0] + (long)g.before[warp], c = (long)g.tot[warp];
    if (b0 < j && b0 + c >= j) walkNth(p, sg, lane, vb, j, b0, lo, tie, &g.gs->res[slot]);  // one warp of one block
    gridSync(g.gs);
    g.ph++;
    return __ldcg(&g.gs->res[slot]);
}

// gridLast is lastOfValue over the grid.
__device__ int gridLast(Grid& g, const float* p, int n, unsigned vb, float lo, int tie) {
    const int last = lastOfValueIn(p, gridSeg(n), threadIdx.x & 31, vb, lo, tie);
    const int slot = g.ph;
    if ((threadIdx.x & 31) == 0 && last >= 0) atomicMax(&g.gs->res[slot], last);
    gridSync(g.gs);
    g.ph++;
    return __ldcg(&g.gs->res[slot]);
}

// binScatter adds each of a warp's 16 per-lane bins over the warp and
// leaves digit d's total in lanes 2d and 2d+1: at each step a lane keeps
// the half of its bins that its partner (lane ^ o) gives away, and adds
// the partner's copy of that half. A fixed order, the same in every block.
__device__ __forceinline__ double binScatter(const double (&bin)[16], int lane) {
    double b8[8], b4[4], b2[2];
    const bool h16 = lane & 16, h8 = lane & 8, h4 = lane & 4, h2 = lane & 2;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const double give = h16 ? bin[k] : bin[k + 8];
        b8[k] = (h16 ? bin[k + 8] : bin[k]) + __shfl_xor_sync(0xffffffffu, give, 16);
    }
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const double give = h8 ? b8[k] : b8[k + 4];
        b4[k] = (h8 ? b8[k + 4] : b8[k]) + __shfl_xor_sync(0xffffffffu, give, 8);
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const double give = h4 ? b4[k] : b4[k + 2];
        b2[k] = (h4 ? b4[k + 2] : b4[k]) + __shfl_xor_sync(0xffffffffu, give, 4);
    }
    const double give = h2 ? b2[0] : b2[1];
    const double b1 = (h2 ? b2[1] : b2[0]) + __shfl_xor_sync(0xffffffffu, give, 2);
    return b1 + __shfl_xor_sync(0xffffffffu, b1, 1);
}

// gridSelectRanked is selectRanked<false> (by count: top-k past
// SAMPLE_SMALLK) over the grid; by mass the grid takes gridMassSelect. Per
// pass the block's count at each of 16 digits goes to its slot, and every
// block adds the slots digit by digit (warp k digit k, its lanes a fixed
// stride of blocks, then the warp's tree) before choosing the digit as one
// block did.
__device__ bool gridSelectRanked(Grid& g, const float* p, int n, float lo, int tie, double want, unsigned* vb,
                                 double* before, double (*sel)[17], int* res) {
    const Seg sg = gridSeg(n);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    unsigned prefix = 0;
    double acc = 0;
    for (int shift = 28; shift >= 0; shift -= 4) {
        double bin[16];
        rankBins<false>(p, sg, lane, shift == 28 ? 0u : ~0u << (shift + 4), prefix, shift, lo, tie, bin);
        // The warp's 16 sums, reduced and scattered: lanes 2d and 2d+1 end
        // with digit d's (16 shuffles, where a tree a digit took 80).
        const double d = binScatter(bin, lane);
        if ((lane & 1) == 0) sel[warp][lane >> 1] = d;
        __syncthreads();
        if (warp < 16) {  // warp k adds digit k over the block's warps
            const double t = warpSumD(sel[lane][warp]);
            if (lane == 0) g.gs->part[g.ph][blockIdx.x][warp] = t;
        }
        gridSync(g.gs);
        if (warp < 16) {
            double t = 0;
            for (int b = lane; b < (int)gridDim.x; b += 32) t += __ldcg(&g.gs->part[g.ph][b][warp]);
            t = warpSumD(t);
            if (lane == 0) sel[1][warp] = t;  // (sel's rows are free again: every warp wrote its own before the barrier)
        }
        g.ph++;
        __syncthreads();
        if (threadIdx.x == 0) pickRankedDigit(sel, acc, want, shift == 28, res);
        if (!takeDigit(res, prefix, shift)) return false;
        acc = sel[0][16];
        __syncthreads();
    }
    *vb = prefix;
    *before = acc;
    return true;
}

// SG_FIX is the fixed point of gridMassSelect's weights: a probability
// (at most 1) as an integer count of 2^-40, truncated. Fewer than 2^23 of
// them (sample.go's drawGridMaxIDs) sum below 2^63, and integer sums do
// not depend on their order, so blocks
// may add theirs with atomics and still reach the same digit. The
// truncation moves a sum by less than n·2^-40 (1.4e-7 at 152K ids, where
// the host's and the device's float64 sums already differ by their own
// roundings; conformance's draw cases hold the result to the host's
// cumulative distribution within 2e-5).
#define SG_FIX 1099511627776.0

// gridMassSelect is selectRanked<true> (by mass) over the grid, 8 bits a
// pass instead of 4: each block's 256 fixed-point sums in shared memory,
// added into the pass's global histogram with atomics, so a pass is one
// barrier and a read of 256 words (half the passes, and none of the
// per-block slots that 256 doubles a block would need).
__device__ bool gridMassSelect(Grid& g, const float* p, int n, float lo, int tie, double want, unsigned* vb,
                               double* before, unsigned long long* hm, int* res) {
    const Seg sg = gridSeg(n);
    const int lane = threadIdx.x & 31;
    const double wantFix = want * SG_FIX;
    unsigned prefix = 0;
    unsigned long long acc = 0;
    __shared__ unsigned long long accNext;
    for (int pass = 0, shift = 24; shift >= 0; pass++, shift -= 8) {
        const unsigned mask = shift == 24 ? 0u : ~0u << (shift + 8);
        for (int k = threadIdx.x; k < 256; k += SAMPLE_THREADS) hm[k] = 0;
        __syncthreads();
        for (int base = sg.lo; base < sg.hi; base += 128) {
            float vs[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int i = base + 32 * q + lane;
                vs[q] = i < sg.hi ? p[i] : -1.f;
            }
#pragma unroll
            for (int q = 0; q < 4; q++) {
                // The lanes that share a digit add their weights first (one
                // shared atomic a digit a step: a flat distribution puts a
                // whole warp in one or two digits, whose 32 serialised adds
                // made a Qwen3-8B sampled step 70 µs slower than the 4-bit
                // passes). A weight is at most 2^40, so its two 20-bit halves'
                // sums over 32 lanes fit 32 bits for __reduce_add_sync.
                const int i = base + 32 * q + lane;
                const unsigned bits = __float_as_uint(vs[q]);
                const bool in = i < sg.hi && (bits & mask) == prefix && keptBy(vs[q], i, lo, tie) && vs[q] > 0.f;
                const int dg = in ? (int)((bits >> shift) & 255) : 256;
                const unsigned same = __match_any_sync(0xffffffffu, dg);
                const unsigned long long w = in ? (unsigned long long)((double)vs[q] * SG_FIX) : 0ull;
                const unsigned slo = __reduce_add_sync(same, (unsigned)(w & 0xfffffu));
                const unsigned shi = __reduce_add_sync(same, (unsigned)(w >> 20));
                if (in && lane == __ffs(same) - 1) atomicAdd(&hm[dg], ((unsigned long long)shi << 20) + slo);
            }
        }
        __syncthreads();
        for (int k = threadIdx.x; k < 256; k += SAMPLE_THREADS)
            if (hm[k]) atomicAdd(&g.gs->mass[pass][k], hm[k]);
        gridSync(g.gs);
        g.ph++;
        if (threadIdx.x < 32) {
            // Lane l holds digits 255-8l down to 248-8l; a scan from the
            // top finds the lane where the running mass reaches want, and
            // that lane walks its eight. Where none does, the lowest
            // present digit (the set ends within the prefix) unless
            // nothing is fixed yet, as selectRanked.
            unsigned long long h[8], own = 0;
#pragma unroll
            for (int r = 0; r < 8; r++) own += h[r] = __ldcg(&g.gs->mass[pass][255 - 8 * lane - r]);
            unsigned long long incl = own;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned long long y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += y;
            }
            const unsigned reach = __ballot_sync(0xffffffffu, (double)(acc + incl) >= wantFix);
            const unsigned present = __ballot_sync(0xffffffffu, own != 0);
            int digit = -1;
            unsigned long long at = 0;
            if (reach) {
                const int l = __ffs(reach) - 1;
                if (lane == l) {
                    unsigned long long t = acc + incl - own;
                    for (int r = 0; r < 8; r++) {
                        if (h[r] != 0 && (double)(t + h[r]) >= wantFix) {
                            digit = 255 - 8 * l - r;
                            at = t;
                            break;
                        }
                        t += h[r];
                    }
                }
                digit = __shfl_sync(0xffffffffu, digit, l);
                at = __shfl_sync(0xffffffffu, at, l);
            } else if (present && shift < 24) {
                const int l = 31 - __clz(present);  // the lowest digits' lane
                if (lane == l) {
                    unsigned long long t = acc + incl - own;
                    for (int r = 0; r < 8; r++) {
                        if (h[r] != 0) digit = 255 - 8 * l - r, at = t;
                        t += h[r];
                    }
                }
                digit = __shfl_sync(0xffffffffu, digit, l);
                at = __shfl_sync(0xffffffffu, at, l);
            }
            if (lane == 0) {
                *res = digit;
                accNext = at;
            }
        }
        if (!takeDigit(res, prefix, shift)) return false;
        acc = accNext;
        __syncthreads();
    }
    *vb = prefix;
    *before = (double)acc / SG_FIX;
    return true;
}

// gridCountSelect is countSelect over the grid: the blocks' histograms
// added into the pass's global one (integer adds: any order gives the same
// counts).
__device__ bool gridCountSelect(Grid& g, const float* p, int n, long want, unsigned* vb, long* before, int* hcnt,
                                long* shl, int* res) {
    const Seg sg = gridSeg(n);
    const int lane = threadIdx.x & 31;
    unsigned prefix = 0;
    long acc = 0;
    for (int pass = 0, shift = 24; shift >= 0; pass++, shift -= 8) {
        for (int k = threadIdx.x; k < 256; k += SAMPLE_THREADS) hcnt[k] = 0;
        __syncthreads();
        countHist(p, sg, lane, shift == 24 ? 0u : ~0u << (shift + 8), prefix, shift, hcnt);
        __syncthreads();
        for (int k = threadIdx.x; k < 256; k += SAMPLE_THREADS)
            if (hcnt[k]) atomicAdd(&g.gs->hist[pass][k], hcnt[k]);
        gridSync(g.gs);
        g.ph++;
        for (int k = threadIdx.x; k < 256; k += SAMPLE_THREADS) hcnt[k] = __ldcg(&g.gs->hist[pass][k]);
        __syncthreads();
        if (threadIdx.x == 0) pickCountDigit(hcnt, acc, want, res, shl);
        if (!takeDigit(res, prefix, shift)) return false;
        acc = *shl;
        __syncthreads();
    }
    *vb = prefix;
    *before = acc;
    return true;
}

// drawGrid is sample_draw over a cooperative grid of SAMPLE_THREADS-thread
// blocks (at most SG_MAXB); gs is its scratch. Thread 0 of block 0 writes
// the token (out[0]).
__device__ __forceinline__ void drawGrid(int* out, float* p, const float* x, int n, float invT, int topK, double topP,
                                         float minP, double u, GridScratch* gs) {
    __shared__ float shf[SAMPLE_WARPS];
    __shared__ double tot[SAMPLE_WARPS], before[SAMPLE_WARPS + 1], gb[2];
    __shared__ double sel[SAMPLE_WARPS][17];
    __shared__ int res;
    __shared__ int cid[SAMPLE_SMALLK + 1], ord[SAMPLE_SMALLK], hcnt[256];
    __shared__ float cp[SAMPLE_SMALLK + 1];
    __shared__ long shl;
    __shared__ unsigned long long hmass[256];
    Grid g{gs, 0, tot, before, gb};
    const Seg sg = gridSeg(n);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    // This draw's words, set before the first barrier (nothing reads or
    // adds to them before it).
    if (blockIdx.x == 0) {
        for (int k = threadIdx.x; k < 4 * 256; k += SAMPLE_THREADS) gs->hist[k >> 8][k & 255] = 0, gs->mass[k >> 8][k & 255] = 0;
        for (int k = threadIdx.x; k < SG_MAXPH; k += SAMPLE_THREADS) gs->res[k] = -1;
        if (threadIdx.x == 0) gs->draw = 0x7fffffff, gs->last = -1, gs->cnt = 0;
    }

    float m = -INFINITY;
    for (int i = sg.lo + lane; i < sg.hi; i += 32) m = fmaxf(m, __fmul_rn(x[i], invT));
    m = gridMax(g, m, shf);
    int lastPos;  // the last id with p > 0: the unfiltered draw's fallback
    const double total = gridTotals(g, probsOf(p, x, sg, lane, invT, m, &lastPos));

    float lo = 0.f;  // kept: p > lo, or p == lo and id ≤ tie
    int tie = -1;
    bool bounded = false;
    if (topK > 0 && topK < n && topK <= SAMPLE_SMALLK) {
        unsigned vb;
        long pre;
        if (gridCountSelect(g, p, n, topK, &vb, &pre, hcnt, &shl, &res)) {
            const int id = gridNth(g, p, n, vb, topK - pre, -1.f, 0x7fffffff);
            if (id >= 0) {
                // Top-k's tokens gathered from every block, then block 0
                // finishes alone (smallFinish ranks them itself, so their
                // order of arrival does not matter).
                const float klo = __uint_as_float(vb);
                for (int i = sg.lo + lane; i < sg.hi; i += 32) {
                    if (keptBy(p[i], i, klo, id)) {
                        const int s = atomicAdd(&gs->cnt, 1);
                        if (s < SAMPLE_SMALLK) gs->cid[s] = i, gs->cp[s] = p[i];
                    }
                }
                gridSync(gs);
                g.ph++;
                const int k = __ldcg(&gs->cnt);
                if (k <= SAMPLE_SMALLK) {
                    if (blockIdx.x != 0) return;
                    for (int s = threadIdx.x; s < k; s += SAMPLE_THREADS) cid[s] = __ldcg(&gs->cid[s]), cp[s] = __ldcg(&gs->cp[s]);
                    __syncthreads();
                    smallFinish(out, k, klo, id, topP, minP, u, cid, cp, ord);
                    return;
                }
            }
        }
    }
    if (topK > 0 && topK < n) {
        unsigned vb;
        double pre;
        if (gridSelectRanked(g, p, n, -1.f, 0x7fffffff, (double)topK, &vb, &pre, sel, &res)) {
            const int id = gridNth(g, p, n, vb, (long)((double)topK - pre), -1.f, 0x7fffffff);
            if (id >= 0) {
                lo = __uint_as_float(vb);
                tie = id;
                bounded = true;
            }
        }
    }
    if (topP > 0 && topP < 1) {
        double mass = total;
        if (bounded) {
            double s = 0;
            for (int i = sg.lo + lane; i < sg.hi; i += 32)
                if (keptBy(p[i], i, lo, tie)) s += p[i];
            mass = gridTotals(g, s);
        }
        const double want = topP * mass;
        const float plo = bounded ? lo : -1.f;
        const int ptie = bounded ? tie : 0x7fffffff;
        unsigned vb;
        double pre;
        if (gridMassSelect(g, p, n, plo, ptie, want, &vb, &pre, hmass, &res)) {
            const float v = __uint_as_float(vb);
            long j = v > 0.f ? (long)ceil((want - pre) / (double)v) : 1;
            int id = gridNth(g, p, n, vb, max(1L, j), plo, ptie);
            if (id < 0) id = gridLast(g, p, n, vb, plo, ptie);
            if (id >= 0) {
                lo = v;
                tie = id;
                bounded = true;
            }
        }
    }
    if (minP > 0.f && (minP > lo || (minP == lo && !bounded))) {
        lo = minP;
        tie = 0x7fffffff;
    }

    // The draw: the kept mass by warp, block and grid; the one warp whose
    // range holds u × the total walks its segment. Unfiltered, the
    // probabilities' totals (and lastPos) are still the kept ones.
    double kept = total;
    const bool selected = (topK > 0 && topK < n) || (topP > 0 && topP < 1);
    if (selected || lo != 0.f || tie != -1) kept = gridTotals(g, keptMass(p, sg, lane, lo, tie, &lastPos));
    for (int o = 16; o > 0; o >>= 1) lastPos = max(lastPos, __shfl_xor_sync(0xffffffffu, lastPos, o));
    if (lane == 0 && lastPos >= 0) atomicMax(&gs->last, lastPos);
    const double target = u * kept;
    const double wb = gb[0] + before[warp];
    // Neighbouring warps' ranges may overlap by a rounding: the first id
    // found wins.
    if (tot[warp] > 0 && wb <= target && target < wb + tot[warp]) {
        const int id = walkDraw(p, sg, lane, lo, tie, wb, target);
        if (id >= 0) atomicMin(&gs->draw, id);
    }
    gridSync(gs);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const int d = __ldcg(&gs->draw);
        out[0] = d != 0x7fffffff ? d : max(__ldcg(&gs->last), 0);  // rounding past the end: the last kept
    }
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_draw_grid(int* out, float* p, const float* x, int n, float invT, int topK, double topP, float minP,
                     double u, GridScratch* gs) {
    drawGrid(out, p, x, n, invT, topK, topP, minP, u, gs);
}

// DrawRule is a recorded step's draw (graph.go, Step.Draw), eight words of
// the step's arena that each replay's upload rewrites: the rule and the
// variate of sample_draw's arguments.
struct DrawRule {
    float invT;
    int topK;
    float minP;
    int pad;
    double topP, u;
};

// sample_draw_grid_f is sample_draw_grid inside a recorded decode step
// that feeds the next (CaptureFeedDraw): its rule from the arena, its
// token written as the next replay's token id (out, in the arena) and to
// the host's ring at *slot, as argmax_mb writes a greedy step's.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_draw_grid_f(int* out, float* p, const float* x, int n, const DrawRule* r, GridScratch* gs, int* ring,
                       const unsigned* slot, int mask) {
    drawGrid(out, p, x, n, r->invT, r->topK, r->topP, r->minP, r->u, gs);
    if (blockIdx.x == 0) {
        __syncthreads();  // thread 0 wrote the token (every path of block 0 ends here)
        if (threadIdx.x == 0) ring[*slot & mask] = out[0];
    }
}
