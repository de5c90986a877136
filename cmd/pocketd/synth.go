package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/models/synth"
)

func newSynthCmd() *cobra.Command {
	var shape, out, config, format string
	var layers int
	var seed uint64
	cmd := &cobra.Command{
		Use:   "synth (--shape NAME | --config FILE) --out DIR",
		Short: "Write a random-weight checkpoint of a real model shape or any config.json (for benchmarks)",
		Long: "Writes config.json and model.safetensors with random weights: a named shape or preset, or\n" +
			"whatever registered architecture --config names (tensors as `pocketd inspect` expects them).\n" +
			"--layers keeps the first N layers at full width; --format fp8 stores the layers' projections\n" +
			"as FP8 E4M3 with 128×128 block scales.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			var cfg []byte
			if config != "" {
				var err error
				if cfg, err = os.ReadFile(config); err != nil {
					return err
				}
			}
			_, err := synth.Generate(out, shape, cfg, format, layers, seed)
			return err
		},
	}
	cmd.Flags().StringVar(&shape, "shape", "qwen3-0.6b", "model shape or preset: "+fmt.Sprint(synth.AllNames()))
	cmd.Flags().StringVar(&config, "config", "", "config.json of any supported architecture (instead of --shape)")
	cmd.Flags().StringVar(&format, "format", "", "bf16 or fp8 (default: the shape's own)")
	cmd.Flags().IntVar(&layers, "layers", 0, "keep only the first N decoder layers (default: the shape's)")
	cmd.Flags().StringVar(&out, "out", "", "output directory")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed")
	return cmd
}
