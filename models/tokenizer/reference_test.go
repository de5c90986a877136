package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// fixtureNames are the tokenizers under testdata/ (see testdata/README.md).
var fixtureNames = []string{"qwen3", "deepseek_v3", "llama3_1"}

type chatCase struct {
	Messages            []map[string]any `json:"messages"`
	AddGenerationPrompt bool             `json:"add_generation_prompt"`
	Kwargs              map[string]any   `json:"kwargs"`
}

type reference struct {
	Cases struct {
		Texts []string   `json:"texts"`
		Chats []chatCase `json:"chats"`
	} `json:"cases"`
	Results map[string]struct {
		Encode [][]int32 `json:"encode"`
		Decode []string  `json:"decode"`
		Chat   []struct {
			Text  string  `json:"text"`
			IDs   []int32 `json:"ids"`
			Error string  `json:"error"`
		} `json:"chat"`
	} `json:"results"`
}

var (
	refOnce sync.Once
	ref     reference
	refErr  error
	tokMu   sync.Mutex
	toks    = map[string]*Tokenizer{}
)

func loadReference(t testing.TB) *reference {
	t.Helper()
	refOnce.Do(func() {
		f, err := os.Open(filepath.Join("testdata", "reference.json.gz"))
		if err != nil {
			refErr = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			refErr = err
			return
		}
		refErr = json.NewDecoder(zr).Decode(&ref)
	})
	if refErr != nil {
		t.Fatal(refErr)
	}
	return &ref
}

// loadFixture loads (once per test binary) a testdata tokenizer.
func loadFixture(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tokMu.Lock()
	defer tokMu.Unlock()
	if tk, ok := toks[name]; ok {
		return tk
	}
	tk, err := Load(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	toks[name] = tk
	return tk
}

func TestReferenceEncodeDecode(t *testing.T) {
	r := loadReference(t)
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			tk := loadFixture(t, name)
			res, ok := r.Results[name]
			if !ok {
				t.Fatalf("no reference results for %s", name)
			}
			for i, text := range r.Cases.Texts {
				got := tk.Encode(text)
				if want := res.Encode[i]; !slices.Equal(got, want) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", text, got, want)
					continue
				}
				if got, want := tk.Decode(res.Encode[i]), res.Decode[i]; got != want {
					t.Errorf("Decode(Encode(%q)) = %q, want %q", text, got, want)
				}
			}
		})
	}
}

func TestReferenceChat(t *testing.T) {
	r := loadReference(t)
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			tk := loadFixture(t, name)
			if !tk.HasChatTemplate() {
				t.Fatal("no chat template")
			}
			for i, c := range r.Cases.Chats {
				want := r.Results[name].Chat[i]
				got, err := tk.ApplyChatTemplate(c.Messages, c.AddGenerationPrompt, c.Kwargs)
				if want.Error != "" {
					if err == nil {
						t.Errorf("chat %d: want error like %s, got %q", i, want.Error, got)
					}
					continue
				}
				if err != nil {
					t.Errorf("chat %d: %v", i, err)
					continue
				}
				if got != want.Text {
					t.Errorf("chat %d:\n got %q\nwant %q", i, got, want.Text)
					continue
				}
				if ids := tk.Encode(got); !slices.Equal(ids, want.IDs) {
					t.Errorf("chat %d ids:\n got %v\nwant %v", i, ids, want.IDs)
				}
				if back := tk.Decode(want.IDs); back != want.Text {
					t.Errorf("chat %d: Decode(ids) = %q", i, back)
				}
			}
		})
	}
}
