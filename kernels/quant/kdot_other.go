//go:build !amd64

package quant

import "github.com/pocketllm/pocketllm/kernels"

// rowLoop is an assembly row dot (kdot_amd64.go); there are none here.
type rowLoop struct {
	f    func(row *byte, x *float32, nb int) float32
	size int
}

func rowLoopOf(kernels.DType) rowLoop { return rowLoop{} }
