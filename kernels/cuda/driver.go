//go:build cuda

package cuda

// Driver calls gorgonia.org/cu does not wrap, or wraps with allocations on
// the hot path: kernel launch with a reused argument block, and stream
// capture into CUDA graphs.

/*
#cgo LDFLAGS: -lcuda
#cgo linux CFLAGS: -I/usr/local/cuda/include -I/usr/include
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64 -L/usr/lib/x86_64-linux-gnu
#include <cuda.h>
#include <string.h>

static CUresult pl_launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned shm, CUstream s,
                          unsigned long long *a, int n) {
	void *params[32];
	for (int i = 0; i < n && i < 32; i++) params[i] = &a[i];
	return cuLaunchKernel(f, gx, gy, 1, bx, 1, 1, shm, s, params, NULL);
}

// pl_launch_pdl is pl_launch with programmatic stream serialization: the
// kernel may start before its predecessor on the stream has finished and
// waits for it itself (griddepcontrol.wait; see decode.cu).
static CUresult pl_launch_pdl(CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned shm, CUstream s,
                              unsigned long long *a, int n) {
	void *params[32];
	for (int i = 0; i < n && i < 32; i++) params[i] = &a[i];
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof attr);
	attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attr.value.programmaticStreamSerializationAllowed = 1;
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = gx;
	cfg.gridDimY = gy;
	cfg.gridDimZ = 1;
	cfg.blockDimX = bx;
	cfg.blockDimY = 1;
	cfg.blockDimZ = 1;
	cfg.sharedMemBytes = shm;
	cfg.hStream = s;
	cfg.attrs = &attr;
	cfg.numAttrs = 1;
	return cuLaunchKernelEx(&cfg, f, params, NULL);
}

// pl_launch_coop is pl_launch as a cooperative launch: every block of the
// grid resident at once, or an error (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE),
// so that the blocks may wait for each other (sample_grid.cuh's gridSync).
static CUresult pl_launch_coop(CUfunction f, unsigned gx, unsigned bx, CUstream s, unsigned long long *a, int n) {
	void *params[32];
	for (int i = 0; i < n && i < 32; i++) params[i] = &a[i];
	return cuLaunchCooperativeKernel(f, gx, 1, 1, bx, 1, 1, 0, s, params);
}

// pl_max_shm lets f take up to bytes of dynamic shared memory (above the
// 48 KiB a launch gets without asking).
static CUresult pl_max_shm(CUfunction f, int bytes) {
	return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

static CUresult pl_begin_capture(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
}

static CUresult pl_end_capture(CUstream s, CUgraphExec *exec) {
	CUgraph g;
	CUresult r = cuStreamEndCapture(s, &g);
	if (r != CUDA_SUCCESS) return r;
	r = cuGraphInstantiateWithFlags(exec, g, 0);
	cuGraphDestroy(g);
	return r;
}

static CUresult pl_graph_launch(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
static CUresult pl_graph_destroy(CUgraphExec e) { return cuGraphExecDestroy(e); }
static const char *pl_error_name(CUresult r) {
	const char *s = 0;
	cuGetErrorName(r, &s);
	return s ? s : "unknown CUDA error";
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// Aliases so that files without cgo can hold driver handles.
type (
	cStream = C.CUstream
	cFunc   = C.CUfunction
	cGraph  = C.CUgraphExec
)

// cuErr turns a driver result into an error.
func cuErr(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (%d)", op, C.GoString(C.pl_error_name(r)), int(r))
}

// cfunc and cstream read the driver handles out of cu's wrappers (each is
// a struct holding exactly the handle).
func cfunc(f cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }
func cstream(s cu.Stream) C.CUstream   { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// launch starts f on the stream with n one-word arguments from args (which
// must not be Go stack memory: the caller passes a field of the Backend).
func launch(f C.CUfunction, gx, gy, bx int, s C.CUstream, args *[32]uint64, n int) error {
	probeNote(f, gx, gy, bx)
	return cuErr("launch", C.pl_launch(f, C.uint(gx), C.uint(gy), C.uint(bx), 0, s,
		(*C.ulonglong)(unsafe.Pointer(&args[0])), C.int(n)))
}

// launchShm is launch with shm bytes of dynamic shared memory (more than
// 48 KiB only after setMaxShm).
func launchShm(f C.CUfunction, gx, gy, bx, shm int, s C.CUstream, args *[32]uint64, n int) error {
	probeNote(f, gx, gy, bx)
	return cuErr("launch", C.pl_launch(f, C.uint(gx), C.uint(gy), C.uint(bx), C.uint(shm), s,
		(*C.ulonglong)(unsafe.Pointer(&args[0])), C.int(n)))
}

// launchCoop is launch as a cooperative launch (pl_launch_coop). tooLarge
// reports the one refusal a caller can work around: the grid cannot be
// resident at once (fewer SMs than the device reported, e.g. under MPS);
// nothing was launched then and err is nil.
func launchCoop(f C.CUfunction, gx, bx int, s C.CUstream, args *[32]uint64, n int) (tooLarge bool, err error) {
	probeNote(f, gx, 1, bx)
	r := C.pl_launch_coop(f, C.uint(gx), C.uint(bx), s, (*C.ulonglong)(unsafe.Pointer(&args[0])), C.int(n))
	if r == C.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE {
		return true, nil
	}
	return false, cuErr("cooperative launch", r)
}

// setMaxShm raises f's dynamic shared memory limit to bytes.
func setMaxShm(f C.CUfunction, bytes int) error {
	return cuErr("set shared memory size", C.pl_max_shm(f, C.int(bytes)))
}

// launchPDL is launch with programmatic dependent launch (the kernel must
// call griddepcontrol.wait before it touches its predecessor's results).
func launchPDL(f C.CUfunction, gx, gy, bx int, s C.CUstream, args *[32]uint64, n int) error {
	probeNote(f, gx, gy, bx)
	return cuErr("launch", C.pl_launch_pdl(f, C.uint(gx), C.uint(gy), C.uint(bx), 0, s,
		(*C.ulonglong)(unsafe.Pointer(&args[0])), C.int(n)))
}

// launchPDLShm is launchPDL with shm bytes of dynamic shared memory.
func launchPDLShm(f C.CUfunction, gx, gy, bx, shm int, s C.CUstream, args *[32]uint64, n int) error {
	probeNote(f, gx, gy, bx)
	return cuErr("launch", C.pl_launch_pdl(f, C.uint(gx), C.uint(gy), C.uint(bx), C.uint(shm), s,
		(*C.ulonglong)(unsafe.Pointer(&args[0])), C.int(n)))
}

func beginCapture(s C.CUstream) error {
	probeMark("capture")
	return cuErr("begin capture", C.pl_begin_capture(s))
}

func endCapture(s C.CUstream) (C.CUgraphExec, error) {
	probeMark("end capture")
	var e C.CUgraphExec
	err := cuErr("end capture", C.pl_end_capture(s, &e))
	return e, err
}

func graphLaunch(e C.CUgraphExec, s C.CUstream) error {
	return cuErr("graph launch", C.pl_graph_launch(e, s))
}

func graphDestroy(e C.CUgraphExec) { C.pl_graph_destroy(e) }
