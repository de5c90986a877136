//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

var (
	_ kernels.BufCopier  = (*Backend)(nil)
	_ kernels.BufViewer  = (*Backend)(nil)
	_ kernels.MemoryRoom = (*Backend)(nil)
)

// CopyBuf implements kernels.BufCopier: a device-to-device copy queued on
// the stream (a hybrid's 151 MB state in ~0.1 ms, where Read and Write
// through the host take tens of milliseconds).
func (b *Backend) CopyBuf(dst, src kernels.Buf, n int) {
	if n <= 0 {
		return
	}
	if b.enter() {
		switch {
		case b.cap != nil:
			b.cap.err = fmt.Errorf("cuda: CopyBuf during graph capture: %w", kernels.ErrUnsupported)
		case n > dst.Len() || n > src.Len():
			b.fail(fmt.Errorf("cuda: CopyBuf of %d floats between buffers of %d and %d", n, dst.Len(), src.Len()))
		default:
			b.fail(cu.MemcpyDtoDAsync(dptr(dst), dptr(src), int64(n)*4, b.stream))
		}
	}
	b.exit()
}

// ViewBuf implements kernels.BufViewer: the range's device address, the
// view keeping the memory's owner alive (its finalizer frees it). A range
// outside x is a bug of the caller, which computes it from the shapes it
// made x with: it panics, as slicing does.
func (b *Backend) ViewBuf(x kernels.Buf, off, n int) kernels.Buf {
	d := x.(*Buf)
	if off < 0 || n < 0 || off+n > d.n {
		panic(fmt.Sprintf("cuda: ViewBuf [%d, %d) of a buffer of %d", off, off+n, d.n))
	}
	owner := d
	if d.whole != nil {
		owner = d.whole
	}
	return &Buf{p: d.p + cu.DevicePtr(4*off), n: n, whole: owner}
}

// FreeBytes implements kernels.MemoryRoom: the device's free memory as
// the driver counts it, plus the buffers on the backend's own free lists
// (freed buffers stay there for reuse, and a held snapshot's clone takes
// the sizes an evicted one left).
func (b *Backend) FreeBytes() (int64, error) {
	if !b.enter() {
		b.exit()
		return 0, b.err
	}
	defer b.exit()
	free, _, err := cu.MemInfo()
	b.poolMu.Lock()
	for size, l := range b.free {
		free += size * int64(len(l))
	}
	b.poolMu.Unlock()
	return free, err
}
