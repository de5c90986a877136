package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/models/synth"
)

func newSynthCmd() *cobra.Command {
	var shape, out string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "synth --shape NAME --out DIR",
		Short: "Write a random-weight bf16 checkpoint of a real model shape (for benchmarks)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, ok := synth.Shapes[shape]
			if !ok {
				return fmt.Errorf("unknown shape %q (known: %v)", shape, synth.Names())
			}
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			_, err := synth.Write(out, s, seed)
			return err
		},
	}
	cmd.Flags().StringVar(&shape, "shape", "qwen3-0.6b", "model shape: "+fmt.Sprint(synth.Names()))
	cmd.Flags().StringVar(&out, "out", "", "output directory")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed")
	return cmd
}
