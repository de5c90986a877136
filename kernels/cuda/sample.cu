// Sampling on the device (sample.go): a sampled decode step's token drawn
// from the logits where they are, so that neither the vocabulary's floats
// nor the host's passes over them (0.3 ms a token for a temperature alone,
// ~2 ms for top-p over a flat distribution on an H200 host's CPU) sit
// between two steps.
//
// The rule is the session's (session/sampling.go, session.Drawer):
//   p_i  = exp(x_i·invT − max_j x_j·invT)       unnormalised, the top one 1
//   kept = a prefix of the tokens ranked by p (ties by id): top-k's first
//          k; top-p's shortest prefix holding p of the mass (of top-k's
//          tokens when both are asked); then min-p's p_i ≥ minP where that
//          keeps fewer;
//   the token is the first, in id order, at which the running sum of the
//   kept p passes u × their total.
// A kept set is everything ranked at or before one token, so it is a pair
// (lo, tie): p > lo, or p == lo and id ≤ tie. The boundaries are found by
// radix selects on the bits of p (which order non-negative floats), 8 bits
// a level, by count for top-k and by mass for top-p; the draw by a scan
// of each thread's contiguous share of the ids. The host walks the same
// rule in float64 in another order, so a draw whose u falls within a
// rounding of a boundary may pick the neighbouring token; nothing else
// differs.
//
// sample_draw is one block of 1024 threads (vocabularies under 32768 ids,
// sample.go's drawGridFrom); sample_grid.cuh spreads the same passes over
// a block an SM for larger ones. Scratch holds the n probabilities between
// the passes (L2-resident: 600 KB for a 152K vocabulary). Warp w owns the
// w-th of 32 contiguous segments of the ids and its lanes read them 32
// consecutive floats at a time: id-order scans go by warp, then by step
// within the warp, and every load is coalesced (a thread a contiguous
// share, 149 floats apart across a warp, had made a draw take 290 µs).

#define SAMPLE_THREADS 1024
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)

// Seg is a warp's segment of the ids [lo, hi); its lane visits lo+lane,
// lo+lane+32, ...
struct Seg {
    int lo, hi;
};

__device__ __forceinline__ Seg warpSeg(int n) {
    const int len = (n + SAMPLE_WARPS - 1) / SAMPLE_WARPS, w = threadIdx.x >> 5;
    return Seg{min(n, w * len), min(n, (w + 1) * len)};
}

__device__ __forceinline__ bool keptBy(float v, int i, float lo, int tie) { return v > lo || (v == lo && i <= tie); }

