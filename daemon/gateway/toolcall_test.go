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
		content, calls := parseToolCalls(c.in, nil, nil)
		if content != c.content || !reflect.DeepEqual(calls, c.calls) {
			t.Errorf("%q: content %q calls %v; want %q %v", c.in, content, calls, c.content, c.calls)
		}
	}
}

// TestToolFormats: each family's calls, whole and fed a byte at a time
// (a token may end anywhere), and what stays content.
func TestToolFormats(t *testing.T) {
	types := paramTypes{"get_weather": {"city": "string", "days": "integer", "zip": "string"}}
	for _, c := range []struct {
		f       *toolFormat
		in      string
		content string
		calls   []toolCall
	}{
		{glmFormat, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>zip</arg_key>\n<arg_value>75001</arg_value>\n</tool_call>",
			"", []toolCall{{"get_weather", `{"city": "Paris", "days": 3, "zip": "75001"}`}}},
		{glmFormat, "Checking.<tool_call>now\n</tool_call>", "Checking.", []toolCall{{"now", "{}"}}},
		{glmFormat, "<tool_call>f<arg_key>opts</arg_key><arg_value>{\"a\": [1, 2]}</arg_value></tool_call>", "", []toolCall{{"f", `{"opts": {"a": [1, 2]}}`}}},
		{glmFormat, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "", []toolCall{{"f", "{}"}}},
		{glmFormat, "<tool_call>f<arg_key>a</arg_key>junk</tool_call>", "<tool_call>f<arg_key>a</arg_key>junk</tool_call>", nil},
		{deepseekFormat, dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + dsCallEnd + "\n" +
			dsCallBegin + "function" + dsSep + "now\n```json\n{}\n```" + dsCallEnd + dsCallsEnd,
			"", []toolCall{{"get_weather", `{"city": "Paris"}`}, {"now", "{}"}}},
		{deepseek31Format, "Sure." + dsCallsBegin + dsCallBegin + "get_weather" + dsSep + "{\"city\": \"Oslo\"}" + dsCallEnd + dsCallsEnd,
			"Sure.", []toolCall{{"get_weather", `{"city": "Oslo"}`}}},
		// Ended after the last call, without the closing marker.
		{deepseekFormat, dsCallsBegin + dsCallBegin + "function" + dsSep + "f\n```json\n{}\n```" + dsCallEnd, "", []toolCall{{"f", "{}"}}},
		{deepseekFormat, dsCallsBegin + "no call" + dsCallsEnd, dsCallsBegin + "no call" + dsCallsEnd, nil},
		{minimaxFormat, "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">New York</parameter>\n<parameter name=\"days\">2</parameter>\n</invoke>\n<invoke name=\"now\">\n</invoke>\n</minimax:tool_call>",
			"", []toolCall{{"get_weather", `{"city": "New York", "days": 2}`}, {"now", "{}"}}},
		{minimaxFormat, "<minimax:tool_call><invoke name=\"f\"><oops/></invoke></minimax:tool_call>", "<minimax:tool_call><invoke name=\"f\"><oops/></invoke></minimax:tool_call>", nil},
		{minimaxFormat, "text <tool_call>{\"name\": \"f\"}</tool_call>", "text <tool_call>{\"name\": \"f\"}</tool_call>", nil},
		{llamaFormat, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", []toolCall{{"get_weather", `{"city": "Paris"}`}}},
		{llamaFormat, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"arguments\": {\"a\": 1}}", "", []toolCall{{"f", "{}"}, {"g", `{"a": 1}`}}},
		{llamaFormat, " [{\"name\": \"f\"}]\n", "", []toolCall{{"f", "{}"}}},
		{llamaFormat, "It is sunny {\"name\": \"f\"}", "It is sunny {\"name\": \"f\"}", nil},
		{llamaFormat, "{\"answer\": 42}", "{\"answer\": 42}", nil},
		{llamaFormat, "{\"name\": \"f\", \"parameters\": {}} and more", "{\"name\": \"f\", \"parameters\": {}} and more", nil},
	} {
		content, calls := parseToolCalls(c.in, c.f, types)
		if content != c.content || !reflect.DeepEqual(calls, c.calls) {
			t.Errorf("%s %q: content %q calls %v; want %q %v", c.f.name, c.in, content, calls, c.content, c.calls)
			continue
		}
		p := toolParser{f: c.f, types: types}
		var b strings.Builder
		var calls2 []toolCall
		var pieces []toolPiece
		for i := range len(c.in) {
			pieces = append(pieces, p.feed(c.in[i:i+1])...)
		}
		for _, pc := range append(pieces, p.flush()...) {
			if pc.call != nil {
				calls2 = append(calls2, *pc.call)
			} else {
				b.WriteString(pc.text)
			}
		}
		if b.String() != content || !reflect.DeepEqual(calls2, calls) {
			t.Errorf("%s %q fed bytewise: content %q calls %v", c.f.name, c.in, b.String(), calls2)
		}
	}
}

// TestToolFormatFor: the format by the template's markers.
func TestToolFormatFor(t *testing.T) {
	for tmpl, want := range map[string]*toolFormat{
		"{{ '<tool_call>' }}":                          hermesFormat,
		"plain {{ messages }}":                         hermesFormat,
		"<tool_call>{{ name }}<arg_key>":               glmFormat,
		"<minimax:tool_call>\n<invoke name=":           minimaxFormat,
		dsCallBegin + "' + tool['type'] + '```json":    deepseekFormat,
		dsCallBegin + "' + tool['function']['name']":   deepseek31Format,
		"Respond in the format " + llamaJSONHint + ".": llamaFormat,
	} {
		if got := toolFormatFor(tmpl); got != want {
			t.Errorf("%q: %s, want %s", tmpl, got.name, want.name)
		}
	}
}

// FuzzToolParser: no panic, in any format; feeding the text in two pieces
// gives what feeding it whole gives; without calls, the content is the
// text itself; every call's arguments are a JSON object.
func FuzzToolParser(f *testing.F) {
	for _, s := range []string{
		"hello", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
		"x <tool_call>{\"name\":\"f\"}</tool_call> y <tool_call>bad</tool_call>", "<tool_call><tool_call></tool_call>",
		"</tool_call><tool_c", "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>\n\n",
		"<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>",
		dsCallsBegin + dsCallBegin + "function" + dsSep + "f\n```json\n{}\n```" + dsCallEnd + dsCallsEnd,
		"<minimax:tool_call><invoke name=\"f\"><parameter name=\"k\">1</parameter></invoke></minimax:tool_call>",
		"<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\"}", " [{\"name\": \"f\"}]",
	} {
		for fi := range 6 {
			f.Add(s, len(s)/2, fi)
		}
	}
	formats := []*toolFormat{hermesFormat, glmFormat, deepseekFormat, deepseek31Format, minimaxFormat, llamaFormat}
	f.Fuzz(func(t *testing.T, s string, cut, fi int) {
		tf := formats[(fi%len(formats)+len(formats))%len(formats)]
		types := paramTypes{"f": {"k": "number"}}
		content, calls := parseToolCalls(s, tf, types)
		if cut < 0 || cut > len(s) {
			cut = len(s) / 2
		}
		p := toolParser{f: tf, types: types}
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
			t.Fatalf("%s, split at %d: %q %v; whole: %q %v", tf.name, cut, b.String(), calls2, content, calls)
		}
		if len(calls) == 0 && content != s {
			t.Fatalf("%s: no calls, content %q differs from %q", tf.name, content, s)
		}
		for _, c := range calls {
			var obj map[string]any
			if c.Name == "" || json.Unmarshal([]byte(c.Arguments), &obj) != nil {
				t.Fatalf("%s: call %+v", tf.name, c)
			}
		}
	})
}
