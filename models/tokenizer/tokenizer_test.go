package tokenizer

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAPI(t *testing.T) {
	q := loadFixture(t, "qwen3")
	if got := q.VocabSize(); got != 151669 {
		t.Errorf("qwen3 VocabSize = %d, want 151669", got)
	}
	id, ok := q.TokenID("<|im_end|>")
	if !ok || id != 151645 || !q.IsSpecial(id) {
		t.Errorf("TokenID(<|im_end|>) = %d %v special %v", id, ok, q.IsSpecial(id))
	}
	if think, _ := q.TokenID("<think>"); q.IsSpecial(think) {
		t.Error("<think> is an added but not a special token")
	}
	if hello, ok := q.TokenID("Ġhello"); !ok || q.TokenString(hello) != "Ġhello" || q.IsSpecial(hello) {
		t.Errorf("Ġhello: %d %v", hello, ok)
	}
	if _, ok := q.BOS(); ok {
		t.Error("qwen3 has no BOS")
	}
	if got := q.EOS(); !slices.Equal(got, []int32{151645, 151643}) {
		t.Errorf("qwen3 EOS = %v", got)
	}
	if q.TokenString(-1) != "" || q.TokenString(1<<30) != "" {
		t.Error("TokenString of a bad id is not empty")
	}
	if got := q.Decode([]int32{-5, 1 << 30}); got != "" {
		t.Errorf("Decode(bad ids) = %q", got)
	}

	l := loadFixture(t, "llama3_1")
	if b, ok := l.BOS(); !ok || b != 128000 {
		t.Errorf("llama BOS = %d %v", b, ok)
	}
	// This tokenizer.json names 128008 a reserved token, not <|eom_id|>.
	if got := l.EOS(); !slices.Equal(got, []int32{128009, 128001}) {
		t.Errorf("llama EOS = %v, want eot_id, end_of_text", got)
	}
	d := loadFixture(t, "deepseek_v3")
	if b, ok := d.BOS(); !ok || b != 0 {
		t.Errorf("deepseek BOS = %d %v", b, ok)
	}
	if got := d.EOS(); !slices.Equal(got, []int32{1}) {
		t.Errorf("deepseek EOS = %v", got)
	}
}