__device__ __forceinline__ double warpSumD(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// blockMax is the block's largest v (NaN ignored); every thread gets it.
__device__ float blockMax(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = sh[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    return v;
}

// warpTotals leaves each warp's total of v (one value a thread) in
// tot[w] and the total of the warps before w in before[w]; every thread
// calls it. It returns the block's total.
__device__ double warpTotals(double v, double* tot, double* before) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    v = warpSumD(v);
    if (lane == 0) tot[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const double t = tot[lane];
        double x = t;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        before[lane] = x - t;
        if (lane == 31) before[32] = x;
    }
    __syncthreads();
    const double all = before[32];
    __syncthreads();
    return all;
}

// countOfValue is a lane's count of the ids of sg whose p has bits vb and
// which are in the set (lo, tie).
__device__ __forceinline__ int countOfValue(const float* p, Seg sg, int lane, unsigned vb, float lo, int tie) {
    int cnt = 0;
    for (int i = sg.lo + lane; i < sg.hi; i += 32) cnt += __float_as_uint(p[i]) == vb && keptBy(p[i], i, lo, tie);
    return cnt;
}

// walkNth is one warp's walk of its segment, a step at a time, from acc
// such ids before it to the j-th (acc < j ≤ acc + its count): the lane
// that holds it writes its id to *res.
__device__ __forceinline__ void walkNth(const float* p, Seg sg, int lane, unsigned vb, long j, long acc, float lo,
                                        int tie, int* res) {
    for (int base = sg.lo; base < sg.hi; base += 32) {
        const int i = base + lane;
        const bool m = i < sg.hi && __float_as_uint(p[i]) == vb && keptBy(p[i], i, lo, tie);
        const unsigned bal = __ballot_sync(0xffffffffu, m);
        const int k = __popc(bal);
        if (acc + k >= j) {
            const int r = (int)(j - acc);  // the r-th set bit of bal
            if (m && __popc(bal & ((1u << lane) - 1)) == r - 1) *res = i;
            return;
        }
        acc += k;
    }
}

// nthOfValue is the id of the j-th (1-based) token, in id order, whose p
// has bits vb and which is in the set (lo, tie); -1 if there are fewer.
__device__ int nthOfValue(const float* p, int n, unsigned vb, long j, float lo, int tie, double* tot, double* before,
                          int* res) {
    const Seg sg = warpSeg(n);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    warpTotals((double)countOfValue(p, sg, lane, vb, lo, tie), tot, before);
    if (threadIdx.x == 0) *res = -1;
    __syncthreads();
    const long b0 = (long)before[warp], c = (long)tot[warp];
    if (b0 < j && b0 + c >= j) walkNth(p, sg, lane, vb, j, b0, lo, tie, res);  // one warp
    __syncthreads();
    const int r = *res;
    __syncthreads();
    return r;
}

// lastOfValueIn is the largest id of sg whose p has bits vb, in the set
// (lo, tie), over the warp (every lane gets it); -1 if none.
__device__ __forceinline__ int lastOfValueIn(const float* p, Seg sg, int lane, unsigned vb, float lo, int tie) {
    int last = -1;
    for (int i = sg.lo + lane; i < sg.hi; i += 32)
        if (__float_as_uint(p[i]) == vb && keptBy(p[i], i, lo, tie)) last = i;
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    return last;
}

// lastOfValue is the largest id whose p has bits vb, in the set (lo,
// tie); -1 if none.
__device__ int lastOfValue(const float* p, int n, unsigned vb, float lo, int tie, int* res) {
    const int last = lastOfValueIn(p, warpSeg(n), threadIdx.x & 31, vb, lo, tie);
    if (threadIdx.x == 0) *res = -1;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) atomicMax(res, last);
    __syncthreads();
    const int r = *res;
    __syncthreads();
    return r;
}

// takeDigit is the end of a select pass for every thread: after a barrier,
// the digit thread 0 left in *res goes into prefix at shift; false where
// there is none (after a second barrier, so that no thread still reads
// *res when the caller goes on).
__device__ __forceinline__ bool takeDigit(const int* res, unsigned& prefix, int shift) {
    __syncthreads();
    const int digit = *res;
    if (digit < 0) {
        __syncthreads();
        return false;
    }
    prefix |= (unsigned)digit << shift;
    return true;
}

// rankBins adds to bin[d] the weight (MASS: p, else 1) of each of the
// lane's ids in sg that is in the set (lo, tie) and whose p's bits match
// prefix above shift + 4 and have digit d at shift: one add a token (a
// switch, not sixteen predicated adds, which made a pass FP64-bound), four
// steps' loads in flight before their sums.
template <bool MASS>
__device__ __forceinline__ void rankBins(const float* p, Seg sg, int lane, unsigned mask, unsigned prefix, int shift,
                                         float lo, int tie, double (&bin)[16]) {
#pragma unroll
    for (int k = 0; k < 16; k++) bin[k] = 0;
    for (int base = sg.lo + lane; base < sg.hi; base += 128) {
        float vs[4];
#pragma unroll
        for (int q = 0; q < 4; q++) vs[q] = base + 32 * q < sg.hi ? p[base + 32 * q] : -1.f;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = base + 32 * q;
            const float v = vs[q];
            const unsigned bits = __float_as_uint(v);
            if (i >= sg.hi || (bits & mask) != prefix || !keptBy(v, i, lo, tie)) continue;
            const double w = MASS ? (double)v : 1.0;
            switch ((bits >> shift) & 15) {
#define SAMPLE_BIN(k) \
    case k:           \
        bin[k] += w;  \
        break;
                SAMPLE_BIN(0) SAMPLE_BIN(1) SAMPLE_BIN(2) SAMPLE_BIN(3) SAMPLE_BIN(4) SAMPLE_BIN(5) SAMPLE_BIN(6)
                SAMPLE_BIN(7) SAMPLE_BIN(8) SAMPLE_BIN(9) SAMPLE_BIN(10) SAMPLE_BIN(11) SAMPLE_BIN(12) SAMPLE_BIN(13)
                SAMPLE_BIN(14) SAMPLE_BIN(15)
#undef SAMPLE_BIN
            }
        }
    }
}

