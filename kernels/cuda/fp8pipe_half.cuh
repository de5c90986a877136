// The ring-streamed FP8 GEMV (fp8pipe.cuh) over half tiles: the rows are
// split among the blocks in 8-row halves, so that every SM streams a share
// (included by fp8mma.cu after fp8pipe.cuh; fp8pipe.go launches it where
// planHalf says it fills the SMs better than whole tiles).
//
// Why: the output projections of Qwen3.5-27B (5120 rows: 320 tiles of 16)
// go one block per SM with whole tiles: 3 tiles a block make 107 blocks,
// and 25 of the 132 SMs stream nothing. In the captured step they ran at
// 81% of their byte time, 107/132. In halves, 640 over 132 blocks are 4 or
// 5 a block: at most 2.5 tiles' bytes an SM instead of 3.
//
// A block's halves [h0, h1) become at most 3 slots (planHalf checks G):
// an odd first half alone, then whole tiles, then an even last half alone.
// A slot is a tile of fp8pipe's kind for wpr warps; a half slot copies only
// its 8 rows (PipeDot's HALF) and stores them. Each row has one block, so
// nothing is combined across blocks: a split of the columns over blocks
// (stream-K) measured slower for the four dependent round trips its finish
// adds to every launch.

// halfSlot is slot s of the block with halves [h0, h1): its first row and
// its rows (16, 8, or 0 past the block's last slot).
__device__ __forceinline__ void halfSlot(int h0, int h1, int s, int& base, int& rows) {
    int h = h0;
    base = 0;
    rows = 0;
    for (int k = 0; k <= s && h < h1; k++) {
        int len = (h & 1) || h + 2 > h1 ? 1 : 2;
        if (k == s) {
            base = h * 8;
            rows = len * 8;
        }
        h += len;
    }
}

// pipeHalfGemv is pipeGemv (MODE 0 y = W·x, 1 y += W·x) with the block's
// rows in half-tile slots.
template <int S, int MODE>
__device__ __forceinline__ void pipeHalfGemv(float* y, const float* __restrict__ x, const uint8_t* w, const float* sc,
                                             int out, int in, int wpr, int b0, int nsc) {
    __shared__ float red[32][16];
    const int pad = (in + UNIT - 1) / UNIT * UNIT;
    __half* xs = (__half*)pipeShm;
    const int warp = threadIdx.x >> 5, G = (blockDim.x >> 5) / wpr;
    const int H = (out + 7) / 8;
    const int h0 = (int)((long)H * blockIdx.x / gridDim.x), h1 = (int)((long)H * (blockIdx.x + 1) / gridDim.x);
    int base, rows;
    halfSlot(h0, h1, warp / wpr, base, rows);
    PipeDot<S, true> d;
    d.half = rows == 8;
    pipeSources(d, w, w, base, d.half ? base : base + 8, out, in);
    d.prefetch(gemvRows(w, sc, base, out, in, b0, nsc), in, warp % wpr, wpr, rows > 0 && base < out,
               pipeRing<S>(pad));
    pdlLaunchDependents();
    pdlWait();
    float k = gemvPrologue<MODE>(xs, x, nullptr, 0.f, in);
    float accA, accB;
    d.finish(xs, accA, accB);
    tileSums(red, accA, accB);
    const int i = threadIdx.x;
    if (i < G * 16) {
        int sb, sr;
        halfSlot(h0, h1, i / 16, sb, sr);
        const int o = sb + i % 16;
        if (i % 16 < sr && o < out) {
            float v = tileTotal(red, i / 16, wpr, i % 16) * k;
            y[o] = MODE == 1 ? y[o] + v : v;
        }
    }
}

#define PIPE_HALF(NAME, S, MODE)                                                      \
    extern "C" __global__ void __launch_bounds__(768, 1) NAME(GEMV_ARGS) {            \
        pipeHalfGemv<S, MODE>(y, x, w, sc, out, in, wpr, b0, nsc);                    \
    }
PIPE_HALF(f8pipe_h_r_3, 3, 0)
PIPE_HALF(f8pipe_h_r_4, 4, 0)
PIPE_HALF(f8pipe_h_r_6, 6, 0)
PIPE_HALF(f8pipe_h_r_8, 8, 0)
PIPE_HALF(f8pipe_h_add_3, 3, 1)
PIPE_HALF(f8pipe_h_add_4, 4, 1)
PIPE_HALF(f8pipe_h_add_6, 6, 1)
PIPE_HALF(f8pipe_h_add_8, 8, 1)
