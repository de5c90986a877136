package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pocketllm/pocketllm/models/gguf"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// ErrNoTokenizer means the checkpoint carries no tokenizer; token-id input
// still works.
var ErrNoTokenizer = errors.New("no tokenizer")

// LoadTokenizer finds the tokenizer of a model path the way Open finds its
// weights: tokenizer.json(.gz) + tokenizer_config.json in a directory (or
// beside a file), else the vocabulary in a GGUF file's metadata. It
// returns an error wrapping ErrNoTokenizer when there is none.
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	dir, ggufPath := path, ""
	if !st.IsDir() {
		dir = filepath.Dir(path)
		if strings.HasSuffix(path, ".gguf") {
			ggufPath = path
		}
	}
	for _, n := range []string{"tokenizer.json", "tokenizer.json.gz"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return tokenizer.Load(dir)
		}
	}
	if ggufPath == "" && st.IsDir() {
		if ggufs, _ := filepath.Glob(filepath.Join(dir, "*.gguf")); len(ggufs) > 0 {
			ggufPath = ggufs[0]
		}
	}
	if ggufPath == "" {
		return nil, fmt.Errorf("%s: %w (no tokenizer.json or GGUF vocabulary)", path, ErrNoTokenizer)
	}
	f, err := gguf.Open(ggufPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return TokenizerFromGGUF(f)
}

// TokenizerFromGGUF builds the tokenizer stored in a GGUF file's metadata.
func TokenizerFromGGUF(f *gguf.File) (*tokenizer.Tokenizer, error) {
	v, err := f.Vocab()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTokenizer, err)
	}
	return tokenizer.FromVocab(tokenizer.Vocab{
		Model: v.Model, Tokens: v.Tokens, Types: v.Types, Merges: v.Merges, Pre: v.Pre,
		BOS: v.BOS, EOS: v.EOS, AddBOS: v.AddBOS, AddEOS: v.AddEOS, ChatTemplate: v.ChatTemplate,
	})
}
