package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// hfFile is the part of a Hugging Face tokenizer.json that byte-level BPE uses.
type hfFile struct {
	AddedTokens  []hfAddedToken  `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	PostProc     json.RawMessage `json:"post_processor"`
	Model        hfModel         `json:"model"`
}

type hfAddedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Dropout                 *float64         `json:"dropout"`
}

// component is any normalizer, pre-tokenizer or decoder object: its type
// tag plus the fields the supported ones use.
type component struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	// Split, Replace
	Pattern  *hfPattern `json:"pattern"`
	Behavior string     `json:"behavior"`
	Invert   bool       `json:"invert"`
	Content  string     `json:"content"`
	// ByteLevel
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Prepend
	Prepend string `json:"prepend"`
	// Strip
	Left  bool `json:"left"`
	Right bool `json:"right"`
	// Digits
	IndividualDigits bool `json:"individual_digits"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func parseComponent(raw json.RawMessage) (*component, error) {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// parseMerges accepts both merge formats of tokenizer.json: "a b" strings
// (tokenizers < 0.20) and ["a", "b"] pairs (newer files).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("merges: %w", err)
	}
	out := make([][2]string, 0, len(items))
	for i, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, fmt.Errorf("merge %d: %q is not two space-separated tokens", i, s)
			}
			out = append(out, [2]string{a, b})
			continue
		}
		var pair []string
		if err := json.Unmarshal(it, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("merge %d: want \"a b\" or [\"a\", \"b\"]", i)
		}
		out = append(out, [2]string{pair[0], pair[1]})
	}
	return out, nil
}
