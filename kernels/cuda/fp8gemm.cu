// FP8 prefill GEMM (fp8gemm.go): y = x·wᵀ for an E4M3 weight with float32
// block scales (DeepSeek/Qwen's weight_scale_inv, [b0, b1] blocks, b1 %
// 128 == 0), read as stored: no bf16 copy of the weight.
//
// fp8_quant rounds the activation to E4M3 per (row, 128-column group) with
// a float32 scale s = amax/448 (1 where amax is 0), DeepSeek-V3's 1×128
// scaling: every group's largest element lands on 448, E4M3's largest
// finite value. fp8_gemm_t / fp8_gemm_c stream both E4M3 operands through
// shared memory (cp.async, 4 stages of 128 columns), load them as
// mma.sync m16n8k32 E4M3 fragments (ldmatrix), multiply 128 columns at a
// time with fp32 accumulation, and fold each 128-column partial into the
// result times the row's activation scale and the column's weight scale,
// on the CUDA cores: the tensor cores never accumulate across a scale
// change (DeepSeek-V3 promotes every 128 too).
//
// Hopper has no FP8 mma.sync (ptxas emulates mma .e4m3 on the f16 tensor
// cores, with extra adds; see mmaE4M3), so the multiply is f16 HMMAs on
// fragments widened in registers, exactly. What this saves on an H200 is
// fp8prefill.go's bf16 expansion (~5 bytes moved per weight element per
// GEMM, 1 here), which dominates at a few hundred rows. Hopper's FP8 rate
// (twice bf16) needs wgmma (sm_90a), which could take these operands,
// scales and fold as they are.
//
// Compiled to compute_90 PTX by `go generate` (fp8gemm.go); the PTX is
// committed and embedded.
#include <stdint.h>

#include "f16mma.cuh"
#include "tc.cuh"

#define QG 128     // activation scale group = the K of one stage
#define BM 128     // activation rows per block tile
#define BN 128     // weight rows (output columns) per block tile
#define STAGES 4   // cp.async pipeline depth
#define THREADS 256
#define TILE (BM * QG)                         // bytes of one operand tile (BN == BM)
#define STAGE_BYTES (2 * TILE + (BM + BN) * 4) // A, B, activation and weight scales
#define SMEM_BYTES (STAGES * STAGE_BYTES)      // 135168: dynamic shared memory (fp8gemm.go)

// ---------------------------------------------------------------- quantize

// e4m3x4 packs four floats as E4M3 bytes (round to nearest even, clamped
// to ±448; NaN stays NaN), a in the lowest byte. cvt.*.e4m3x2.f32 d, hi,
// lo puts its first source in d's upper byte (PTX ISA, cvt; as CUDA's
// cuda_fp8.hpp uses it).
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo, hi;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
        "mov.b32 %0, {lo, hi};\n\t}"
        : "=r"(r)
        : "f"(a), "f"(b), "f"(c), "f"(d));
    return r;
}

// fp8_quant: q[rows, in] = E4M3(x / s) and the scales s, one warp per
// (row, 128-column group), four columns per lane: sc[rows, in/128] for
// fp8gemm.cu's GEMM (gstride 0), or sc[in/128, gstride] for cuBLASLt's
// VEC128_32F (gstride ≥ rows: the padded row count). in % 128 == 0 and x 16-byte aligned (fp8gemm.go checks). s
// and x/s are IEEE divisions (nvcc's default -prec-div), which the Go
// emulation (fp8gemm_emu_test.go) repeats bit for bit.
extern "C" __global__ void __launch_bounds__(THREADS) fp8_quant(uint32_t* q, float* sc, const float* x, int rows,
                                                               int in, int gstride) {
    int groups = in / QG;
    long gw = (long)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
    if (gw >= (long)rows * groups) return;
    int lane = threadIdx.x & 31;
    long off = gw * QG + 4 * lane; // (row·groups + g)·128 = row·in + g·128
    float4 v = *(const float4*)(x + off);
    float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = m / 448.f;
    if (!(s > 0.f)) s = 1.f; // an all-zero group (or a NaN): any scale is exact
    q[off / 4] = e4m3x4(v.x / s, v.y / s, v.z / s, v.w / s);
    if (lane == 0) sc[gstride ? (gw % groups) * gstride + gw / groups : gw] = s;
}

// bf16_widen: y[i] = x[i] for bf16 x (exact), for cuBLASLt FP8 plans that
// write bf16.
extern "C" __global__ void __launch_bounds__(THREADS) bf16_widen(float* y, const uint16_t* x, long n) {
    long i = (long)blockIdx.x * THREADS + threadIdx.x;
    if (i < n) y[i] = __uint_as_float((uint32_t)x[i] << 16);
}

// ---------------------------------------------------------------- GEMM

