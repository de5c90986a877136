//go:build cuda

package main

import (
	"flag"

	"github.com/pocketllm/pocketllm/kernels/cuda"
)

func init() {
	commands["conformance"] = runConformance
	commands["parity"] = runParity
	commands["bench"] = runBench
	commands["tp"] = runTP
	commands["qbench"] = runQBench
	commands["membw"] = runMemBW
}

// openDevice parses --device and opens that GPU.
func deviceFlag(fs *flag.FlagSet) *int { return fs.Int("device", 0, "GPU ordinal") }

func openDevice(ordinal int) (*cuda.Backend, error) { return cuda.New(ordinal) }
