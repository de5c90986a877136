package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// newGenerateCmd runs one generation without the daemon, through the same
// session engine the daemon uses (in-memory, no state directory), so
// sampling, stop strings and EOS handling are the daemon's own.
func newGenerateCmd() *cobra.Command {
	var model, ids, prompt, backend string
	var maxNew, topK int
	var temperature, topP, minP, repPen, presPen, freqPen float64
	var seed int64
	var stop []string
	cmd := &cobra.Command{
		Use:   "generate --model DIR (--ids 1,2,3 | --prompt TEXT) [--max-new-tokens N] [--temperature T ...]",
		Short: "Generate a continuation without the daemon (greedy by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (ids == "") == (prompt == "") {
				return fmt.Errorf("give exactly one of --ids and --prompt")
			}
			ck, m, err := loadModel(model, backend, 0)
			if err != nil {
				return err
			}
			defer ck.Close()
			tok, err := loadTokenizer(model)
			if err != nil {
				return err
			}
			mgr, err := session.NewManager(session.Options{})
			if err != nil {
				return err
			}
			defer mgr.Shutdown(context.Background())
			if err := mgr.AddModel(session.ModelConfig{Name: ck.Name, Model: m, Tokenizer: tok, EOS: ck.EOS()}); err != nil {
				return err
			}
			s, err := mgr.Open(0, ck.Name)
			if err != nil {
				return err
			}
			in := session.AppendInput{Text: prompt}
			if ids != "" {
				if in.Tokens, err = parseIDs(ids); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if _, err := mgr.Append(ctx, 0, s.ID, in); err != nil {
				return err
			}
			p := session.GenerateParams{MaxTokens: maxNew, Stop: stop, Sampling: session.SamplingParams{
				Temperature: temperature, TopP: topP, TopK: topK, MinP: minP,
				RepetitionPenalty: repPen, PresencePenalty: presPen, FrequencyPenalty: freqPen}}
			if cmd.Flags().Changed("seed") {
				u := uint64(seed)
				p.Sampling.Seed = &u
			}
			res, err := mgr.Generate(ctx, 0, s.ID, p, nil)
			if err != nil {
				return err
			}
			out := struct {
				IDs          []int32 `json:"ids"`
				Text         string  `json:"text"`
				FinishReason string  `json:"finish_reason"`
			}{res.IDs, res.Text, res.FinishReason}
			if out.IDs == nil {
				out.IDs = []int32{}
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "checkpoint directory or .gguf file")
	f.StringVar(&backend, "backend", "cpu", "backend")
	f.StringVar(&ids, "ids", "", "comma-separated prompt token ids")
	f.StringVar(&prompt, "prompt", "", "prompt text (needs the model's tokenizer)")
	f.IntVar(&maxNew, "max-new-tokens", 16, "tokens to generate")
	f.Float64Var(&temperature, "temperature", 0, "sampling temperature (0: greedy)")
	f.Float64Var(&topP, "top-p", 0, "nucleus sampling mass (0: off)")
	f.IntVar(&topK, "top-k", 0, "sample from the k most likely tokens (0: off)")
	f.Float64Var(&minP, "min-p", 0, "drop tokens below min-p × the top probability (0: off)")
	f.Float64Var(&repPen, "repetition-penalty", 0, "repetition penalty (1 or 0: off)")
	f.Float64Var(&presPen, "presence-penalty", 0, "presence penalty")
	f.Float64Var(&freqPen, "frequency-penalty", 0, "frequency penalty")
	f.Int64Var(&seed, "seed", 0, "random seed for reproducible sampling")
	f.StringArrayVar(&stop, "stop", nil, "stop string (repeatable)")
	return cmd
}

// loadTokenizer loads the model's tokenizer, or returns nil when it has
// none (token-id input still works).
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	tok, err := checkpoint.LoadTokenizer(path)
	if errors.Is(err, checkpoint.ErrNoTokenizer) {
		return nil, nil
	}
	return tok, err
}
