package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseToolCalls(t *testing.T) {
	for _, c := range []struct {
		in      string
		content string
		calls   []toolCall
	}{
		{"plain text\n", "plain text\n", nil},
		{"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "", []toolCall{{"f", `{"a": 1}`}}},
		{"Let me look.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": [1]}\"}\n</tool_call>\n",
			"Let me look.", []toolCall{{"f", "{}"}, {"g", `{"x": [1]}`}}},
		{"<tool_call>{\"name\": \"f\"}</tool_call>", "", []toolCall{{"f", "{}"}}},
		{"<tool_call>{\"name\": \"f\", \"parameters\": {\"q\": \"s\"}}</tool_call>", "", []toolCall{{"f", `{"q": "s"}`}}},
		// Malformed calls stay content, verbatim.
		{"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>", nil},
		{"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil},
		{"<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", nil},
		{"<tool_call>{\"name\": \"f\"} {}</tool_call>", "<tool_call>{\"name\": \"f\"} {}</tool_call>", nil},
		{"unclosed <tool_call>{\"name\": \"f\"", "unclosed <tool_call>{\"name\": \"f\"", nil},
		{"a <tool_ca", "a <tool_ca", nil},
	} {
		content, calls := parseToolCalls(c.in)
		if content != c.content || !reflect.DeepEqual(calls, c.calls) {
			t.Errorf("%q: content %q calls %v; want %q %v", c.in, content, calls, c.content, c.calls)
		}
	}
}

// FuzzToolParser: no panic; feeding the text in two pieces gives what
// feeding it whole gives; without calls, the content is the text itself;
// every call's arguments are a JSON object.
func FuzzToolParser(f *testing.F) {
	for _, s := range []string{
		"hello", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
		"x <tool_call>{\"name\":\"f\"}</tool_call> y <tool_call>bad</tool_call>", "<tool_call><tool_call></tool_call>",
		"</tool_call><tool_c", "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>\n\n",
	} {
		f.Add(s, len(s)/2)
	}
	f.Fuzz(func(t *testing.T, s string, cut int) {
		content, calls := parseToolCalls(s)
		if cut < 0 || cut > len(s) {
			cut = len(s) / 2
		}
		var p toolParser
		var b strings.Builder
		var calls2 []toolCall
		for _, pc := range append(append(p.feed(s[:cut]), p.feed(s[cut:])...), p.flush()...) {
			if pc.call != nil {
				calls2 = append(calls2, *pc.call)
			} else {
				b.WriteString(pc.text)
			}
		}
		if b.String() != content || !reflect.DeepEqual(calls, calls2) {
			t.Fatalf("split at %d: %q %v; whole: %q %v", cut, b.String(), calls2, content, calls)
		}
		if len(calls) == 0 && content != s {
			t.Fatalf("no calls, content %q differs from %q", content, s)
		}
		for _, c := range calls {
			var obj map[string]any
			if c.Name == "" || json.Unmarshal([]byte(c.Arguments), &obj) != nil {
				t.Fatalf("call %+v", c)
			}
		}
	})
}
