package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/pocketllm/pocketllm/models/synth"
)

// runSynth writes a random checkpoint of a named shape on the GPU machine
// itself (weights are never carried there): bf16 safetensors through
// models/synth, or a Q4_K_M-style GGUF.
func runSynth(args []string) error {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	shape := fs.String("shape", "llama3-8b", fmt.Sprint("model shape: ", synth.Names()))
	out := fs.String("out", "", "output directory")
	seed := fs.Uint64("seed", 1, "random seed")
	format := fs.String("format", "bf16", "bf16 (config.json + model.safetensors) or q4_k_m (one model.gguf)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, ok := synth.Shapes[*shape]
	if !ok {
		return fmt.Errorf("unknown shape %q (known: %v)", *shape, synth.Names())
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	start := time.Now()
	var n int64
	var err error
	switch *format {
	case "bf16":
		n, err = synth.Write(*out, s, *seed)
	case "q4_k_m":
		n, err = writeSynthGGUF(*out, s, *seed)
	default:
		return fmt.Errorf("unknown --format %q (bf16, q4_k_m)", *format)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "synth: %s: %.2f GB in %.1fs\n", *out, float64(n)/1e9, time.Since(start).Seconds())
	return nil
}
