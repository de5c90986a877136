package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/pocketllm/pocketllm/models/synth"
)

// runSynth writes a random checkpoint on the GPU machine itself (weights
// are never carried there): a named dense shape or preset, or any
// config.json, as safetensors through models/synth (bf16 or FP8), or a
// dense shape as a Q4_K_M-style GGUF.
func runSynth(args []string) error {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	shape := fs.String("shape", "llama3-8b", fmt.Sprint("model shape or preset: ", synth.AllNames()))
	config := fs.String("config", "", "config.json of any supported architecture (instead of --shape)")
	layers := fs.Int("layers", 0, "keep only the first N decoder layers (default: the shape's)")
	out := fs.String("out", "", "output directory")
	seed := fs.Uint64("seed", 1, "random seed")
	format := fs.String("format", "", "bf16, fp8 (safetensors), q4_k_m, q8_0 or iq2_xxs (one model.gguf; dense shapes); default: the shape's own")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	start := time.Now()
	var n int64
	var err error
	if *format == "q4_k_m" || *format == "q8_0" || *format == "iq2_xxs" {
		s, ok := synth.Shapes[*shape]
		if !ok || *config != "" {
			return fmt.Errorf("%s: only the dense shapes %v", *format, synth.Names())
		}
		if *layers > 0 {
			s.Layers = *layers
		}
		n, err = writeSynthGGUF(*out, s, *seed, *format)
	} else {
		var cfg []byte
		if *config != "" {
			if cfg, err = os.ReadFile(*config); err != nil {
				return err
			}
		}
		n, err = synth.Generate(*out, *shape, cfg, *format, *layers, *seed)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "synth: %s: %.2f GB in %.1fs\n", *out, float64(n)/1e9, time.Since(start).Seconds())
	return nil
}
