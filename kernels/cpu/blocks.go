package cpu

import (
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/quant"
)

// GGUF block formats are executed by package quant, which reads each block
// in place; the CPU backend only routes rows to it.
func blockSupported(t kernels.DType) bool { return quant.Supported(t) }

func blockDequant(t kernels.DType, src []byte, dst []float32) error {
	return quant.DequantizeRow(t, src, dst)
}

func blockDot(t kernels.DType, row []byte, x []float32) float32 { return quant.DotRow(t, row, x) }

// blockDots is blockDot over a run of consecutive rows (quant.DotRows).
func blockDots(t kernels.DType, rows []byte, x, dst []float32) { quant.DotRows(t, rows, x, dst) }