// pickRankedDigit is a 4-bit select pass's choice, by one thread, from the
// 16 digits' weights in sel[1]: digits from the top, the first at which
// the running weight reaches want; where none does, the lowest present
// digit (the set ends within the prefix) unless nothing is fixed yet
// (first: the pass at the top bits). The digit (or -1) in *res, the weight
// ranked before it in sel[0][16].
__device__ __forceinline__ void pickRankedDigit(double (*sel)[17], double acc, double want, bool first, int* res) {
    for (int k = 14; k >= 0; k--) sel[1][k] += sel[1][k + 1];  // at or above digit k
    int digit = -1, low = -1;
    for (int k = 15; k >= 0; k--) {
        const double above = k < 15 ? sel[1][k + 1] : 0.0;
        if (sel[1][k] - above <= 0) continue;
        low = k;
        if (acc + sel[1][k] >= want) {
            digit = k;
            break;
        }
    }
    if (digit < 0 && !first) digit = low;
    *res = digit;
    if (digit >= 0) sel[0][16] = acc + (digit < 15 ? sel[1][digit + 1] : 0.0);
}

// selectRanked finds, among the tokens of the set (lo, tie), the value
// at which the running total of their weights (MASS: p, else 1 each),
// taken in ranked order (p descending), first reaches want: its bits in
// *vb, and in *before the weight of the tokens ranked before every token
// of that value. False where even the whole set falls short (a rounding).
// A radix select from the top bits, 4 a pass: each thread keeps in
// registers the weight of its tokens at each of the 16 digits (no
// atomics: a flat distribution's tokens share a few digits, which
// serialised a shared-memory histogram's adds), and the block adds them.
template <bool MASS>
__device__ bool selectRanked(const float* p, int n, float lo, int tie, double want, unsigned* vb, double* before,
                             double (*sel)[17], int* res) {
    const Seg sg = warpSeg(n);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    unsigned prefix = 0;
    double acc = 0;
    for (int shift = 28; shift >= 0; shift -= 4) {
        double bin[16];
        rankBins<MASS>(p, sg, lane, shift == 28 ? 0u : ~0u << (shift + 4), prefix, shift, lo, tie, bin);
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const double x = warpSumD(bin[k]);
            if (lane == 0) sel[warp][k] = x;
        }
        __syncthreads();
        if (threadIdx.x < 16) {
            double t = 0;
            for (int w = 0; w < SAMPLE_WARPS; w++) t += sel[w][threadIdx.x];
            sel[1][threadIdx.x] = t;  // each thread reads and writes only its digit's column
        }
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

// countHist adds to hcnt (shared) the count of the lane's ids in sg whose
// p's bits match prefix above shift + 8, by their 8-bit digit at shift:
// a warp's lanes that share a digit add their count with one shared
// atomic (__match_any_sync), so a flat distribution's shared digits cost
// no serialised adds; four steps' loads issued before their counts (one
// load in flight a warp made a pass latency-bound).
__device__ __forceinline__ void countHist(const float* p, Seg sg, int lane, unsigned mask, unsigned prefix, int shift,
                                          int* hcnt) {
    for (int base = sg.lo; base < sg.hi; base += 128) {
        unsigned bits[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = base + 32 * q + lane;
            bits[q] = i < sg.hi ? __float_as_uint(p[i]) : 0u;
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = base + 32 * q + lane;
            const int dg = i < sg.hi && (bits[q] & mask) == prefix ? (int)((bits[q] >> shift) & 255) : 256;
            const unsigned same = __match_any_sync(0xffffffffu, dg);
            if (dg < 256 && lane == __ffs(same) - 1) atomicAdd(&hcnt[dg], __popc(same));
        }
    }
}

// pickCountDigit is an 8-bit count pass's choice, by one thread: from the
// top digit down, the first at which the running count reaches want (-1
// if none) in *res, the count ranked before it in *shl.
__device__ __forceinline__ void pickCountDigit(const int* hcnt, long acc, long want, int* res, long* shl) {
    long t = acc;
    int digit = -1;
    for (int k = 255; k >= 0; k--) {
        if (hcnt[k] == 0) continue;
        if (t + hcnt[k] >= want) {
            digit = k;
            break;
        }
        t += hcnt[k];
    }
    *res = digit;
    *shl = t;
}

// countSelect is selectRanked by count over every token, 8 bits a pass
// (countHist). The value's bits in *vb, the tokens ranked before it in
// *before.
__device__ bool countSelect(const float* p, int n, long want, unsigned* vb, long* before, int* hcnt, long* shl,
                            int* res) {
    const Seg sg = warpSeg(n);
    const int lane = threadIdx.x & 31;
    unsigned prefix = 0;
    long acc = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int k = threadIdx.x; k < 256; k += SAMPLE_THREADS) hcnt[k] = 0;
        __syncthreads();
        countHist(p, sg, lane, shift == 24 ? 0u : ~0u << (shift + 8), prefix, shift, hcnt);
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

// probsOf writes p = exp(x·invT − m) over the lane's ids of sg (the
// largest exactly 1; NaN logits 0) and returns their sum; *lastPos gets
// the largest id with p > 0 (-1 if none). x·invT is rounded on its own
// (__fmul_rn: no fused multiply-add), as the host scales the logits.
__device__ __forceinline__ double probsOf(float* p, const float* x, Seg sg, int lane, float invT, float m,
                                          int* lastPos) {
    double own = 0;
    int last = -1;
    for (int i = sg.lo + lane; i < sg.hi; i += 32) {
        float v = expf(__fmul_rn(x[i], invT) - m);
        v = v >= 0.f ? fminf(v, 1.f) : 0.f;  // NaN logits take no part
        p[i] = v;
        own += v;
        if (v > 0.f) last = i;
    }
    *lastPos = last;
    return own;
}

// keptMass is the lane's sum of p over its ids of sg in the set (lo,
// tie); *lastPos gets the largest such id with p > 0 (-1 if none).
__device__ __forceinline__ double keptMass(const float* p, Seg sg, int lane, float lo, int tie, int* lastPos) {
    double mine = 0;
    int last = -1;
    for (int i = sg.lo + lane; i < sg.hi; i += 32)
        if (keptBy(p[i], i, lo, tie) && p[i] > 0.f) mine += p[i], last = i;
    *lastPos = last;
    return mine;
}

// walkDraw is the draw's last step in one warp: from acc, the kept mass
// before its segment, it walks the segment 32 ids at a time to the first
// kept id at which the running mass passes target. That id in the lane
// that found it, -1 in the others (and in all where the segment ends
// first: a rounding).
__device__ __forceinline__ int walkDraw(const float* p, Seg sg, int lane, float lo, int tie, double acc,
                                        double target) {
    for (int base = sg.lo; base < sg.hi; base += 32) {
        const int i = base + lane;
        const double v = i < sg.hi && keptBy(p[i], i, lo, tie) ? (double)p[i] : 0.0;
        double incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += y;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, v > 0 && target < acc + incl);
        if (hit) return lane == __ffs(hit) - 1 ? i : -1;
        acc += __shfl_sync(0xffffffffu, incl, 31);
    }
    return -1;
}

