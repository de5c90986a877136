package gateway

import (
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// TestToolsRenderQwen3: a chat request's tools, an assistant message with
// tool_calls (content null) and a tool result render through the real
// Qwen3 chat template as it defines: the tools inside <tools></tools> in
// the system prompt, the call as a <tool_call> block, the result as a
// <tool_response> in a user turn.
func TestToolsRenderQwen3(t *testing.T) {
	tok, err := tokenizer.Load("../../models/tokenizer/testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	j, aerr := decodeChat([]byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"18 C"}],
		"tools":[{"type":"function","function":{"name":"get_weather","description":"The weather in a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`), "")
	if aerr != nil {
		t.Fatal(aerr.msg)
	}
	if !j.tools || j.toolPrefix != "" || !forceToolCall(tok.ChatTemplate()) {
		t.Fatalf("tools %v prefix %q", j.tools, j.toolPrefix)
	}
	got, err := tok.ApplyChatTemplate(j.messages, true, j.kwargs)
	if err != nil {
		t.Fatal(err)
	}
	// gonja's tojson writes Go's compact JSON with sorted keys, where
	// transformers writes Python's json.dumps; the content is the same.
	toolJSON := `{"function":{"description":"The weather in a city.","name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"type":"object"}},"type":"function"}`
	want := "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + toolJSON + "\n</tools>\n\n" +
		"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("rendered:\n%s\nwant:\n%s", got, want)
	}
	// What the model writes back in that format parses into the call.
	content, calls := parseToolCalls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
	if content != "" || len(calls) != 1 || !strings.Contains(got, calls[0].Name) {
		t.Fatalf("parsed %q %v", content, calls)
	}
}
