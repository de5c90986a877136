package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestEncodeSpecial: the post-processor's template around a text — Llama
// 3.1's <|begin_of_text|> before it, none for Qwen3's tokenizer, and the
// <|endoftext|> after it that Qwen3-Embedding's tokenizer adds (its
// post_processor put on the Qwen3 vocabulary); malformed templates are
// errors.
func TestEncodeSpecial(t *testing.T) {
	const text = "Hello, embeddings!"
	llama, err := Load(filepath.Join("testdata", "llama3_1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := llama.EncodeSpecial(text), append([]int32{128000}, llama.Encode(text)...); !slices.Equal(got, want) {
		t.Errorf("llama3_1: %v, want %v", got, want)
	}
	if got, want := llama.EncodeStart(text), llama.EncodeSpecial(text); !slices.Equal(got, want) {
		t.Errorf("llama3_1: EncodeStart %v, want %v", got, want)
	}
	// DeepSeek-V3's tokenizer.json adds nothing, but its
	// LlamaTokenizerFast class adds the BOS its config asks for.
	ds, err := Load(filepath.Join("testdata", "deepseek_v3"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds.EncodeSpecial(text), append([]int32{0}, ds.Encode(text)...); !slices.Equal(got, want) {
		t.Errorf("deepseek_v3: %v, want %v", got, want)
	}
	qwen, err := Load(filepath.Join("testdata", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := qwen.EncodeSpecial(text), qwen.Encode(text); !slices.Equal(got, want) {
		t.Errorf("qwen3: %v, want Encode's %v", got, want)
	}
	withPost := func(post string) ([]byte, error) {
		zr, err := os.Open(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		gz, err := gzip.NewReader(zr)
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(gz)
		if err != nil {
			return nil, err
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, err
		}
		f["post_processor"] = json.RawMessage(post)
		var b bytes.Buffer
		err = json.NewEncoder(&b).Encode(f)
		return b.Bytes(), err
	}
	tj, err := withPost(`{"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|endoftext|>","type_id":0}}],
		"pair":[],"special_tokens":{"<|endoftext|>":{"id":"<|endoftext|>","ids":[151643],"tokens":["<|endoftext|>"]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	emb, err := New(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := emb.EncodeSpecial(text), append(qwen.Encode(text), 151643); !slices.Equal(got, want) {
		t.Errorf("Qwen3-Embedding's template: %v, want %v", got, want)
	}
	if got, want := emb.EncodeStart(text), qwen.Encode(text); !slices.Equal(got, want) {
		t.Errorf("Qwen3-Embedding's template: EncodeStart %v, want the text alone %v", got, want)
	}
	for _, bad := range []string{
		`{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"X"}},{"Sequence":{"id":"A"}}],"special_tokens":{}}`,
		`{"type":"TemplateProcessing","single":[{"Sequence":{"id":"A"}},{"Sequence":{"id":"B"}}],"special_tokens":{}}`,
		`{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"X"}},{"Sequence":{"id":"A"}}],"special_tokens":{"X":{"ids":[999999999]}}}`,
	} {
		tj, err := withPost(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(tj, nil); err == nil {
			t.Errorf("accepted post_processor %s", bad)
		}
	}
}
