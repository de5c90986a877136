package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/internal/kvseq"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

func newLogitsCmd() *cobra.Command {
	var model, ids, out, backend string
	cmd := &cobra.Command{
		Use:   "logits --model DIR --ids 1,2,3 --out FILE",
		Short: "Write the logits at every prompt position to a safetensors file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			toks, err := parseIDs(ids)
			if err != nil {
				return err
			}
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			ck, m, err := loadModel(model, backend, 0)
			if err != nil {
				return err
			}
			defer ck.Close()
			seq, err := kvseq.Private(m, len(toks), 16, false)
			if err != nil {
				return err
			}
			logits, err := m.Forward(seq, toks, models.AllLogits)
			if err != nil {
				return err
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(f)
			err = safetensors.Write(w, []safetensors.Tensor{
				safetensors.F32Tensor("logits", []int{len(toks), m.Config.VocabSize}, logits),
				safetensors.I32Tensor("input_ids", []int{len(toks)}, toks),
			}, map[string]string{"model": ck.Name, "backend": m.Backend.Name()})
			if err == nil {
				err = w.Flush()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "checkpoint directory or .gguf file")
	cmd.Flags().StringVar(&ids, "ids", "", "comma-separated prompt token ids")
	cmd.Flags().StringVar(&out, "out", "", "output safetensors file")
	cmd.Flags().StringVar(&backend, "backend", "cpu", "backend (cpu)")
	return cmd
}
