package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The tokenizer fixtures live with the tokenizer package (see its
// testdata/README.md).
const tokenizeTestdata = "../../models/tokenizer/testdata"

type tokenizeReference struct {
	Cases struct {
		Texts []string          `json:"texts"`
		Chats []json.RawMessage `json:"chats"`
	} `json:"cases"`
	Results map[string]struct {
		Encode [][]int32 `json:"encode"`
		Chat   []struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		} `json:"chat"`
	} `json:"results"`
}

func runTokenize(t *testing.T, stdin string, args ...string) (tokenizeResult, error) {
	t.Helper()
	cmd := newTokenizeCmd()
	var out bytes.Buffer
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		return tokenizeResult{}, err
	}
	var r tokenizeResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	return r, nil
}

func TestTokenizeMatchesReference(t *testing.T) {
	f, err := os.Open(filepath.Join(tokenizeTestdata, "reference.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var ref tokenizeReference
	if err := json.NewDecoder(zr).Decode(&ref); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"qwen3", "deepseek_v3", "llama3_1"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(tokenizeTestdata, name)
			res := ref.Results[name]
			// Plain text: a few cases (each run loads the tokenizer).
			for _, i := range []int{14, 40} {
				r, err := runTokenize(t, ref.Cases.Texts[i], "--model", dir)
				if err != nil {
					t.Fatal(err)
				}
				if r.Text != ref.Cases.Texts[i] || !slices.Equal(r.IDs, res.Encode[i]) {
					t.Errorf("text %d: got %q %v, want ids %v", i, r.Text, r.IDs, res.Encode[i])
				}
			}
			for i, chat := range ref.Cases.Chats {
				r, err := runTokenize(t, string(chat), "--model", dir, "--chat")
				if err != nil {
					t.Fatal(err)
				}
				if want := res.Chat[i]; r.Text != want.Text || !slices.Equal(r.IDs, want.IDs) {
					t.Errorf("chat %d:\n got %q %v\nwant %q %v", i, r.Text, r.IDs, want.Text, want.IDs)
				}
			}
		})
	}
}

func TestTokenizeErrors(t *testing.T) {
	dir := filepath.Join(tokenizeTestdata, "qwen3")
	gguf := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(gguf, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"no model", "x", nil, "--model is required"},
		{"missing dir", "x", []string{"--model", filepath.Join(t.TempDir(), "nope")}, "no such file"},
		{"gguf", "x", []string{"--model", gguf}, "GGUF"},
		{"bad chat", "not json", []string{"--model", dir, "--chat"}, "--chat"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runTokenize(t, c.stdin, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}
