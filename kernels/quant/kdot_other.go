//go:build !amd64

package quant

import "github.com/pocketllm/pocketllm/kernels"

// rowLoop is an assembly row dot (kdot_amd64.go); there are none here.
type rowLoop struct {
	f    func(row *byte, x *float32, nb int) float32
	size int
}

func rowLoopOf(kernels.DType) rowLoop { return rowLoop{} }

func dotQ4KFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ6KFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ8_0Fast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ5KFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ4NLFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ4XSFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ4_0Fast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ3KFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ2KFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ4_1Fast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ5_0Fast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotQ5_1Fast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotMXFP4Fast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ2XXSFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ3XXSFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ2XSFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ2SFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ3SFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ1SFast(row []byte, x []float32) (float32, bool) { return 0, false }

func dotIQ1MFast(row []byte, x []float32) (float32, bool) { return 0, false }
