//go:build cuda

package cuda

import (
	"fmt"

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
func NewRank(ordinal int) (*Backend, error) {
	return newBackend(ordinal, func(dev cu.Device) (cu.CUContext, error) {
		ctx, err := dev.RetainPrimaryCtx()
		if err != nil {
			return ctx, fmt.Errorf("cuda: primary context on device %d: %w", ordinal, err)
		}
		if err := cu.SetCurrentContext(ctx); err != nil {
			return ctx, fmt.Errorf("cuda: primary context on device %d: %w", ordinal, err)
		}
		return ctx, nil
	})
}