func TestLossyUTF8(t *testing.T) {
	// Expected values are Rust's String::from_utf8_lossy.
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe2\x82", "\uFFFD"},                 // truncated 3-byte sequence: one U+FFFD
		{"\xe2\x82x", "\uFFFDx"},               //
		{"\xff\xfe", "\uFFFD\uFFFD"},           // two bytes that never start a sequence
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"}, // overlong: E0 needs A0..BF next
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate
		{"\xf0\x9f\x98", "\uFFFD"},             // truncated emoji
		{"\xf0\x9f\x98\x80", "😀"},
		{"a\x80b", "a\uFFFDb"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
	} {
		if got := lossyUTF8([]byte(c.in)); got != c.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStreamingDecoder(t *testing.T) {
	r := loadReference(t)
	for _, name := range fixtureNames {
		tk := loadFixture(t, name)
		for _, text := range append(r.Cases.Texts, "\xe4\xb8", "x\xf0\x9f", "😀\xff🎉") {
			ids := tk.Encode(text)
			dec := tk.NewDecoder()
			var out strings.Builder
			for _, id := range ids {
				piece := dec.Next(id)
				if !utf8.ValidString(piece) {
					t.Fatalf("%s: Next returned invalid UTF-8 %q", name, piece)
				}
				out.WriteString(piece)
			}
			out.WriteString(dec.Flush())
			if got, want := out.String(), tk.Decode(ids); got != want {
				t.Errorf("%s: streamed %q, Decode %q", name, got, want)
			}
		}
	}
	// A character split over two tokens comes out whole, with the second.
	q := loadFixture(t, "qwen3")
	b0, _ := q.TokenID(string(byteToRune[0xe4]))
	b1, _ := q.TokenID(string(byteToRune[0xb8]))
	b2, _ := q.TokenID(string(byteToRune[0xad]))
	dec := q.NewDecoder()
	if s := dec.Next(b0) + dec.Next(b1); s != "" {
		t.Errorf("partial character emitted: %q", s)
	}
	if s := dec.Next(b2); s != "中" {
		t.Errorf("completed character = %q, want 中", s)
	}
}

// TestMergeHeapMatchesSmall checks the O(n log n) merge against the
// simple one on random words from a small alphabet (many merges apply).
func TestMergeHeapMatchesSmall(t *testing.T) {
	tk := loadFixture(t, "llama3_1")
	m := tk.model
	rng := rand.New(rand.NewPCG(3, 4))
	alpha := "aabbeeinorst  "
	for range 2000 {
		n := 2 + rng.IntN(smallWord-1)
		w := make([]byte, n)
		for i := range w {
			w[i] = alpha[rng.IntN(len(alpha))]
		}
		ids := make([]int32, n)
		for i := range w {
			ids[i] = m.byteIDs[w[i]]
		}
		a := slices.Clone(ids)
		b := slices.Clone(ids)
		a = a[:m.mergeSmall(a)]
		b = b[:m.mergeHeap(b)]
		if !slices.Equal(a, b) {
			t.Fatalf("%q: small %v heap %v", w, a, b)
		}
	}
}

func TestLongWordIsNotQuadratic(t *testing.T) {
	tk := loadFixture(t, "qwen3")
	text := strings.Repeat("ab", 50000) // one 100 kB word
	ids := tk.Encode(text)
	if got := tk.Decode(ids); got != text {
		t.Fatal("round trip of a long word failed")
	}
}

func TestChatTemplateErrors(t *testing.T) {
	tk := loadFixture(t, "qwen3")
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, c := range []struct{ name, tmpl, wantErr string }{
		{"raise_exception", `{{ raise_exception("roles must alternate") }}`, "roles must alternate"},
		{"syntax", `{% for m in messages %}`, ""},
		{"bad filter", `{{ messages | no_such_filter }}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := *tk
			cp.chat = newChatTemplate(c.tmpl)
			out, err := cp.ApplyChatTemplate(msgs, true, nil)
			if err == nil {
				t.Fatalf("no error, rendered %q", out)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("error %q does not mention %q", err, c.wantErr)
			}
		})
	}
	cp := *tk
	cp.chat = nil
	if _, err := cp.ApplyChatTemplate(msgs, true, nil); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("no template: %v", err)
	}
}

func TestChatTemplateMessageTypes(t *testing.T) {
	tk := loadFixture(t, "qwen3")
	want, err := tk.ApplyChatTemplate([]map[string]any{
		{"role": "user", "content": "2+2?"},
		{"role": "assistant", "content": "4", "reasoning_content": "add"},
		{"role": "user", "content": "and 3+3?"},
	}, true, map[string]any{"enable_thinking": false})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.ApplyChatTemplate([]Message{
		{Role: "user", Content: "2+2?"},
		{Role: "assistant", Content: "4", ReasoningContent: "add"},
		{Role: "user", Content: "and 3+3?"},
	}, true, map[string]any{"enable_thinking": false})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("[]Message renders %q, []map %q", got, want)
	}
	if !strings.HasSuffix(got, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Errorf("enable_thinking=false not applied: %q", got)
	}
	// Tool calls reach the template.
	out, err := tk.ApplyChatTemplate([]Message{
		{Role: "user", Content: "weather?"},
		{Role: "assistant", Content: "", ToolCalls: []ToolCall{{Type: "function", Function: FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}},
		{Role: "tool", Content: "sunny"},
	}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>`, "<tool_response>\nsunny\n</tool_response>"} {
		s = strings.ReplaceAll(s, `\n`, "\n")
		if !strings.Contains(out, s) {
			t.Errorf("rendered tool chat lacks %q:\n%s", s, out)
		}
	}
}
