package cpu

import "github.com/pocketllm/pocketllm/kernels"

// GGUF block formats are executed by package kernels/quant; until it is
// wired in, the CPU reports them unsupported rather than guessing.
func blockSupported(kernels.DType) bool                         { return false }
func blockDequant(kernels.DType, []byte, []float32) error       { return kernels.ErrUnsupported }
func blockDot(t kernels.DType, row []byte, x []float32) float32 { return 0 }
