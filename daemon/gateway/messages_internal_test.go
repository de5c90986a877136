package gateway

import (
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// TestDecodeMessages: a Messages request's turns become chat-template
// messages (the system prompt first, an assistant's text and tool_use
// blocks one message with its calls, a user's tool_result blocks tool
// messages before its text, a trailing assistant turn the prefill); its
// tools the template's functions; bad requests name their field.
func TestDecodeMessages(t *testing.T) {
	j, aerr := decodeMessages([]byte(`{"model": "demo", "max_tokens": 5, "system": [{"type": "text", "text": "Be brief."}],
		"tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "get_weather"},
		"stop_sequences": ["END"], "messages": [
		{"role": "user", "content": "Q"},
		{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "Let me check."},
			{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
		{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]},
			{"type": "tool_result", "tool_use_id": "toolu_2", "content": "no", "is_error": true}, {"type": "text", "text": "And?"}]}]}`), "", false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	want := []tokenizer.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Q"},
		{Role: "assistant", Content: "Let me check.", ReasoningContent: "hm", ToolCalls: []tokenizer.ToolCall{{ID: "toolu_1", Type: "function",
			Function: tokenizer.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}},
		{Role: "tool", Content: "18 C", ToolCallID: "toolu_1"},
		{Role: "tool", Content: "Error: no", ToolCallID: "toolu_2"},
		{Role: "user", Content: "And?"},
	}
	if len(j.messages) != len(want) {
		t.Fatalf("%d messages: %+v", len(j.messages), j.messages)
	}
	for i := range want {
		g, w := j.messages[i], want[i]
		if g.Role != w.Role || g.Content != w.Content || g.ToolCallID != w.ToolCallID || g.ReasoningContent != w.ReasoningContent ||
			len(g.ToolCalls) != len(w.ToolCalls) || len(w.ToolCalls) > 0 && g.ToolCalls[0] != w.ToolCalls[0] {
			t.Errorf("message %d: %+v, want %+v", i, g, w)
		}
	}
	if !j.tools || !j.toolForce || j.toolName != "get_weather" || j.params.MaxTokens != 5 || len(j.params.Stop) != 1 || j.prefill != "" {
		t.Fatalf("job: %+v", j)
	}

	j, aerr = decodeMessages([]byte(`{"max_tokens": 5, "messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "The answer is"}]}`), "", false)
	if aerr != nil || j.prefill != "The answer is" || len(j.messages) != 1 {
		t.Fatalf("prefill: %v %+v", aerr, j)
	}
	if _, aerr = decodeMessages([]byte(`{"messages": [{"role": "user", "content": "Q"}]}`), "", true); aerr != nil {
		t.Fatalf("count_tokens needs no max_tokens: %v", aerr)
	}
	for body, param := range map[string]string{
		`{"messages": [{"role": "user", "content": "Q"}]}`:                                                                                                      "max_tokens",
		`{"max_tokens": 0, "messages": [{"role": "user", "content": "Q"}]}`:                                                                                     "max_tokens",
		`{"max_tokens": 5, "messages": []}`:                                                                                                                     "messages",
		`{"max_tokens": 5, "messages": [{"role": "tool", "content": "Q"}]}`:                                                                                     "messages[0].role",
		`{"max_tokens": 5, "messages": [{"role": "user", "content": 7}]}`:                                                                                       "messages[0].content",
		`{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f"}]}]}`:                                                     "messages[0].content[0].type",
		`{"max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": {}}]}]}`:                                                "messages[0].content[0].name",
		`{"max_tokens": 5, "system": 3, "messages": [{"role": "user", "content": "Q"}]}`:                                                                        "system",
		`{"max_tokens": 5, "tools": [{"type": "web_search_20250305", "name": "w"}], "messages": [{"role": "user", "content": "Q"}]}`:                            "tools[0].type",
		`{"max_tokens": 5, "tools": [{"name": "f"}], "messages": [{"role": "user", "content": "Q"}]}`:                                                           "tools[0].input_schema",
		`{"max_tokens": 5, "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "Q"}]}`:                                                     "tool_choice",
		`{"max_tokens": 5, "stop_sequences": "x", "messages": [{"role": "user", "content": "Q"}]}`:                                                              "stop_sequences",
		`{"max_tokens": 5, "messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]}`: "messages",
	} {
		_, aerr := decodeMessages([]byte(body), "", false)
		if aerr == nil || aerr.param != param || !strings.Contains(aerr.msg, param) && param != "messages" {
			t.Errorf("%s: %v (param %q), want param %q", body, aerr, func() string {
				if aerr == nil {
					return ""
				}
				return aerr.param
			}(), param)
		}
	}
}