// A block computes a BM×BN tile of y: rows m0.. of the activation (the
// mma's A, M = rows) against weight rows n0.. (its B, N = out); both are
// K-contiguous bytes, so "row.col" takes both as stored. 8 warps, 2 along
// M × 4 along N, each a 64×32 warp tile: 4 m16 × 4 n8 fragments.
//
// Shared memory, per stage: the A tile [128 rows][128 bytes], the B tile
// the same, then the stage's 128 activation scales and 128 weight scales.
// A row is eight 16-byte chunks; chunk c of row r sits at chunk c ^ (r&7)
// (swz), so the eight rows one ldmatrix phase reads, and the eight chunks
// one cp.async row fill writes, fall on distinct banks.
__device__ __forceinline__ int swz(int r, int c) { return r * QG + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ uint32_t smemAddr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cpAsync4(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

// loadStage queues stage kt's tiles and scales into st. Thread i copies
// chunks i + 256j (j < 4) of each tile: row (i>>3) + 32j, chunk i&7, so
// eight consecutive threads read one row's 128 contiguous bytes. Rows past
// the matrix read the last row (never stored). Threads 0-127 copy the
// activation scale of row m0+i, threads 128-255 the weight scale of
// weight row n0+i-128.
__device__ __forceinline__ void loadStage(uint8_t* st, const uint8_t* q, const float* sa, const uint8_t* w,
                                          const float* ws, int m0, int n0, int kt, int rows, int out, int in, int b0,
                                          int b1, int nsc) {
    int tid = threadIdx.x, k0 = kt * QG;
    uint32_t a = smemAddr(st), b = a + TILE;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int r = (tid >> 3) + 32 * j, c = tid & 7;
        cpAsync16(a + swz(r, c), q + (long)min(m0 + r, rows - 1) * in + k0 + 16 * c);
        cpAsync16(b + swz(r, c), w + (long)min(n0 + r, out - 1) * in + k0 + 16 * c);
    }
    uint32_t s = b + TILE + 4 * tid;
    if (tid < BM)
        cpAsync4(s, sa + (long)min(m0 + tid, rows - 1) * (in / QG) + kt);
    else
        cpAsync4(s, ws + (long)(min(n0 + tid - BM, out - 1) / b0) * nsc + k0 / b1);
}

__device__ __forceinline__ void ldsm4(uint32_t* r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void zero(float (*v)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) v[i][j][e] = 0.f;
}

// Fragments (PTX ISA 9.7.14.5.10, "Matrix Fragments for mma.m16n8k32",
// .e4m3; g = lane>>2, t = lane&3): A's four registers hold row g, k 4t..4t+3
// (a0-a3); row g+8, k 4t.. (a4-a7); row g, k 16+4t.. (a8-a11); row g+8,
// k 16+4t.. (a12-a15); B's two hold column (weight row) g at k 4t..4t+3
// (b0-b3) and k 16+4t.. (b4-b7); D's four floats are row g, columns 2t,
// 2t+1 (c0, c1) and row g+8 (c2, c3).
//
// ldmatrix .m8n8.x4.b16 (PTX ISA 9.7.14.5.15) reads four 8×16-byte
// matrices, lanes 8j..8j+7 giving the row addresses of matrix j, and
// returns matrix j's row g, bytes 4t..4t+3 in register j: exactly an E4M3
// A register's four bytes when matrix j is the right 8 rows × 16 columns.
// So for a 16-row A fragment at k step ks (bytes 32ks..32ks+31), lane l
// addresses row (l&15), chunk 2ks + (l>>4): matrices (rows 0-7, k 0-15),
// (rows 8-15, k 0-15), (rows 0-7, k 16-31), (rows 8-15, k 16-31) → a0-a15
// in order. For two 8-row B fragments, lane l addresses row
// ((l>>4)<<3) + (l&7), chunk 2ks + ((l>>3)&1): (n 0-7, k 0-15), (n 0-7,
// k 16-31), (n 8-15, k 0-15), (n 8-15, k 16-31) → b of fragment 2p, then
// of 2p+1.
//
// The multiply. On sm_90 mma.m16n8k32 .e4m3 is not a tensor-core
// instruction: ptxas 12.4 widens its operands (F2FP.F16.E4M3), issues two
// HMMA.16816 from zero accumulators and adds them in with 8 FADDs per mma
// (128 per k step of a warp tile, against 32 HMMAs). mmaE4M3 widens the
// same registers itself and accumulates in the HMMAs. A dot product only
// needs A and B to agree on which k each mma slot holds, so the k32 step
// is two m16n8k16 f16 mmas (PTX ISA 9.7.14.5.8: A's f16 pairs are row g,
// slots 2t, 2t+1; row g+8, same; row g, slots 2t+8, 2t+9; row g+8, same;
// B's are slots 2t, 2t+1 and 2t+8, 2t+9 of column g), half h taking
// k 16h..16h+15: bytes 0, 1 of E4M3 registers 2h (row g), 2h+1 (row g+8)
// and b[h] (k 16h+4t, +1) into slots 2t, 2t+1, bytes 2, 3 (k 16h+4t+2,
// +3) into slots 2t+8, 2t+9. The widening is exact (E4M3 ⊂ f16).
__device__ __forceinline__ void mmaE4M3(float* d, const uint32_t* a, const uint32_t* b) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t g0, g1, e0, e1, b0, b1; // row g, row g+8 (lo, hi pairs), B
        e4m3x4(a[2 * h], g0, g1);
        e4m3x4(a[2 * h + 1], e0, e1);
        e4m3x4(b[h], b0, b1);
        mma16816(d, g0, e0, g1, e1, b0, b1);
    }
}

