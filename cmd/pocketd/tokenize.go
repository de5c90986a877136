package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// tokenizeChat is the --chat input, the shape of fixtures/tokenizers/cases.json.
type tokenizeChat struct {
	Messages            []map[string]any `json:"messages"`
	AddGenerationPrompt *bool            `json:"add_generation_prompt"` // default true
	Kwargs              map[string]any   `json:"kwargs"`
}

// tokenizeResult is what `pocketd tokenize` prints.
type tokenizeResult struct {
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

func newTokenizeCmd() *cobra.Command {
	var modelPath string
	var chat bool
	cmd := &cobra.Command{
		Use:   "tokenize --model DIR [--chat]",
		Short: "Encode stdin (text, or with --chat a chat as JSON) and print the text and its token ids",
		Long: `Reads text on stdin, exactly as given (no special tokens added), or with
--chat a JSON object {"messages": [...], "add_generation_prompt": bool, "kwargs": {...}}
that is rendered with the model's chat template. Prints {"text": ..., "ids": [...]}.
DIR needs only tokenizer.json and tokenizer_config.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tk, err := openTokenizerDir(modelPath)
			if err != nil {
				return err
			}
			in, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("read stdin: %w", err)
			}
			text := string(in)
			if chat {
				var c tokenizeChat
				dec := json.NewDecoder(strings.NewReader(text))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&c); err != nil {
					return fmt.Errorf("--chat: stdin is not {\"messages\", \"add_generation_prompt\", \"kwargs\"}: %w", err)
				}
				addGen := c.AddGenerationPrompt == nil || *c.AddGenerationPrompt
				if text, err = tk.ApplyChatTemplate(c.Messages, addGen, c.Kwargs); err != nil {
					return err
				}
			}
			ids := tk.Encode(text)
			if ids == nil {
				ids = []int32{}
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false) // print <|im_start|> as it is
			return enc.Encode(tokenizeResult{Text: text, IDs: ids})
		},
	}
	cmd.Flags().StringVar(&modelPath, "model", "", "model directory with tokenizer.json and tokenizer_config.json")
	cmd.Flags().BoolVar(&chat, "chat", false, "read a chat as JSON and render it with the chat template")
	return cmd
}

// openTokenizerDir opens the tokenizer of a model path: tokenizer.json in
// a directory, or the vocabulary of a GGUF file.
func openTokenizerDir(path string) (*tokenizer.Tokenizer, error) {
	if path == "" {
		return nil, errors.New("--model is required")
	}
	return checkpoint.LoadTokenizer(path)
}
