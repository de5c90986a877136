package session

import (
	"context"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// feed runs text, one byte token at a time (the demo tokenizer), through a
// stopper and returns the released pieces.
func feed(t *testing.T, tok *tokenizer.Tokenizer, stops []string, text string, ids ...int32) ([]string, bool) {
	t.Helper()
	st := newStopper(tok, stops)
	var out []string
	for _, id := range append(tok.Encode(text), ids...) {
		s, stop := st.next(id)
		out = append(out, s)
		if stop {
			return out, true
		}
	}
	return append(out, st.flush()), false
}

func TestStopper(t *testing.T) {
	_, tok := loadDemo(t)
	// Found across token boundaries, excluded from the text.
	out, stop := feed(t, tok, []string{"END"}, "abcENDxyz")
	if !stop || strings.Join(out, "") != "abc" {
		t.Fatalf("got %q stop=%v", out, stop)
	}
	// "E" and "EN" are held back until they cannot start "END".
	if out[3] != "" || out[4] != "" {
		t.Errorf("prefix of the stop string released early: %q", out)
	}
	out, stop = feed(t, tok, []string{"END"}, "abENx")
	if stop || strings.Join(out, "") != "abENx" || out[2] != "" || out[4] != "ENx" {
		t.Fatalf("false start: %q stop=%v", out, stop)
	}
	// Held-back text comes out at the end.
	out, stop = feed(t, tok, []string{"END"}, "abEN")
	if stop || strings.Join(out, "") != "abEN" {
		t.Fatalf("flush: %q", out)
	}
	// The earliest of several stop strings wins.
	out, _ = feed(t, tok, []string{"xyz", "c"}, "abcxyz")
	if strings.Join(out, "") != "ab" {
		t.Fatalf("two stops: %q", out)
	}
	// A multi-byte character split across tokens comes out whole.
	out, _ = feed(t, tok, []string{"é!"}, "aé?")
	if strings.Join(out, "") != "aé?" {
		t.Fatalf("utf-8: %q", out)
	}
}

// TestTextChatAndStop drives the demo model with text and chat messages
// and checks streaming text against the final result.
func TestTextChatAndStop(t *testing.T) {
	model, tok := loadDemo(t)
	m := newManager(t, "", ModelConfig{Name: "demo", Model: model, Tokenizer: tok})
	ctx := context.Background()
	id := mustOpen(t, m, "demo")
	r, err := m.Append(ctx, 1, id, AppendInput{Messages: []tokenizer.Message{{Role: "user", Content: "hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := tok.Encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
	toks, _ := m.Tokens(1, id)
	equalIDs(t, "chat tokens", toks, want)
	if r.Tokens != len(want) {
		t.Fatalf("append %+v", r)
	}
	seed := uint64(3)
	params := GenerateParams{MaxTokens: 40, Sampling: SamplingParams{Temperature: 0.8, Seed: &seed}, Logprobs: true, TopLogprobs: 2}
	fork, _ := m.Fork(1, id, -1)
	var streamed strings.Builder
	var events int
	res, err := m.Generate(ctx, 1, id, params, func(ev TokenEvent) error {
		streamed.WriteString(ev.Text)
		events++
		if ev.Logprob > 0 || len(ev.Top) != 2 || ev.Top[0].Logprob < ev.Logprob {
			t.Errorf("bad logprobs %+v", ev)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if events != len(res.IDs) || streamed.String() != res.Text {
		t.Fatalf("stream %q (%d events) vs result %q (%d ids)", streamed.String(), events, res.Text, len(res.IDs))
	}
	if res.FinishReason == "stop" && res.IDs[len(res.IDs)-1] != demo.IMEnd {
		t.Errorf("stop finish without EOS: %v", res.IDs)
	}
	// Same seed on the fork: the same tokens.
	res2, err := m.Generate(ctx, 1, fork.ID, params, nil)
	if err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "seeded", res2.IDs, res.IDs)
	if len(res.Text) < 4 {
		t.Skipf("generated text %q too short to test stop strings", res.Text)
	}
	// A stop string in the middle of that text ends the generation there.
	stop := res.Text[2:4]
	f2, _ := m.Fork(1, fork.ID, len(want))
	streamed.Reset()
	res3, err := m.Generate(ctx, 1, f2.ID, GenerateParams{MaxTokens: 40, Sampling: params.Sampling, Stop: []string{stop}},
		func(ev TokenEvent) error { streamed.WriteString(ev.Text); return nil })
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(res.Text, stop)
	if res3.FinishReason != "stop" || res3.Text != res.Text[:cut] || streamed.String() != res3.Text {
		t.Fatalf("stop %q: got %q (%s), streamed %q, want %q", stop, res3.Text, res3.FinishReason, streamed.String(), res.Text[:cut])
	}
	toks, _ = m.Tokens(1, f2.ID)
	if len(toks) != len(want)+len(res3.IDs) {
		t.Errorf("generated tokens did not join the session")
	}
}
