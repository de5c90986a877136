// Split RMSNorm of the CUDA backend (tpnorm.go): kernels.TPNormOps, the
// q/k norm over all heads of a model whose heads are split over a
// tensor-parallel group (MiniMax-M2). The CPU backend
// (kernels/cpu/tpnorm.go) is the reference: sums of squares are
// accumulated in double and the scale is computed in double, as there.
//
// Compiled to compute_90 PTX by `go generate` (tpnorm.go); the PTX is
// committed and embedded.

__device__ __forceinline__ double warpSumD(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One block per row: dst[r] = Σ x[r,:]².
extern "C" __global__ void tp_sum_squares(float* dst, const float* x, int dim) {
    __shared__ double part[32];
    long r = blockIdx.x;
    const float* xr = x + r * dim;
    double ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * xr[i];
    ss = warpSumD(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double tot = 0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += part[i];
        dst[r] = (float)tot;
    }
}

// One block per row: dst = x * w / sqrt(ss[r]*scale + eps). Each thread
// reads and writes only its own elements, so dst may be x.
extern "C" __global__ void tp_rms_norm_sum(float* dst, const float* x, const float* ss, const float* w, int dim,
                                           float scale, float eps) {
    long r = blockIdx.x;
    float inv = (float)(1.0 / sqrt((double)ss[r] * (double)scale + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        dst[r * dim + i] = __fmul_rn(__fmul_rn(x[r * dim + i], inv), w[i]);
}
