package demo

import (
	"encoding/json"

	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// chatTemplate is Qwen's ChatML template without tools or thinking.
const chatTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}`

// byteRune is GPT-2's bytes_to_unicode, the spelling of byte tokens in a
// byte-level BPE vocabulary.
func byteRune(b int) rune {
	if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
		return rune(b)
	}
	n := 0
	for c := 0; c < b; c++ {
		if !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) {
			n++
		}
	}
	return rune(256 + n)
}

// TokenizerJSON is the demo tokenizer.json: one token per byte (id = the
// byte's value, no merges) plus Qwen3's special tokens.
func TokenizerJSON() []byte {
	vocab := make(map[string]int, 256)
	for b := range 256 {
		vocab[string(byteRune(b))] = b
	}
	added := []map[string]any{}
	for i, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		added = append(added, map[string]any{"id": EndOfText + i, "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	b, _ := json.Marshal(map[string]any{
		"version":        "1.0",
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	})
	return b
}

// TokenizerConfigJSON is the demo tokenizer_config.json.
func TokenizerConfigJSON() []byte {
	b, _ := json.Marshal(map[string]any{
		"bos_token":     nil,
		"eos_token":     "<|im_end|>",
		"pad_token":     "<|endoftext|>",
		"chat_template": chatTemplate,
	})
	return b
}

// Tokenizer returns the demo tokenizer.
func Tokenizer() (*tokenizer.Tokenizer, error) {
	return tokenizer.New(TokenizerJSON(), TokenizerConfigJSON())
}
