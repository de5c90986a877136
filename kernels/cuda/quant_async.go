//go:build cuda

package cuda

// The cp.async-ring variants of the batch-1 GGUF GEMVs (quant_async.cuh):
// qmv_async and qmv_swiglu_async take qmv's and qmv_swiglu's arguments and
// lane mapping, but each warp keeps up to S-1 steps of its weights in
// flight through a ring in dynamic shared memory (108 KiB a block, two
// blocks per SM: 136-180 KiB in flight per SM against qmv's one step per
// warp held in registers). They serve every call qmv serves (MatMul's one
// row of Q4_K/Q6_K/Q8_0, NormMatMul, NormSwiGLU, MatMulAdd) when switched
// on: POCKET_QMV_ASYNC=1, or SetQMVAsync (conformance). Not yet measured on
// a GPU; the grid policy is qaWarps (quant_async_plan.go).

/*
#include <cuda.h>

// qa_shm_setup asks for the largest shared memory carveout for f (a hint:
// two blocks of qaShm need 220 KiB of the SM's 228) and returns in *occ
// the blocks of bx threads with shm bytes of dynamic shared memory an SM
// holds.
static CUresult qa_shm_setup(CUfunction f, int bx, int shm, int *occ) {
	CUresult r = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100);
	if (r != CUDA_SUCCESS) return r;
	return cuOccupancyMaxActiveBlocksPerMultiprocessor(occ, f, bx, (size_t)shm);
}
*/
import "C"

import "fmt"

// qaKernels are the async variants in the quant module.
type qaKernels struct {
	on      bool  // they serve qmv's calls
	mv, swi cFunc // qmv_async, qmv_swiglu_async
	occ     int   // blocks per SM (the driver's occupancy; qaOcc expected)
	err     error // why they cannot run
}

// load resolves the kernels, raises their dynamic shared memory limit to
// qaShm and asks for the shared memory carveout; a failure of the latter
// only matters once they are switched on.
func (k *qaKernels) load(get func(string) (cFunc, error)) error {
	var err error
	if k.mv, err = get("qmv_async"); err != nil {
		return err
	}
	if k.swi, err = get("qmv_swiglu_async"); err != nil {
		return err
	}
	k.occ = qaOcc
	for _, f := range []cFunc{k.mv, k.swi} {
		if k.err == nil {
			k.err = setMaxShm(f, qaShm)
		}
		var occ C.int
		if k.err == nil {
			k.err = cuErr("qmv_async occupancy", C.qa_shm_setup(f, 256, qaShm, &occ))
		}
		if k.err == nil && occ < 1 {
			k.err = fmt.Errorf("cuda: qmv_async: no block of %d bytes of shared memory fits an SM", qaShm)
		}
		if k.err == nil {
			k.occ = min(k.occ, int(occ))
		}
	}
	k.on = switches.qmvAsync
	return nil
}

// qmvPlan is the kernel for a qmv launch (swi: qmv_swiglu's) over groups
// row groups of in columns, its warps per group and dynamic shared memory.
func (b *Backend) qmvPlan(swi bool, groups, in int) (f cFunc, wpr, shm int) {
	q := b.q
	if !q.qa.on {
		f = q.mv
		if swi {
			f = q.swi
		}
		return f, b.qmvWarps(groups, in), 0
	}
	b.fail(q.qa.err) // switched on by request: an error, not a quiet fallback
	f = q.qa.mv
	if swi {
		f = q.qa.swi
	}
	return f, qaWarps(groups, in, q.qa.occ*b.sms), qaShm
}

// runQShm is runQ with shm bytes of dynamic shared memory.
func (b *Backend) runQShm(f cFunc, gx, bx, shm int, args ...uint64) {
	if shm == 0 {
		b.runQ(f, gx, bx, args...)
		return
	}
	if b.err != nil || gx <= 0 {
		return
	}
	b.a(args...)
	if switches.noPDL {
		b.fail(launchShm(f, gx, 1, bx, shm, b.s, &b.args, b.nargs))
		return
	}
	b.fail(launchPDLShm(f, gx, 1, bx, shm, b.s, &b.args, b.nargs))
}

// SetQMVAsync turns the cp.async-ring GEMVs on or off (default off;
// POCKET_QMV_ASYNC=1 on), so that conformance can check them; it returns
// the previous setting.
func (b *Backend) SetQMVAsync(on bool) (was bool) {
	if !b.enter() {
		b.exit()
		return false
	}
	defer b.exit()
	q, err := b.quantModule()
	if err != nil {
		b.fail(err)
		return false
	}
	was, q.qa.on = q.qa.on, on
	return was
}
