//go:build cuda

package cuda

import (
	"fmt"
	"runtime"

	"gorgonia.org/cu"
)

// NewRank is New for a rank of a tensor-parallel group: the backend runs
// in the device's primary context instead of a private one. NCCL (like
// every library built on the CUDA runtime) makes the primary context
// current on the threads it uses (cudaSetDevice) and allocates its
// buffers, streams and events there; an all-reduce queued on a stream of
// another context then fails ("unhandled cuda error", seen on NCCL 2.28).
// Sharing the primary context puts our kernels, our stream and NCCL's
// resources in one context.
//
// The body mirrors New apart from the context; New could take the
// primary context itself (one line), and then this constructor can go.
func NewRank(ordinal int) (*Backend, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, fmt.Errorf("cuda: primary context on device %d: %w", ordinal, err)
	}
	if err := cu.SetCurrentContext(ctx); err != nil {
		return nil, fmt.Errorf("cuda: primary context on device %d: %w", ordinal, err)
	}
	b := &Backend{dev: dev, ctx: ctx, rope: map[ropeKey]cu.DevicePtr{}, free: map[int64][]cu.DevicePtr{}}
	if b.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: stream: %w", err)
	}
	b.s = cstream(b.stream)
	mod, err := cu.LoadData(ptx)
	if err != nil {
		return nil, fmt.Errorf("cuda: load PTX: %w", err)
	}
	for i, name := range funcNames {
		f, err := mod.Function(name)
		if err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		b.fn[i] = cfunc(f)
	}
	if b.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return nil, err
	}
	b.openLt()
	b.attn128 = fAttnPrefill128x3
	if switches.attnOcc2 {
		b.attn128 = fAttnPrefill128
	}
	return b, nil
}
