package gateway

import "github.com/pocketllm/pocketllm/models/tokenizer"

// Fill in the middle: /v1/completions with a suffix asks a code model for
// the text between prompt and suffix, which is how editors complete code
// at the cursor. The prompt is written in the model's own FIM format,
// recognised by the special tokens its vocabulary has (the token strings
// are written in the prompt text, which the tokenizer encodes as those
// tokens).

// fimFormat is one family's prefix-suffix-middle prompt.
type fimFormat struct {
	name          string
	pre, suf, mid string
	// spaced: CodeLlama writes a space after <PRE> and before <SUF> and <MID>.
	spaced bool
}

var fimFormats = []fimFormat{
	{name: "qwen", pre: "<|fim_prefix|>", suf: "<|fim_suffix|>", mid: "<|fim_middle|>"}, // Qwen2.5/3-Coder, and Qwen3's vocabulary
	{name: "starcoder", pre: "<fim_prefix>", suf: "<fim_suffix>", mid: "<fim_middle>"},
	{name: "deepseek", pre: "<｜fim▁begin｜>", suf: "<｜fim▁hole｜>", mid: "<｜fim▁end｜>"},
	{name: "codellama", pre: "<PRE>", suf: "<SUF>", mid: "<MID>", spaced: true},
}

// fimFor is the FIM format whose three tokens tok has (ok false: none).
func fimFor(tok *tokenizer.Tokenizer) (fimFormat, bool) {
	for _, f := range fimFormats {
		_, p := tok.TokenID(f.pre)
		_, s := tok.TokenID(f.suf)
		_, m := tok.TokenID(f.mid)
		if p && s && m {
			return f, true
		}
	}
	return fimFormat{}, false
}

// prompt is the FIM prompt of prefix and suffix.
func (f fimFormat) prompt(prefix, suffix string) string {
	if f.spaced {
		return f.pre + " " + prefix + " " + f.suf + suffix + " " + f.mid
	}
	return f.pre + prefix + f.suf + suffix + f.mid
}
