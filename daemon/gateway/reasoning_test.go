package gateway

import (
	"math/rand/v2"
	"testing"
)

// TestReasonSplit: a reply's reasoning and content, whole and fed in
// pieces of every size: the same parts either way, tags and the
// whitespace around the reasoning gone, text that only looks like a tag
// kept.
func TestReasonSplit(t *testing.T) {
	for _, c := range []struct {
		text            string
		inside          bool
		reasoning, cont string
	}{
		{"<think>\nLet me see.\n</think>\n\nHello!", false, "Let me see.", "Hello!"},
		{"  <think>a</think>b", false, "a", "b"},
		{"Hello <think>not reasoning</think>", false, "", "Hello <think>not reasoning</think>"},
		{"<tool_call>{}</tool_call>", false, "", "<tool_call>{}</tool_call>"},
		{"<thin", false, "", "<thin"},
		{"Let me see.\n</think>\n\nHi", true, "Let me see.", "Hi"},
		{"<think>\nstill thinking when the tokens ran out\n", false, "still thinking when the tokens ran out", ""},
		{"<think>a </thinker> b</think>c", false, "a </thinker> b", "c"},
		{"<think></think>\n\nJust this.", false, "", "Just this."},
		{"", false, "", ""},
	} {
		r, co := splitReasoning(c.text, c.inside)
		if r != c.reasoning || co != c.cont {
			t.Errorf("%q: reasoning %q content %q, want %q %q", c.text, r, co, c.reasoning, c.cont)
		}
		rng := rand.New(rand.NewPCG(1, uint64(len(c.text))))
		for range 50 {
			s := newReasonSplit(c.inside)
			var gr, gc string
			for i := 0; i < len(c.text); {
				n := min(len(c.text)-i, 1+rng.IntN(4))
				a, b := s.feed(c.text[i : i+n])
				gr, gc = gr+a, gc+b
				i += n
			}
			a, b := s.flush()
			if gr+a != c.reasoning || gc+b != c.cont {
				t.Fatalf("%q in pieces: %q %q", c.text, gr+a, gc+b)
			}
		}
	}
}
