//go:build cuda

package cuda

// Page-locking host memory that the Go runtime does not own (a worker's
// shared-memory mapping), so that copies between it and the device are
// DMA transfers instead of being staged by the driver.

/*
#include <cuda.h>

static CUresult pl_host_register(void *p, size_t n) {
	return cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE);
}
static CUresult pl_host_alloc_staging(void **h, size_t n) {
	return cuMemHostAlloc(h, n, CU_MEMHOSTALLOC_PORTABLE);
}
static CUresult pl_host_alloc_mapped(void **h, CUdeviceptr *d, size_t n) {
	CUresult r = cuMemHostAlloc(h, n, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
	if (r != CUDA_SUCCESS) return r;
	return cuMemHostGetDevicePointer(d, *h, 0);
}
*/
import "C"

import (
	"errors"
	"os"
	"unsafe"

	"gorgonia.org/cu"
)

// PinHost page-locks b (whole pages from its start; b must not be Go heap
// memory, e.g. an mmap'd region) for the life of the process: there is no
// unpin, because the callers map such regions once and never unmap them.
func (b *Backend) PinHost(p []byte) error {
	n := len(p) &^ (os.Getpagesize() - 1)
	if n == 0 || uintptr(unsafe.Pointer(&p[0]))%uintptr(os.Getpagesize()) != 0 {
		return errors.New("cuda: pin host memory: not a page-aligned region of whole pages")
	}
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	// A failure here (no memory to lock, a kernel that refuses) leaves
	// the context healthy: it is the caller's to report, not b.err.
	return cuErr("pin host memory", C.pl_host_register(unsafe.Pointer(&p[0]), C.size_t(n)))
}

// stagingBufs are two page-locked host buffers of n bytes for uploads
// that pass through the host (uploadStaged), allocated on the first
// call and kept for the process: a fresh Go buffer a tensor cost its page
// faults and zeroing every time, and a pageable source makes the driver
// stage the copy itself. Where page-locking fails they are Go memory.
// Context current.
func (b *Backend) stagingBufs(n int) [2][]byte {
	if len(b.staging[0]) >= n {
		return b.staging
	}
	for i := range b.staging {
		var h unsafe.Pointer
		if C.pl_host_alloc_staging(&h, C.size_t(n)) == C.CUDA_SUCCESS {
			b.staging[i] = unsafe.Slice((*byte)(h), n)
		} else {
			b.staging[i] = make([]byte, n)
		}
	}
	return b.staging
}

// mappedInts allocates n int32s of page-locked host memory that kernels
// write directly (the fed steps' token ring, graph.go), kept for the
// process: the host slice and its device address. Context current.
func mappedInts(n int) ([]int32, cu.DevicePtr, error) {
	var h unsafe.Pointer
	var d C.CUdeviceptr
	if err := cuErr("map host memory", C.pl_host_alloc_mapped(&h, &d, C.size_t(n*4))); err != nil {
		return nil, 0, err
	}
	return unsafe.Slice((*int32)(h), n), cu.DevicePtr(d), nil
}
