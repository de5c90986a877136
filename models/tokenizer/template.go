package tokenizer

import (
	"encoding/json"
	"fmt"
)

// The post-processor's template of a single sequence (tokenizer.json
// "post_processor": a TemplateProcessing, alone or inside a Sequence):
// the special tokens HF's encode(text, add_special_tokens=True) puts
// around a text, e.g. Llama 3's <|begin_of_text|> before it, or the
// <|endoftext|> Qwen3-Embedding's tokenizer puts after it (and whose
// hidden state that model pools). Encode leaves them out, as chat
// templates write their own.

// templatePiece is the text (ids nil) or a special token's ids.
type templatePiece struct {
	ids []int32
}

// parseTemplate reads a post_processor's single-sequence template; nil
// when it has none (ByteLevel alone, or no post_processor).
func parseTemplate(raw json.RawMessage) ([]templatePiece, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "Sequence":
		for _, sub := range p.Processors {
			if t, err := parseTemplate(sub); err != nil || t != nil {
				return t, err
			}
		}
		return nil, nil
	case "TemplateProcessing":
	default:
		return nil, nil
	}
	var out []templatePiece
	texts := 0
	for _, it := range p.Single {
		switch {
		case it.Sequence != nil:
			out = append(out, templatePiece{})
			texts++
		case it.SpecialToken != nil:
			st, ok := p.SpecialTokens[it.SpecialToken.ID]
			if !ok || len(st.IDs) == 0 {
				return nil, fmt.Errorf("template token %q has no ids", it.SpecialToken.ID)
			}
			out = append(out, templatePiece{ids: st.IDs})
		}
	}
	if texts != 1 {
		return nil, fmt.Errorf("a single-sequence template with %d sequences", texts)
	}
	return out, nil
}

// EncodeSpecial is Encode with the post-processor's special tokens
// around the text (HF add_special_tokens=True): what embedding models
// were trained on. Without a template it is Encode.
func (t *Tokenizer) EncodeSpecial(text string) []int32 {
	if t.template == nil {
		return t.Encode(text)
	}
	var ids []int32
	for _, p := range t.template {
		if p.ids == nil {
			ids = append(ids, t.Encode(text)...)
		} else {
			ids = append(ids, p.ids...)
		}
	}
	return ids
}

// StartIDs are the special tokens the post-processor puts before a text
// (Llama 3's <|begin_of_text|>, a GGUF's BOS when add_bos_token is set):
// what a sequence starts with. Nil when it puts none (Qwen3).
func (t *Tokenizer) StartIDs() []int32 {
	var ids []int32
	for _, p := range t.template {
		if p.ids == nil {
			break
		}
		ids = append(ids, p.ids...)
	}
	return ids
}

// EncodeStart encodes text that starts a sequence: StartIDs, then the
// text, without the special tokens a template puts after it (an
// embedding model's end token), as the sequence goes on after it.
func (t *Tokenizer) EncodeStart(text string) []int32 {
	return append(t.StartIDs(), t.Encode(text)...)
}
