package checkpoint

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func gunzipTo(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
}

// TestGGUFVocabMatchesReference encodes every reference text with the
// Qwen3 tokenizer read from GGUF metadata (llama.cpp's form of the same
// vocabulary) and compares with Hugging Face tokenizers' ids.
func TestGGUFVocabMatchesReference(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vocab.gguf")
	gunzipTo(t, "../gguf/testdata/qwen3-vocab/vocab.gguf.gz", path)
	tok, err := LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../tokenizer/testdata/reference.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases struct {
			Texts []string `json:"texts"`
		} `json:"cases"`
		Results map[string]struct {
			Encode [][]int32 `json:"encode"`
			Decode []string  `json:"decode"`
		} `json:"results"`
	}
	if err := json.NewDecoder(zr).Decode(&ref); err != nil {
		t.Fatal(err)
	}
	want := ref.Results["qwen3"]
	if len(ref.Cases.Texts) == 0 || len(want.Encode) != len(ref.Cases.Texts) {
		t.Fatalf("reference has %d texts, %d encodings", len(ref.Cases.Texts), len(want.Encode))
	}
	for i, text := range ref.Cases.Texts {
		got := tok.Encode(text)
		if !slices.Equal(got, want.Encode[i]) {
			t.Errorf("text %d %q:\n got %v\nwant %v", i, text, got, want.Encode[i])
			continue
		}
		if dec := tok.Decode(got); dec != want.Decode[i] {
			t.Errorf("text %d: decode %q, want %q", i, dec, want.Decode[i])
		}
	}
}

func TestNoTokenizer(t *testing.T) {
	if _, err := LoadTokenizer("../testdata/models/qwen3"); err == nil {
		t.Fatal("fixture without tokenizer.json gave a tokenizer")
	}
}
