package tokenizer

import (
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// GGUF token types (tokenizer.ggml.token_type).
const (
	TokenNormal      = 1
	TokenUnknown     = 2
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
	TokenByte        = 6
)

// Vocab is a tokenizer as GGUF metadata describes it (tokenizer.ggml.*).
type Vocab struct {
	Model    string   // tokenizer.ggml.model; only "gpt2" (byte-level BPE) is supported
	Tokens   []string // by id
	Types    []int32  // GGUF token types by id (optional: all normal)
	Merges   []string // "a b", lowest rank first
	Pre      string   // tokenizer.ggml.pre, e.g. "qwen2", "llama-bpe", "deepseek-v3"
	BOS, EOS int32    // -1 if none
	// AddBOS/AddEOS are tokenizer.ggml.add_bos_token/add_eos_token: the
	// special tokens put around a text that is encoded on its own
	// (EncodeSpecial, EncodeStart), as a post_processor's template.
	AddBOS, AddEOS bool
	ChatTemplate   string
}

// preByName maps llama.cpp's pre-tokenizer names to the Hugging Face
// pipeline of the same models: Split regexes, NFC for Qwen, ignore_merges
// for Llama 3.
func preByName(name string) (exprs []string, normalize normalizer, ignoreMerges bool, err error) {
	switch name {
	case "qwen2", "deepseek-r1-qwen":
		return []string{patQwen2}, norm.NFC.String, false, nil
	case "llama3", "llama-bpe", "llama-v3", "smaug-bpe", "dbrx":
		return []string{patLlama3}, nil, true, nil
	case "deepseek-v3":
		return []string{patDSDigits, patDSCJK, patDSMain}, nil, false, nil
	case "gpt2", "gpt-2", "default", "":
		return []string{gpt2Pattern}, nil, false, nil
	}
	return nil, nil, false, fmt.Errorf("pre-tokenizer %q: %w", name, ErrUnsupported)
}

// FromVocab builds a tokenizer from GGUF vocabulary metadata. Control
// tokens become special added tokens and user-defined tokens non-special
// added tokens; both are recognized in text as in Hugging Face.
func FromVocab(v Vocab) (*Tokenizer, error) {
	if v.Model != "gpt2" {
		return nil, fmt.Errorf("vocab model %q (only byte-level BPE, \"gpt2\"): %w", v.Model, ErrUnsupported)
	}
	if len(v.Types) != 0 && len(v.Types) != len(v.Tokens) {
		return nil, fmt.Errorf("vocab: %d token types for %d tokens", len(v.Types), len(v.Tokens))
	}
	if len(v.Tokens) >= maxVocab {
		return nil, fmt.Errorf("vocab: %d tokens is too many", len(v.Tokens))
	}
	exprs, normalize, ignoreMerges, err := preByName(v.Pre)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{bos: -1, normalize: normalize}
	for _, e := range exprs {
		pat, err := compileRegex(e)
		if err != nil {
			return nil, err
		}
		st, err := newSplitStep(pat, "Isolated", false)
		if err != nil {
			return nil, err
		}
		t.preSteps = append(t.preSteps, st)
	}
	vocab := make(map[string]int32, len(v.Tokens))
	var added []*addedToken
	var unused []int32
	for i, tok := range v.Tokens {
		typ := int32(TokenNormal)
		if len(v.Types) > 0 {
			typ = v.Types[i]
		}
		switch typ {
		case TokenControl, TokenUserDefined:
			added = append(added, &addedToken{id: int32(i), content: tok, special: typ == TokenControl})
		case TokenUnknown, TokenUnused:
			unused = append(unused, int32(i))
		default:
			if _, dup := vocab[tok]; !dup {
				vocab[tok] = int32(i)
			}
		}
	}
	merges := make([][2]string, len(v.Merges))
	for i, m := range v.Merges {
		a, b, ok := strings.Cut(m, " ")
		if !ok {
			return nil, fmt.Errorf("vocab: merge %d %q is not two space-separated tokens", i, m)
		}
		merges[i] = [2]string{a, b}
	}
	if err := t.init(vocab, merges, -1, ignoreMerges, added); err != nil {
		return nil, fmt.Errorf("vocab: %w", err)
	}
	if len(t.tokens) < len(v.Tokens) {
		t.tokens = append(t.tokens, make([]string, len(v.Tokens)-len(t.tokens))...)
		t.decoded = append(t.decoded, make([][]byte, len(v.Tokens)-len(t.decoded))...)
	}
	for _, id := range unused { // spelled and decodable, never produced by Encode
		t.tokens[id] = v.Tokens[id]
		t.decoded[id] = tokenBytes(v.Tokens[id])
	}
	if v.BOS >= 0 && int(v.BOS) < len(v.Tokens) {
		t.bos = v.BOS
		t.bosToken, t.hasBOSTok = v.Tokens[v.BOS], true
	}
	if v.EOS >= 0 && int(v.EOS) < len(v.Tokens) {
		t.eosToken, t.hasEOSTok = v.Tokens[v.EOS], true
		t.addEOS(v.EOS)
	}
	if v.ChatTemplate != "" {
		t.chat = newChatTemplate(v.ChatTemplate)
	}
	if v.AddBOS || v.AddEOS {
		t.setFlagsTemplate(v.AddBOS, v.AddEOS)
	}
	t.addDefaultEOS()
	return t, nil
}
