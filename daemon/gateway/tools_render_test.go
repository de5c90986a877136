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
	if !j.tools || j.toolPrefix != "" || !toolFormatFor(tok.ChatTemplate()).canForce(tok.ChatTemplate()) {
		t.Fatalf("tools %v prefix %q", j.tools, j.toolPrefix)
	}
	got, err := tok.ApplyChatTemplate(j.messages, true, j.kwargs)
	if err != nil {
		t.Fatal(err)
	}
	// transformers' tojson is json.dumps(ensure_ascii=False): ", " and ": "
	// separators, keys in the request's order.
	toolJSON := `{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`
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
	content, calls := parseToolCalls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", toolFormatFor(tok.ChatTemplate()), nil)
	if content != "" || len(calls) != 1 || !strings.Contains(got, calls[0].Name) {
		t.Fatalf("parsed %q %v", content, calls)
	}
}

// TestToolsRenderQwen3Python: tools and object arguments render token for
// token as transformers renders them (json.dumps with ensure_ascii=False):
// keys in the request's order, non-ASCII and <>& as they are, escapes and
// floats as Python writes them. The expected text is the output of
// jinja2's ImmutableSandboxedEnvironment with transformers' tojson on the
// same request.
func TestToolsRenderQwen3Python(t *testing.T) {
	tok, err := tokenizer.Load("../../models/tokenizer/testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	j, aerr := decodeChat([]byte(`{"messages":[{"role":"user","content":"Météo à Paris?"},
		{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"unit":"celsius","city":"Paris","days":2,"precision":0.5}}}]},
		{"role":"tool","tool_call_id":"call_1","content":"18 C"}],
		"tools":[{"type":"function","function":{"name":"get_weather","description":"Météo <b>&</b> \"temps\"\tà venir","parameters":{"type":"object","properties":{"unit":{"type":"string","enum":["celsius","fahrenheit"]},"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":1e1,"default":1.0},"precision":{"type":"number","minimum":1e-05}},"required":["city"],"additionalProperties":false,"examples":[{},[],null]}}}]}`), "")
	if aerr != nil {
		t.Fatal(aerr.msg)
	}
	got, err := tok.ApplyChatTemplate(j.messages, true, j.kwargs)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\n" +
		"# Tools\n" +
		"\n" +
		"You may call one or more functions to assist with the user query.\n" +
		"\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n" +
		"<tools>\n" +
		"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Météo <b>&</b> \\\"temps\\\"\\tà venir\", \"parameters\": {\"type\": \"object\", \"properties\": {\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10.0, \"default\": 1.0}, \"precision\": {\"type\": \"number\", \"minimum\": 1e-05}}, \"required\": [\"city\"], \"additionalProperties\": false, \"examples\": [{}, [], null]}}}\n" +
		"</tools>\n" +
		"\n" +
		"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n" +
		"{\"name\": <function-name>, \"arguments\": <args-json-object>}\n" +
		"</tool_call><|im_end|>\n" +
		"<|im_start|>user\n" +
		"Météo à Paris?<|im_end|>\n" +
		"<|im_start|>assistant\n" +
		"<tool_call>\n" +
		"{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\", \"city\": \"Paris\", \"days\": 2, \"precision\": 0.5}}\n" +
		"</tool_call><|im_end|>\n" +
		"<|im_start|>user\n" +
		"<tool_response>\n" +
		"18 C\n" +
		"</tool_response><|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("rendered:\n%s\nwant:\n%s", got, want)
	}
}
