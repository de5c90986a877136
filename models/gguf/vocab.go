package gguf

import "fmt"

// TokenizerVocab is the tokenizer as a GGUF file stores it
// (tokenizer.ggml.* and tokenizer.chat_template), uninterpreted: the
// tokenizer package builds a tokenizer from it.
type TokenizerVocab struct {
	Model  string // tokenizer.ggml.model, e.g. "gpt2" (byte-level BPE) or "llama"
	Pre    string // tokenizer.ggml.pre, the pre-tokenizer name, e.g. "qwen2"
	Tokens []string
	// Types are llama.cpp token types: 1 normal, 2 unknown, 3 control,
	// 4 user-defined, 5 unused, 6 byte. Nil when the file has none.
	Types  []int32
	Scores []float32 // nil when absent
	Merges []string  // "a b" pairs, nil when absent
	// Special token ids; -1 when the file does not set them.
	BOS, EOS, PAD, UNK int32
	// AddBOS/AddEOS are tokenizer.ggml.add_bos_token/add_eos_token (false
	// when absent).
	AddBOS, AddEOS bool
	ChatTemplate   string
}

// Vocab returns the tokenizer data, checking that the arrays agree in
// length and that the special ids are inside the vocabulary.
func (f *File) Vocab() (TokenizerVocab, error) {
	m := f.Metadata
	v := TokenizerVocab{BOS: -1, EOS: -1, PAD: -1, UNK: -1}
	var ok bool
	if v.Tokens, ok = m.Strings("tokenizer.ggml.tokens"); !ok {
		return v, fmt.Errorf("%w: no tokenizer.ggml.tokens string array", ErrFormat)
	}
	v.Model, _ = m.String("tokenizer.ggml.model")
	v.Pre, _ = m.String("tokenizer.ggml.pre")
	v.ChatTemplate, _ = m.String("tokenizer.chat_template")
	v.Merges, _ = m.Strings("tokenizer.ggml.merges")
	v.AddBOS, _ = m.Bool("tokenizer.ggml.add_bos_token")
	v.AddEOS, _ = m.Bool("tokenizer.ggml.add_eos_token")
	if _, present := m.Value("tokenizer.ggml.token_type"); present {
		if v.Types, ok = m.Int32s("tokenizer.ggml.token_type"); !ok || len(v.Types) != len(v.Tokens) {
			return v, fmt.Errorf("%w: tokenizer.ggml.token_type does not match the %d tokens", ErrFormat, len(v.Tokens))
		}
	}
	if _, present := m.Value("tokenizer.ggml.scores"); present {
		if v.Scores, ok = m.Float32s("tokenizer.ggml.scores"); !ok || len(v.Scores) != len(v.Tokens) {
			return v, fmt.Errorf("%w: tokenizer.ggml.scores does not match the %d tokens", ErrFormat, len(v.Tokens))
		}
	}
	for key, dst := range map[string]*int32{"bos": &v.BOS, "eos": &v.EOS, "padding": &v.PAD, "unknown": &v.UNK} {
		full := "tokenizer.ggml." + key + "_token_id"
		if _, present := m.Value(full); !present {
			continue
		}
		id, ok := m.Uint(full)
		if !ok || id >= uint64(len(v.Tokens)) {
			return v, fmt.Errorf("%w: %s outside the %d-token vocabulary", ErrFormat, full, len(v.Tokens))
		}
		*dst = int32(id)
	}
	return v, nil
}
