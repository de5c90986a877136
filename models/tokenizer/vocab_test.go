package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// vocabFromFixture turns a testdata tokenizer.json into the GGUF form, as
// llama.cpp's converter does: tokens by id, added special tokens as
// control, other added tokens as user-defined, merges as "a b".
func vocabFromFixture(t *testing.T, name, pre string) Vocab {
	t.Helper()
	raw, err := readMaybeGz(filepath.Join("testdata", name, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f hfFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, id := range f.Model.Vocab {
		size = max(size, int(id)+1)
	}
	for _, a := range f.AddedTokens {
		size = max(size, int(a.ID)+1)
	}
	v := Vocab{Model: "gpt2", Pre: pre, Tokens: make([]string, size), Types: make([]int32, size), BOS: -1, EOS: -1}
	for tok, id := range f.Model.Vocab {
		v.Tokens[id], v.Types[id] = tok, TokenNormal
	}
	for _, a := range f.AddedTokens {
		v.Tokens[a.ID], v.Types[a.ID] = a.Content, TokenUserDefined
		if a.Special {
			v.Types[a.ID] = TokenControl
		}
	}
	for _, m := range merges {
		v.Merges = append(v.Merges, m[0]+" "+m[1])
	}
	cfg, err := os.ReadFile(filepath.Join("testdata", name, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	v.ChatTemplate = c.ChatTemplate
	return v
}

func TestFromVocabMatchesReference(t *testing.T) {
	r := loadReference(t)
	for _, c := range []struct{ name, pre string }{
		{"qwen3", "qwen2"}, {"llama3_1", "llama-bpe"}, {"deepseek_v3", "deepseek-v3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := vocabFromFixture(t, c.name, c.pre)
			hf := loadFixture(t, c.name)
			if b, ok := hf.BOS(); ok {
				v.BOS = b
			}
			v.EOS = hf.EOS()[0]
			tk, err := FromVocab(v)
			if err != nil {
				t.Fatal(err)
			}
			if _, slow := tk.preSteps[0].(*splitStep).pat.(*regexPattern); slow {
				t.Error("FromVocab did not pick the hand scanner")
			}
			for i, text := range r.Cases.Texts {
				if got, want := tk.Encode(text), r.Results[c.name].Encode[i]; !slices.Equal(got, want) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", text, got, want)
				}
				if got, want := tk.Decode(r.Results[c.name].Encode[i]), r.Results[c.name].Decode[i]; got != want {
					t.Errorf("Decode = %q, want %q", got, want)
				}
			}
			for i, ch := range r.Cases.Chats {
				got, err := tk.ApplyChatTemplate(ch.Messages, ch.AddGenerationPrompt, ch.Kwargs)
				if err != nil {
					t.Fatal(err)
				}
				if want := r.Results[c.name].Chat[i].Text; got != want {
					t.Errorf("chat %d:\n got %q\nwant %q", i, got, want)
				}
			}
			if !slices.Equal(tk.EOS(), hf.EOS()) {
				t.Errorf("EOS %v, tokenizer.json gives %v", tk.EOS(), hf.EOS())
			}
			// add_bos_token gives what tokenizer.json's template gives
			// (Llama 3.1's <|begin_of_text|>); without it nothing is added.
			const text = "Hello, world"
			if got := tk.EncodeStart(text); !slices.Equal(got, tk.Encode(text)) {
				t.Errorf("without add_bos_token: EncodeStart %v", got)
			}
			v.AddBOS = v.BOS >= 0
			bos, err := FromVocab(v)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := bos.EncodeStart(text), hf.EncodeStart(text); !slices.Equal(got, want) {
				t.Errorf("with add_bos_token %v: EncodeStart %v, tokenizer.json gives %v", v.AddBOS, got, want)
			}
			v.AddEOS = true
			both, err := FromVocab(v)
			if err != nil {
				t.Fatal(err)
			}
			want := append(bos.EncodeStart(text), v.EOS)
			if got := both.EncodeSpecial(text); !slices.Equal(got, want) {
				t.Errorf("with add_eos_token: EncodeSpecial %v, want %v", got, want)
			}
			if got := both.EncodeStart(text); !slices.Equal(got, bos.EncodeStart(text)) {
				t.Errorf("EncodeStart %v put the end token on", got)
			}
		})
	}
}

func TestFromVocabErrors(t *testing.T) {
	if _, err := FromVocab(Vocab{Model: "llama", BOS: -1, EOS: -1}); err == nil {
		t.Error("SentencePiece vocab accepted")
	}
	if _, err := FromVocab(Vocab{Model: "gpt2", Pre: "no-such-pre", BOS: -1, EOS: -1}); err == nil {
		t.Error("unknown pre-tokenizer accepted")
	}
	if _, err := FromVocab(Vocab{Model: "gpt2", Tokens: []string{"a"}, Merges: []string{"a b"}, BOS: -1, EOS: -1}); err == nil {
		t.Error("merge of unknown tokens accepted")
	}
}
