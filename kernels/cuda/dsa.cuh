// DeepSeek sparse attention's selection (DSA, DeepSeek-V3.2), included by
// mla.cu: the lightning indexer's scores (dsa_scores, and dsa_scores_tc
// for prompt passes), each row's top-k (dsa_topk) and its bit mask for
// the expanded prompt form (dsa_mask).
#pragma once

// ---------------------------------------------------------------- DSA scores

#define DQMAX 8192  // indexer Heads*Dim held in shared memory (V3.2: 64×128)
#define DREG 8      // Dim ≤ 256
#define DTILE 64    // positions per block

// scores[row*stride + t] for t < start+rows: Σ_h W[row,h]·relu(Scale·Q[row,h]·key_t)
// for visible t (≤ start+row), -inf for the later positions of the pass
// (the reference's masked [rows, context] matrix). One warp per position;
// the heads are summed in order, each term only when positive, as on the
// CPU. Blocks: rows × tiles of DTILE positions (x = row*tiles + tile).
extern "C" __global__ void __launch_bounds__(256)
    dsa_scores(float* scores, const float* Q, const float* W, const float* keys, const int* table, const int* startp,
               int rows, int heads, int dim, int bs, int tiles, long stride, float scale) {
    __shared__ float qs[DQMAX];
    int row = blockIdx.x / tiles, t0 = (blockIdx.x % tiles) * DTILE;
    int start = *startp, n = start + row + 1, nc = start + rows;
    if (t0 >= nc) return;  // capture-time grids cover the whole table
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* qr = Q + (long)row * heads * dim;
    for (int i = threadIdx.x; i < heads * dim; i += blockDim.x) qs[i] = qr[i];
    __syncthreads();
    const float* wr = W + (long)row * heads;
    for (int t = t0 + warp; t < min(t0 + DTILE, nc); t += blockDim.x >> 5) {
        float sc = -INFINITY;
        if (t < n) {
            long slot = (long)table[t / bs] * bs + t % bs;
            const float* kp = keys + slot * dim;
            float kv[DREG];
#pragma unroll
            for (int i = 0; i < DREG; i++) {
                int d = lane + 32 * i;
                kv[i] = d < dim ? kp[d] : 0.f;
            }
            sc = 0.f;
            for (int hh = 0; hh < heads; hh++) {
                float dot = 0.f;
#pragma unroll
                for (int i = 0; i < DREG; i++) {
                    int d = lane + 32 * i;
                    if (d < dim) dot += qs[hh * dim + d] * kv[i];
                }
                float x = warpSum(dot) * scale;
                if (x > 0) sc = __fadd_rn(sc, __fmul_rn(wr[hh], x));  // unfused, as on the CPU
            }
        }
        if (lane == 0) scores[(long)row * stride + t] = sc;
    }
}

// dsa_scores_tc: the same scores for prompt passes on the tensor cores.
// The indexer's products are a GEMM per (row, head) × position, 3·10⁷
// multiply-adds a row at 8192 positions, which one warp a position ran at
// ~1.2 TFLOP/s (124 ms a V3.2 layer at 8192 tokens, two thirds of the
// prefill). Here a block takes DS_ROWS rows (M = rows × DS_HMAX heads, 16 a
// warp) against DS_CH tiles of DS_PT positions (N), K = dim, on mma.sync
// m16n8k8 tf32 in three products (3xTF32: a = a_hi + a_lo, b likewise;
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi), which keeps the dot products to
// fp32's accuracy, so the top-k picks what the fp32 reference picks (a
// single tf32 product is ~10⁻³ off, enough to move the boundary). The
// ReLU'd, scaled terms go through shared memory, and one thread a (row,
// position) sums its heads in order, each term only when positive, as on
// the CPU. Positions after a row's own are not written (dsa_topk reads
// them as -inf) and rows that keep every position (n ≤ topk) are skipped.
// dim a multiple of 8 up to DS_DMAX, heads ≤ DS_HMAX.
#define DS_ROWS 2
#define DS_HMAX 64
#define DS_PT 64
#define DS_CH 8
#define DS_DMAX 128
#define DS_QS (DS_DMAX + 4)  // padded stride of a staged head or key: conflict-free fragment loads
#define DS_XS (DS_PT + 8)    // padded stride of a staged term row: conflict-free float2 stores
#define DS_KREGION (DS_PT * DS_QS > DS_ROWS * DS_HMAX * DS_XS ? DS_PT * DS_QS : DS_ROWS * DS_HMAX * DS_XS)
#define DS_SHM ((DS_ROWS * DS_HMAX * DS_QS + DS_KREGION + DS_ROWS * DS_HMAX) * 4)

