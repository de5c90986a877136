//go:build cuda

package main

import "github.com/pocketllm/pocketllm/kernels"

// quantAsync checks the batch-1 GGUF GEMVs that stream their weights
// through a per-warp cp.async ring in shared memory (qmv_async and
// qmv_swiglu_async, kernels/cuda quant_async.cuh; POCKET_QMV_ASYNC=1, here
// switched on with SetQMVAsync whatever the environment says) against the
// CPU as the qmv cases are checked: MatMul's one row on qmv's shapes and
// on ones that exercise the ring, then the fused ops (NormMatMul,
// NormSwiGLU, MatMulAdd), reported with the suffix "Async".
func (c *conf) quantAsync() {
	was := c.g.SetQMVAsync(true)
	defer c.g.SetQMVAsync(was)
	type mm struct{ out, in int }
	shapes := []mm{{300, 512}, {4096, 4096}, {1024, 12288}, {7, 256}, {33, 1280}, {4099, 4096}, {513, 12288}, {130, 768},
		// The ring: 8 steps per warp (one warp per row group: the ring
		// wraps for every format), 10 steps with a one-block last step
		// and Q6_K rows at every even misalignment (odd blocks per row),
		// 6 steps per warp of two, 25 steps over 8 warps per group (4 or
		// 3 each), a one-block row.
		{8192, 8192}, {8000, 9472}, {4096, 12288}, {37, 25600}, {5, 256}}
	for _, dt := range []kernels.DType{kernels.Q4_K, kernels.Q6_K, kernels.Q8_0} {
		for _, s := range shapes {
			c.quantMatMulOp("QMatMulAsync", dt, 1, s.out, s.in)
		}
	}
	c.quantFused("Async")
}
