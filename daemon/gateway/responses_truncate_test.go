package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// TestDropOldestTurn: a turn goes whole (a user message and what follows
// it up to the next one: replies, calls, outputs); system and developer
// messages stay; the last turn is never dropped.
func TestDropOldestTurn(t *testing.T) {
	roles := func(msgs []tokenizer.Message) string {
		var r []string
		for _, m := range msgs {
			r = append(r, m.Role+":"+m.Content.(string))
		}
		return strings.Join(r, " ")
	}
	msgs := func(spec string) []tokenizer.Message {
		var out []tokenizer.Message
		for _, f := range strings.Fields(spec) {
			role, text, _ := strings.Cut(f, ":")
			out = append(out, tokenizer.Message{Role: role, Content: text})
		}
		return out
	}
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"system:s user:1 assistant:a tool:t assistant:b user:2 assistant:c user:3", "system:s user:2 assistant:c user:3", true},
		{"system:s user:1 developer:d assistant:a user:2", "system:s developer:d user:2", true},
		{"assistant:a user:1", "user:1", true},
		{"system:s user:1 assistant:a", "system:s user:1 assistant:a", false},
		{"system:s", "system:s", false},
	} {
		got, ok := dropOldestTurn(msgs(tc.in))
		if ok != tc.ok || roles(got) != tc.want {
			t.Errorf("%s: %s (%v), want %s (%v)", tc.in, roles(got), ok, tc.want, tc.ok)
		}
	}
	in := msgs("user:1 assistant:a user:2")
	orig := slices.Clone(in)
	dropOldestTurn(in)
	if roles(in) != roles(orig) {
		t.Errorf("the input was changed: %s", roles(in))
	}
}
