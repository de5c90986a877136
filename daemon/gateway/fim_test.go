package gateway

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// TestFIMPrompt: the fill-in-the-middle prompt with the real Qwen3 and
// DeepSeek-V3 vocabularies encodes as their FIM tokens around the
// prefix's and the suffix's own tokens; the demo's and Llama's have none.
func TestFIMPrompt(t *testing.T) {
	const prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
	for _, c := range []struct {
		dir, format   string
		pre, suf, mid int32
	}{
		{"qwen3", "qwen", 151659, 151661, 151660},
		{"deepseek_v3", "deepseek", 128801, 128800, 128802},
	} {
		tok, err := tokenizer.Load(filepath.Join("..", "..", "models", "tokenizer", "testdata", c.dir))
		if err != nil {
			t.Fatal(err)
		}
		f, ok := fimFor(tok)
		if !ok || f.name != c.format {
			t.Fatalf("%s: format %q (%v), want %s", c.dir, f.name, ok, c.format)
		}
		got := tok.Encode(f.prompt(prefix, suffix))
		want := slices.Concat([]int32{c.pre}, tok.Encode(prefix), []int32{c.suf}, tok.Encode(suffix), []int32{c.mid})
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", c.dir, got, want)
		}
	}
	for _, dir := range []string{"llama3_1"} {
		tok, err := tokenizer.Load(filepath.Join("..", "..", "models", "tokenizer", "testdata", dir))
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := fimFor(tok); ok {
			t.Errorf("%s: FIM format %s", dir, f.name)
		}
	}
	tok, err := tokenizer.New(demo.TokenizerJSON(), demo.TokenizerConfigJSON())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fimFor(tok); ok {
		t.Error("the demo vocabulary has FIM tokens")
	}
	if got := (fimFormat{pre: "<PRE>", suf: "<SUF>", mid: "<MID>", spaced: true}).prompt("a", "b"); got != "<PRE> a <SUF>b <MID>" {
		t.Errorf("CodeLlama prompt %q", got)
	}
}