#define SAMPLE_SMALLK 1024

// smallGather collects into shared memory the tokens of the set (lo, tie)
// (top-k's, at most SAMPLE_SMALLK known to be in it) and returns their
// count; more than SAMPLE_SMALLK means they did not fit.
__device__ int smallGather(const float* p, int n, float lo, int tie, int* cid, float* cp, int* cnt) {
    const Seg sg = warpSeg(n);
    if (threadIdx.x == 0) *cnt = 0;
    __syncthreads();
    for (int i = sg.lo + (threadIdx.x & 31); i < sg.hi; i += 32) {
        if (keptBy(p[i], i, lo, tie)) {
            const int s = atomicAdd(cnt, 1);
            if (s < SAMPLE_SMALLK) cid[s] = i, cp[s] = p[i];
        }
    }
    __syncthreads();
    const int k = *cnt;
    __syncthreads();
    return k;
}

// smallFinish finishes a draw among the k ≤ SAMPLE_SMALLK tokens of top-k
// in shared memory (in any order; every step below ranks them itself): the
// top-p boundary is found by ranking them (p descending, id ascending) and
// summing in that order, as the host's prefixMass does, then min-p, then
// the draw walks them in id order. Every thread of a SAMPLE_THREADS block
// calls it.
__device__ void smallFinish(int* out, int k, float lo, int tie, double topP, float minP, double u, int* cid,
                            float* cp, int* ord) {
    const int t = threadIdx.x;
    if (topP > 0 && topP < 1) {
        if (t < k) {
            int r = 0;
            for (int j = 0; j < k; j++) r += cp[j] > cp[t] || (cp[j] == cp[t] && cid[j] < cid[t]);
            ord[r] = t;
        }
        __syncthreads();
        if (t == 0) {
            double mass = 0;
            for (int r = 0; r < k; r++) mass += cp[ord[r]];
            double acc = 0;
            for (int r = 0; r < k; r++) {
                acc += (double)cp[ord[r]] / mass;
                if (acc >= topP) {
                    lo = cp[ord[r]], tie = cid[ord[r]];
                    break;
                }
            }
            cp[SAMPLE_SMALLK] = lo;  // (the spare slots carry the boundary to the block)
            cid[SAMPLE_SMALLK] = tie;
        }
        __syncthreads();
        lo = cp[SAMPLE_SMALLK], tie = cid[SAMPLE_SMALLK];
        __syncthreads();
    }
    if (minP > 0.f && minP > lo) lo = minP, tie = 0x7fffffff;
    if (t < k) {
        int r = 0;
        for (int j = 0; j < k; j++) r += cid[j] < cid[t];
        ord[r] = t;
    }
    __syncthreads();
    if (t == 0) {
        double mass = 0;
        int last = -1;
        for (int r = 0; r < k; r++)
            if (keptBy(cp[ord[r]], cid[ord[r]], lo, tie) && cp[ord[r]] > 0.f) mass += cp[ord[r]], last = cid[ord[r]];
        const double target = u * mass;
        double acc = 0;
        int id = last;
        for (int r = 0; r < k; r++) {
            const int c = ord[r];
            if (keptBy(cp[c], cid[c], lo, tie) && cp[c] > 0.f && target < (acc += cp[c])) {
                id = cid[c];
                break;
            }
        }
        out[0] = max(id, 0);
    }
}