__device__ __forceinline__ void tf32Split(float f, uint32_t& hi, uint32_t& lo) {
    hi = tf32(f);
    lo = tf32(f - __uint_as_float(hi));
}

__device__ __forceinline__ void mma1688(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Grid: ceil(rows / DS_ROWS) × chunks (x = pair*chunks + chunk), chunk c
// covering positions [c·DS_CH·DS_PT, (c+1)·DS_CH·DS_PT); 256 threads.
extern "C" __global__ void __launch_bounds__(256, 2)
    dsa_scores_tc(float* scores, const float* Q, const float* W, const float* keys, const int* table, const int* startp,
                  int rows, int heads, int dim, int bs, int chunks, long stride, float scale, int topk) {
    extern __shared__ float sm[];
    float* qs = sm;                                // [DS_ROWS][DS_HMAX][DS_QS]
    float* ks = qs + DS_ROWS * DS_HMAX * DS_QS;    // [DS_PT][DS_QS]; then the terms [DS_ROWS][DS_HMAX][DS_XS]
    float* ws = ks + DS_KREGION;                   // [DS_ROWS][DS_HMAX]
    const int r0 = (blockIdx.x / chunks) * DS_ROWS, t0 = (blockIdx.x % chunks) * DS_CH * DS_PT;
    const int start = *startp, nMax = start + min(r0 + DS_ROWS, rows);  // the block's last row sees t < nMax
    if (nMax <= topk || t0 >= nMax) return;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int d4 = dim >> 2;
    for (int i = tid; i < DS_ROWS * DS_HMAX * d4; i += blockDim.x) {
        int rh = i / d4, c = (i % d4) * 4, r = rh / DS_HMAX, h = rh % DS_HMAX;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + r < rows && h < heads) v = *(const float4*)(Q + ((long)(r0 + r) * heads + h) * dim + c);
        *(float4*)(qs + rh * DS_QS + c) = v;
    }
    for (int i = tid; i < DS_ROWS * DS_HMAX; i += blockDim.x) {
        int r = i / DS_HMAX, h = i % DS_HMAX;
        ws[i] = r0 + r < rows && h < heads ? W[(long)(r0 + r) * heads + h] : 0.f;
    }
    const int mw = warp & 3, rw = warp >> 2;  // the warp's 16 heads and row
    const bool active = mw * 16 < heads && r0 + rw < rows;
    const float* qa = qs + (rw * DS_HMAX + mw * 16) * DS_QS;
    for (int c = 0; c < DS_CH; c++) {
        const int tb = t0 + c * DS_PT;
        if (tb >= nMax) break;
        __syncthreads();  // q staged; the last tile's terms read
        for (int i = tid; i < DS_PT * d4; i += blockDim.x) {
            int p = i / d4, e = (i % d4) * 4, t = tb + p;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (t < nMax) v = *(const float4*)(keys + ((long)table[t / bs] * bs + t % bs) * dim + e);
            *(float4*)(ks + p * DS_QS + e) = v;
        }
        __syncthreads();
        float acc[DS_PT / 8][4];
#pragma unroll
        for (int j = 0; j < DS_PT / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        if (active) {
            for (int k0 = 0; k0 < dim; k0 += 8) {
                uint32_t ah[4], al[4];
                tf32Split(qa[g * DS_QS + k0 + t4], ah[0], al[0]);
                tf32Split(qa[(g + 8) * DS_QS + k0 + t4], ah[1], al[1]);
                tf32Split(qa[g * DS_QS + k0 + t4 + 4], ah[2], al[2]);
                tf32Split(qa[(g + 8) * DS_QS + k0 + t4 + 4], ah[3], al[3]);
#pragma unroll
                for (int j = 0; j < DS_PT / 8; j++) {
                    uint32_t bh0, bl0, bh1, bl1;
                    tf32Split(ks[(j * 8 + g) * DS_QS + k0 + t4], bh0, bl0);
                    tf32Split(ks[(j * 8 + g) * DS_QS + k0 + t4 + 4], bh1, bl1);
                    mma1688(acc[j], al, bh0, bh1);
                    mma1688(acc[j], ah, bl0, bl1);
                    mma1688(acc[j], ah, bh0, bh1);
                }
            }
        }
        __syncthreads();  // the keys are used: the terms take their place
        float* xs = ks;
        if (active) {
            float* x0 = xs + (rw * DS_HMAX + mw * 16 + g) * DS_XS + 2 * t4;
#pragma unroll
            for (int j = 0; j < DS_PT / 8; j++) {
                float v[4];
#pragma unroll
                for (int e = 0; e < 4; e++) v[e] = acc[j][e] * scale;
                *(float2*)(x0 + j * 8) = make_float2(v[0], v[1]);
                *(float2*)(x0 + 8 * DS_XS + j * 8) = make_float2(v[2], v[3]);
            }
        }
        __syncthreads();
        if (tid < DS_ROWS * DS_PT) {
            const int r = tid / DS_PT, p = tid % DS_PT, row = r0 + r, t = tb + p;
            if (row < rows && t < start + row + 1) {
                const float* x = xs + r * DS_HMAX * DS_XS + p;
                const float* w = ws + r * DS_HMAX;
                float sc = 0.f;
                for (int h = 0; h < heads; h++) {
                    float v = x[h * DS_XS];
                    if (v > 0) sc = __fadd_rn(sc, __fmul_rn(w[h], v));  // unfused, in order, as on the CPU
                }
                scores[(long)row * stride + t] = sc;
            }
        }
    }
}

// ---------------------------------------------------------------- DSA top-k

// Orderable key of a score: unsigned order equals float order, with -0
// folded onto +0 (they compare equal on the CPU).
__device__ __forceinline__ unsigned okey(float v) {
    unsigned u = v == 0.f ? 0u : __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The CPU's exact top-k (kernels/cpu/mla.go topK: libstdc++'s nth_element,
// or its partial_sort heap selection when k*64 <= n, with torch.topk's
// comparator) on one thread, over values v and positions ix in place. It
// only runs when exact ties straddle the selection boundary, the one case
// where which positions win depends on the algorithm; the k best end in
// ix[0..k).
__device__ bool gtv(const float* v, int a, int b) { return v[a] > v[b]; }

__device__ void swp(float* v, int* ix, int a, int b) {
    float t = v[a];
    v[a] = v[b];
    v[b] = t;
    int u = ix[a];
    ix[a] = ix[b];
    ix[b] = u;
}

// libstdc++ __adjust_heap + __push_heap on h = (v, ix)[0..n), the heap top
// being the worst element; the value moving in is (val, vi).
__device__ void adjustHeap(float* v, int* ix, int n, int hole, float val, int vi) {
    int top = hole, child = hole;
    while (child < (n - 1) / 2) {
        child = 2 * (child + 1);
        if (v[child] > v[child - 1]) child--;
        v[hole] = v[child];
        ix[hole] = ix[child];
        hole = child;
    }
    if (n % 2 == 0 && child == (n - 2) / 2) {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        ix[hole] = ix[child - 1];
        hole = child - 1;
    }
    for (int parent = (hole - 1) / 2; hole > top && v[parent] > val; parent = (hole - 1) / 2) {
        v[hole] = v[parent];
        ix[hole] = ix[parent];
        hole = parent;
    }
    v[hole] = val;
    ix[hole] = vi;
}

__device__ void heapSelect(float* v, int* ix, int n, int k) {
    if (k >= 2) {
        for (int parent = (k - 2) / 2;; parent--) {
            adjustHeap(v, ix, k, parent, v[parent], ix[parent]);
            if (parent == 0) break;
        }
    }
    for (int i = k; i < n; i++) {
        if (v[i] > v[0]) {
            float val = v[i];
            int vi = ix[i];
            v[i] = v[0];
            ix[i] = ix[0];
            adjustHeap(v, ix, k, 0, val, vi);
        }
    }
}

__device__ void exactTopK(float* v, int* ix, int n, int k) {
    if (k <= 0 || k >= n) return;
    if ((long)k * 64 <= n) {
        heapSelect(v, ix, n, k);
        return;
    }
    int first = 0, last = n, nth = k - 1;
    for (int depth = 2 * (31 - __clz(n)); last - first > 3; depth--) {
        if (depth == 0) {
            heapSelect(v + first, ix + first, last - first, nth - first + 1);
            swp(v, ix, first, nth);
            return;
        }
        // __unguarded_partition_pivot: median of (first+1, mid, last-1) to first.
        int mid = first + (last - first) / 2;
        int a = first + 1, mm = mid, z = last - 1;
        if (gtv(v, a, mm)) {
            if (gtv(v, mm, z)) swp(v, ix, first, mm);
            else if (gtv(v, a, z)) swp(v, ix, first, z);
            else swp(v, ix, first, a);
        } else if (gtv(v, a, z)) swp(v, ix, first, a);
        else if (gtv(v, mm, z)) swp(v, ix, first, z);
        else swp(v, ix, first, mm);
        int lo = first + 1, hi = last;
        for (;;) {
            while (gtv(v, lo, first)) lo++;
            hi--;
            while (gtv(v, first, hi)) hi--;
            if (lo >= hi) break;
            swp(v, ix, lo, hi);
            lo++;
        }
        if (lo <= nth) first = lo;
        else last = lo;
    }
    // __insertion_sort of what is left.
    for (int i = first + 1; i < last; i++) {
        float val = v[i];
        int vi = ix[i];
        if (val > v[first]) {
            for (int j = i; j > first; j--) {
                v[j] = v[j - 1];
                ix[j] = ix[j - 1];
            }
            v[first] = val;
            ix[first] = vi;
            continue;
        }
        int j = i;
        while (val > v[j - 1]) {
            v[j] = v[j - 1];
            ix[j] = ix[j - 1];
            j--;
        }
        v[j] = val;
        ix[j] = vi;
    }
}

// One block (256 threads) per query row writes the row's attended
// positions, ascending, to sel[row*topk ..] and their count to cnt[row]:
// all of 0..pos when at most topk are visible, else the topk best scores.
// The k-th largest score is found by a 4-pass radix select (8 bits a pass)
// over the visible positions; when the positions at or above it are
// exactly topk (no tie straddles the boundary) they are the answer, else
// the CPU's algorithm decides the ties (exactTopK, one thread). The
// selected positions are marked in flag (aux, reused) and compacted in
// position order by a block-wide scan.
extern "C" __global__ void __launch_bounds__(256)
    dsa_topk(float* scores, int* aux, int* sel, int* cnt, const int* startp, int rows, long stride, int topk) {
    __shared__ unsigned hist[256];
    __shared__ unsigned sPrefix, sMask;
    __shared__ int sNeed, sEq;
    __shared__ int wsum[8];
    __shared__ int sBase;
    int row = blockIdx.x, tid = threadIdx.x;
    int start = *startp, n = start + row + 1, nc = start + rows;
    float* v = scores + (long)row * stride;
    int* flag = aux + (long)row * stride;
    int* out = sel + (long)row * topk;
    if (n <= topk) {
        for (int t = tid; t < n; t += blockDim.x) out[t] = t;
        if (tid == 0) cnt[row] = n;
        return;
    }
    if (tid == 0) {
        sPrefix = 0;
        sMask = 0;
        sNeed = topk;
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[tid] = 0;
        __syncthreads();
        unsigned prefix = sPrefix, mask = sMask;
        for (int t = tid; t < n; t += blockDim.x) {
            unsigned k = okey(v[t]);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int need = sNeed, d = 255;
            for (; d > 0 && (int)hist[d] < need; d--) need -= hist[d];
            sNeed = need;
            sEq = hist[d];
            sPrefix = prefix | ((unsigned)d << shift);
            sMask = mask | (255u << shift);
        }
        __syncthreads();
    }
    unsigned thr = sPrefix;
    bool exact = sNeed == sEq;  // every score equal to the threshold is taken
    if (exact) {
        for (int t = tid; t < nc; t += blockDim.x) flag[t] = t < n && okey(v[t]) >= thr;
    } else {
        // Candidates as the CPU sees them: all start+rows positions, the
        // later ones at -inf (dsa_scores_tc leaves them unwritten), in
        // position order.
        for (int t = n + tid; t < nc; t += blockDim.x) v[t] = -INFINITY;
        __syncthreads();
        if (tid == 0) {
            for (int t = 0; t < nc; t++) flag[t] = t;
            exactTopK(v, flag, nc, topk);
        }
        __syncthreads();
        // flag[0..topk) holds the chosen positions: turn the chosen ones
        // into marks in v (the scores are no longer needed).
        for (int t = tid; t < nc; t += blockDim.x) v[t] = 0.f;
        __syncthreads();
        for (int i = tid; i < topk; i += blockDim.x) v[flag[i]] = 1.f;
        __syncthreads();
        for (int t = tid; t < nc; t += blockDim.x) flag[t] = v[t] != 0.f;
    }
    if (tid == 0) sBase = 0;
    __syncthreads();
    int warp = tid >> 5, lane = tid & 31;
    for (int t0 = 0; t0 < nc; t0 += blockDim.x) {
        int t = t0 + tid;
        bool f = t < nc && flag[t];
        unsigned ballot = __ballot_sync(0xffffffffu, f);
        if (lane == 0) wsum[warp] = __popc(ballot);
        __syncthreads();
        int off = sBase;
        for (int w = 0; w < warp; w++) off += wsum[w];
        off += __popc(ballot & ((1u << lane) - 1));
        if (f && off < topk) out[off] = t;
        __syncthreads();
        if (tid == 0)
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) sBase += wsum[w];
        __syncthreads();
    }
    if (tid == 0) cnt[row] = min(sBase, topk);
}

// ---------------------------------------------------------------- DSA mask

#define DSA_MASK_MAXW 1024  // words a row (contexts ≤ 32768)

// dsa_mask: mask [rows, words] of each row's selected positions (sel/cnt
// of dsa_topk: bit t%32 of word t/32), for the expanded prompt form's
// masked flash kernel (kernels.DSAMask). Block per row, built in shared
// memory.
extern "C" __global__ void __launch_bounds__(256)
    dsa_mask(unsigned* mask, const int* sel, const int* cnt, int topk, int words) {
    __shared__ unsigned m[DSA_MASK_MAXW];
    const int row = blockIdx.x, n = cnt[row];
    const int* s = sel + (long)row * topk;
    for (int w = threadIdx.x; w < words; w += blockDim.x) m[w] = 0u;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int t = s[i];
        atomicOr(&m[t >> 5], 1u << (t & 31));
    }
    __syncthreads();
    for (int w = threadIdx.x; w < words; w += blockDim.x) mask[(long)row * words + w] = m[w];
}
