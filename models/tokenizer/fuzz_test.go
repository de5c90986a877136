package tokenizer

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// tinyTokenizerJSON builds a small but complete byte-level BPE
// tokenizer.json: all 256 byte tokens, a few merges in the given format,
// added tokens, a normalizer and a Split + ByteLevel pre-tokenizer.
func tinyTokenizerJSON(arrayMerges bool) string {
	var vocab strings.Builder
	vocab.WriteString("{")
	for b := 0; b < 256; b++ {
		if b > 0 {
			vocab.WriteString(",")
		}
		vocab.WriteString(quoteJSON(string(byteToRune[b])) + ":" + itoa(b))
	}
	extra := []string{"he", "ll", "llo", "hello", "Ġw", "Ġwo", "Ġwor", "Ġworld", "or", "ld"}
	for i, e := range extra {
		vocab.WriteString("," + quoteJSON(e) + ":" + itoa(256+i))
	}
	vocab.WriteString("}")
	pairs := [][2]string{{"h", "e"}, {"l", "l"}, {"ll", "o"}, {"he", "llo"}, {"Ġ", "w"}, {"Ġw", "o"}, {"Ġwo", "r"}, {"l", "d"}, {"Ġwor", "ld"}, {"o", "r"}}
	var merges []string
	for _, p := range pairs {
		if arrayMerges {
			merges = append(merges, "["+quoteJSON(p[0])+","+quoteJSON(p[1])+"]")
		} else {
			merges = append(merges, quoteJSON(p[0]+" "+p[1]))
		}
	}
	return `{"version":"1.0","added_tokens":[` +
		`{"id":266,"content":"<|end|>","special":true,"normalized":false,"lstrip":false,"rstrip":false,"single_word":false},` +
		`{"id":267,"content":"<tool>","special":false,"normalized":true,"lstrip":true,"rstrip":true,"single_word":false}],` +
		`"normalizer":{"type":"NFC"},` +
		`"pre_tokenizer":{"type":"Sequence","pretokenizers":[` +
		`{"type":"Split","pattern":{"Regex":` + quoteJSON(patLlama3) + `},"behavior":"Isolated","invert":false},` +
		`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},` +
		`"decoder":{"type":"ByteLevel"},` +
		`"model":{"type":"BPE","ignore_merges":false,"vocab":` + vocab.String() + `,"merges":[` + strings.Join(merges, ",") + `]}}`
}

func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestTinyTokenizer(t *testing.T) {
	for _, arr := range []bool{false, true} {
		tk, err := New([]byte(tinyTokenizerJSON(arr)), []byte(`{"eos_token":"<|end|>","chat_template":"{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}`))
		if err != nil {
			t.Fatal(err)
		}
		hello, _ := tk.TokenID("hello")
		world, _ := tk.TokenID("Ġworld")
		want := []int32{hello, world, 266, 267}
		// "<tool>" strips the spaces around it (lstrip/rstrip).
		if got := tk.Encode("hello world<|end|>  <tool>  "); !slices.Equal(got, want) {
			t.Errorf("array merges %v: Encode = %v, want %v", arr, got, want)
		}
		if s, err := tk.ApplyChatTemplate([]Message{{Role: "user", Content: "a"}}, false, nil); err != nil || s != "a<|end|>" {
			t.Errorf("chat = %q, %v", s, err)
		}
	}
}

// FuzzNew feeds New arbitrary tokenizer.json and tokenizer_config.json
// bytes: it must return an error or a tokenizer that encodes and decodes
// without panicking.
func FuzzNew(f *testing.F) {
	f.Add([]byte(tinyTokenizerJSON(false)), []byte(`{"eos_token":"<|end|>"}`))
	f.Add([]byte(tinyTokenizerJSON(true)), []byte(`{"bos_token":{"content":"<|end|>"},"chat_template":[{"name":"default","template":"x"}]}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a a"]},"pre_tokenizer":{"type":"ByteLevel"}}`), []byte(nil))
	f.Add([]byte(`{"model":{"type":"WordPiece"}}`), []byte(`{}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"post_processor":{"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"b"}},{"Sequence":{"id":"A"}}],"special_tokens":{"b":{"ids":[1]}}}]}}`), []byte(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":99999999}},"pre_tokenizer":{"type":"ByteLevel"}}`), []byte(`null`))
	f.Add([]byte(tinyTokenizerJSON(false)), []byte(`{"bos_token":"<|end|>","eos_token":"<|end|>","tokenizer_class":"LlamaTokenizerFast","add_bos_token":true,"add_eos_token":true}`))
	f.Add([]byte(`{"normalizer":{"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"String":" "},"content":"_"},{"type":"Lowercase"}]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"Split","pattern":{"String":"x"},"behavior":"MergedWithNext","invert":true},{"type":"ByteLevel","add_prefix_space":true}]},"model":{"type":"BPE","vocab":{"Ġ":0,"a":1},"merges":[]}}`), []byte(`{"eos_token":null}`))
	f.Fuzz(func(t *testing.T, tj, cfg []byte) {
		tk, err := New(tj, cfg)
		if err != nil {
			return
		}
		for _, s := range []string{"", "hello world<|end|> 12345", "\xff\xfe", "日本語 <tool> x"} {
			tk.EncodeSpecial(s)
			tk.EncodeStart(s)
			ids := tk.Encode(s)
			tk.Decode(ids)
			d := tk.NewDecoder()
			for _, id := range ids {
				d.Next(id)
			}
			d.Flush()
		}
		if tk.HasChatTemplate() {
			tk.ApplyChatTemplate([]Message{{Role: "user", Content: "hi"}}, true, map[string]any{"x": 1})
		}
	})
}

// FuzzRoundTrip checks decode(encode(s)) == s for valid UTF-8 on the real
// tokenizers (NFC-normalized for Qwen3, whose normalizer is NFC), and that
// streaming decoding agrees with Decode.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range loadReference(f).Cases.Texts {
		f.Add(s)
	}
	for _, s := range scanSeeds {
		f.Add(s)
	}
	tks := make([]*Tokenizer, len(fixtureNames))
	for i, name := range fixtureNames {
		tks[i] = loadFixture(f, name)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for i, tk := range tks {
			want := s
			if fixtureNames[i] == "qwen3" {
				want = norm.NFC.String(s)
			}
			ids := tk.Encode(s)
			got := tk.Decode(ids)
			if got != want {
				t.Fatalf("%s: decode(encode(%q)) = %q (ids %v)", fixtureNames[i], s, got, ids)
			}
			d := tk.NewDecoder()
			var sb strings.Builder
			for _, id := range ids {
				sb.WriteString(d.Next(id))
			}
			sb.WriteString(d.Flush())
			if sb.String() != got {
				t.Fatalf("%s: streamed %q, decoded %q", fixtureNames[i], sb.String(), got)
			}
		}
	})
}
