package gateway

import (
	"math/rand/v2"
	"strings"
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

// FuzzReasonSplit: any reply, fed in any pieces, splits as it does whole,
// and the parts are pieces of the reply in order.
func FuzzReasonSplit(f *testing.F) {
	f.Add("<think>\na\n</think>\n\nb", false, uint64(1))
	f.Add("a\n</think>b<think>c", true, uint64(2))
	f.Add("  <th<think></think", false, uint64(3))
	f.Fuzz(func(t *testing.T, text string, inside bool, seed uint64) {
		wr, wc := splitReasoning(text, inside)
		rng := rand.New(rand.NewPCG(seed, 7))
		s := newReasonSplit(inside)
		var gr, gc string
		for i := 0; i < len(text); {
			n := min(len(text)-i, 1+rng.IntN(6))
			a, b := s.feed(text[i : i+n])
			gr, gc = gr+a, gc+b
			i += n
		}
		a, b := s.flush()
		if gr+a != wr || gc+b != wc {
			t.Fatalf("%q: pieces %q %q, whole %q %q", text, gr+a, gc+b, wr, wc)
		}
		if !strings.Contains(text, wr) || !strings.HasSuffix(text, wc) {
			t.Fatalf("%q: parts %q %q are not the reply's", text, wr, wc)
		}
	})
}
