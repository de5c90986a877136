//go:build cuda

package main

import (
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
)

func init() {
	rankBackends["cuda"] = func(device, _ int) (kernels.Backend, error) { return cuda.New(device) }
}