// kstep is one k32 step of the warp tile: part += A·B over bytes
// 32ks..32ks+31 of the stage.
__device__ __forceinline__ void kstep(float (*part)[4][4], uint32_t sA, uint32_t sB, int ks, int ar, int ac, int br,
                                      int bc) {
    uint32_t a[4][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 4; mi++) ldsm4(a[mi], sA + swz(ar + 16 * mi, 2 * ks + ac));
#pragma unroll
    for (int p = 0; p < 2; p++) {
        uint32_t r[4];
        ldsm4(r, sB + swz(br + 16 * p, 2 * ks + bc));
        b[2 * p][0] = r[0], b[2 * p][1] = r[1], b[2 * p + 1][0] = r[2], b[2 * p + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mmaE4M3(part[mi][ni], a[mi], b[ni]);
}

// UW: every weight row of the tile shares one scale row (b0 % BN == 0),
// so the fold scales each activation row once and the weight scale is the
// stage's first.
template <bool UW>
__device__ __forceinline__ void gemm(float* y, const uint8_t* q, const float* sa, const uint8_t* w, const float* ws,
                                     int rows, int out, int in, int b0, int b1, int nsc) {
    extern __shared__ __align__(128) uint8_t smem[];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int wm = (warp >> 2) * 64, wn = (warp & 3) * 32; // the warp tile's first row and column
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int KT = in / QG;

    float acc[4][4][4];
    zero(acc);

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT) loadStage(smem + s * STAGE_BYTES, q, sa, w, ws, m0, n0, s, rows, out, in, b0, b1, nsc);
        cpCommit();
    }
    // The lane's ldmatrix rows (see above); (row & 7) == (lane & 7) for both.
    int ar = wm + (lane & 15), ac = lane >> 4;
    int br = wn + ((lane >> 4) << 3) + (lane & 7), bc = (lane >> 3) & 1;
    int g = lane >> 2, t = lane & 3;

    for (int kt = 0; kt < KT; kt++) {
        cpWait<STAGES - 2>(); // stage kt has landed (for this thread) ...
        __syncthreads();      // ... for every thread, and stage kt-1 is free
        int nk = kt + STAGES - 1;
        if (nk < KT)
            loadStage(smem + (nk % STAGES) * STAGE_BYTES, q, sa, w, ws, m0, n0, nk, rows, out, in, b0, b1, nsc);
        cpCommit();

        uint8_t* st = smem + (kt % STAGES) * STAGE_BYTES;
        uint32_t sA = smemAddr(st), sB = sA + TILE;
        float part[4][4][4];
        zero(part);
#pragma unroll
        for (int ks = 0; ks < QG / 32; ks++) kstep(part, sA, sB, ks, ar, ac, br, bc);
        // Fold: acc += part · sa[row] · ws[col] for the stage's scales.
        const float* ssa = (const float*)(st + 2 * TILE);
        const float* ssw = ssa + BM;
#pragma unroll
        for (int mi = 0; mi < 4; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float ra = ssa[wm + 16 * mi + 8 * h + g];
                if (UW) ra *= ssw[0];
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        float f = UW ? ra : ra * ssw[wn + 8 * ni + 2 * t + c];
                        acc[mi][ni][2 * h + c] = fmaf(part[mi][ni][2 * h + c], f, acc[mi][ni][2 * h + c]);
                    }
            }
    }
    cpWait<0>(); // nothing is left in flight at exit (the empty trailing groups)

#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = m0 + wm + 16 * mi + 8 * h + g;
            if (r >= rows) continue;
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int n = n0 + wn + 8 * ni + 2 * t + c;
                    if (n < out) y[(long)r * out + n] = acc[mi][ni][2 * h + c];
                }
        }
}

// fp8_gemm_t: y[rows, out] = x·wᵀ (overwritten) from fp8_quant's q and sa,
// when b0 % 128 == 0; fp8_gemm_c for any b0 (a weight scale per column).
// Grid (cdiv(out, 128), cdiv(rows, 128)), 256 threads, SMEM_BYTES of
// dynamic shared memory; in % 128 == 0, b1 % 128 == 0, nsc = cdiv(in, b1).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    fp8_gemm_t(float* y, const uint8_t* q, const float* sa, const uint8_t* w, const float* ws, int rows, int out,
               int in, int b0, int b1, int nsc) {
    gemm<true>(y, q, sa, w, ws, rows, out, in, b0, b1, nsc);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    fp8_gemm_c(float* y, const uint8_t* q, const float* sa, const uint8_t* w, const float* ws, int rows, int out,
               int in, int b0, int b1, int nsc) {
    gemm<false>(y, q, sa, w, ws, rows, out, in, b0, b1, nsc);
}