// smallDraw is smallGather then smallFinish; false where the tokens do
// not fit (the caller takes the general path).
__device__ bool smallDraw(int* out, const float* p, int n, float lo, int tie, double topP, float minP, double u,
                          int* cid, float* cp, int* ord, int* cnt) {
    const int k = smallGather(p, n, lo, tie, cid, cp, cnt);
    if (k > SAMPLE_SMALLK) return false;
    smallFinish(out, k, lo, tie, topP, minP, u, cid, cp, ord);
    return true;
}

// sample_draw writes to out[0] the token drawn from the n logits x (see
// above). topK ≤ 0, topP outside (0, 1) and minP ≤ 0 are off.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_draw(int* out, float* p, const float* x, int n, float invT, int topK, double topP, float minP, double u) {
    __shared__ float shf[SAMPLE_WARPS];
    __shared__ double tot[SAMPLE_WARPS], before[SAMPLE_WARPS + 1];
    __shared__ double sel[SAMPLE_WARPS][17];
    __shared__ int res;
    __shared__ int cid[SAMPLE_SMALLK + 1], ord[SAMPLE_SMALLK], hcnt[256];
    __shared__ float cp[SAMPLE_SMALLK + 1];
    __shared__ long shl;
    const Seg sg = warpSeg(n);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    // The probabilities, unnormalised, and their total (probsOf).
    float m = -INFINITY;
    for (int i = sg.lo + lane; i < sg.hi; i += 32) m = fmaxf(m, __fmul_rn(x[i], invT));
    m = blockMax(m, shf);
    int last;  // (the grid's fallback; here the fallback looks for it only when it happens)
    const double total = warpTotals(probsOf(p, x, sg, lane, invT, m, &last), tot, before);

    float lo = 0.f;  // kept: p > lo, or p == lo and id ≤ tie
    int tie = -1;
    bool bounded = false;  // top-k or top-p set the boundary
    if (topK > 0 && topK < n && topK <= SAMPLE_SMALLK) {
        // A few tokens: the topK-th by count, then the rest among them in
        // shared memory.
        unsigned vb;
        long pre;
        if (countSelect(p, n, topK, &vb, &pre, hcnt, &shl, &res)) {
            const int id = nthOfValue(p, n, vb, topK - pre, -1.f, 0x7fffffff, tot, before, &res);
            if (id >= 0 && smallDraw(out, p, n, __uint_as_float(vb), id, topP, minP, u, cid, cp, ord, &res)) return;
        }
    }
    if (topK > 0 && topK < n) {
        // The topK-th ranked token: a select by count.
        unsigned vb;
        double pre;
        if (selectRanked<false>(p, n, -1.f, 0x7fffffff, (double)topK, &vb, &pre, sel, &res)) {
            const int id = nthOfValue(p, n, vb, (long)((double)topK - pre), -1.f, 0x7fffffff, tot, before, &res);
            if (id >= 0) {
                lo = __uint_as_float(vb);
                tie = id;
                bounded = true;
            }
        }
    }
    if (topP > 0 && topP < 1) {
        // The shortest ranked prefix (of top-k's tokens, if set) holding
        // topP of their mass: a select by mass.
        double mass = total;
        if (bounded) {
            double s = 0;
            for (int i = sg.lo + lane; i < sg.hi; i += 32)
                if (keptBy(p[i], i, lo, tie)) s += p[i];
            mass = warpTotals(s, tot, before);
        }
        const double want = topP * mass;
        const float plo = bounded ? lo : -1.f;  // the set the prefix is taken from
        const int ptie = bounded ? tie : 0x7fffffff;
        unsigned vb;
        double pre;
        if (selectRanked<true>(p, n, plo, ptie, want, &vb, &pre, sel, &res)) {
            // Tokens of value v, ranked by id: the first j of them bring
            // the running mass to want.
            const float v = __uint_as_float(vb);
            long j = v > 0.f ? (long)ceil((want - pre) / (double)v) : 1;
            int id = nthOfValue(p, n, vb, max(1L, j), plo, ptie, tot, before, &res);
            if (id < 0) id = lastOfValue(p, n, vb, plo, ptie, &res);  // rounding: the value's last
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

    // The draw: the kept mass by warp, then the one warp whose segment
    // holds u × the total walks it a step of 32 at a time.
    // Unfiltered (every p > 0 kept, and no select has used tot and
    // before since), the warps' sums of the probabilities are still
    // there: no pass.
    double kept = total;
    const bool selected = (topK > 0 && topK < n) || (topP > 0 && topP < 1);
    if (selected || lo != 0.f || tie != -1) kept = warpTotals(keptMass(p, sg, lane, lo, tie, &last), tot, before);
    const double target = u * kept;
    if (threadIdx.x == 0) res = 0x7fffffff;
    __syncthreads();
    // The sums are rounded in their own orders, so neighbouring warps'
    // ranges may overlap by a rounding: the first id found wins.
    if (tot[warp] > 0 && before[warp] <= target && target < before[warp] + tot[warp]) {
        const int id = walkDraw(p, sg, lane, lo, tie, before[warp], target);
        if (id >= 0) atomicMin(&res, id);
    }
    __syncthreads();
    if (res == 0x7fffffff) {
        // Rounding past the end: the last kept token (or 0 for none).
        keptMass(p, sg, lane, lo, tie, &last);
        for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
        __syncthreads();
        if (threadIdx.x == 0) res = -1;
        __syncthreads();
        if (lane == 0) atomicMax(&res, last);
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = max(res, 0);
}

// ---------------------------------------------------------------- logit adjustments

// A penalised or biased step's logit changes (session.Adjust), one entry
// a thread, on a copy of the logits the draw then reads. Each change is
// rounded as the session's sampler rounds it in Go (adjust.go): the
// repetition penalty as a double division or product rounded to float,
// the count penalty as a double difference rounded to float, the bias
// as a float sum; intrinsics keep the compiler from fusing any of them.
struct LogitAdjust {
    int id;
    int flags;  // 1 repetition, 2 count penalty (sub), 4 bias
    double sub;
    float bias;
    float pad;
};

extern "C" __global__ void logit_adjust(float* y, int n, const LogitAdjust* e, int count, double rep) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const LogitAdjust a = e[i];
    if (a.id < 0 || a.id >= n) return;
    float v = y[a.id];
    if (a.flags & 1) {
        const double x = (double)v;
        v = __double2float_rn(x > 0 ? __ddiv_rn(x, rep) : __dmul_rn(x, rep));
    }
    if (a.flags & 2) v = __double2float_rn(__dsub_rn((double)v, a.sub));
    if (a.flags & 4) v = __fadd_rn(v, a.bias);
    y[a.id] = v;
}

#include "sample_grid.cuh"
