package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// Tool calling end to end: the demo model with Qwen3's real chat template
// (tools in the system prompt, <tool_call> blocks), whose runner writes a
// scripted reply. The fake sits at the session boundary, in place of the
// logits only: the daemon, scheduler, sampler, detokenizer, gateway and
// the official client are the real ones.

// scriptedRunner runs the demo model and then makes the text of script
// the greedy continuation of every "<|im_start|>assistant\n" (then EOS).
type scriptedRunner struct {
	session.Runner
	marker []int32 // the template's start of an assistant reply
	eos    int32
	script atomic.Pointer[[]int32]
	hist   []int32 // tokens by position of the sequence last run (tests run one at a time)
}

func (r *scriptedRunner) Forward(seq models.Seq, tokens []int32, want models.Logits) ([]float32, error) {
	logits, err := r.Runner.Forward(seq, tokens, want)
	if err != nil {
		return logits, err
	}
	// Every pass's tokens, a prompt's leading chunks (no logits) too.
	for len(r.hist) < seq.Start {
		r.hist = append(r.hist, -1)
	}
	r.hist = append(r.hist[:seq.Start], tokens...)
	if want == models.NoLogits {
		return logits, nil
	}
	marker := r.marker
	k := -1
	for i := len(r.hist) - len(marker); i >= 0; i-- {
		if slices.Equal(r.hist[i:i+len(marker)], marker) {
			k = len(r.hist) - (i + len(marker))
			break
		}
	}
	script := *r.script.Load()
	if k < 0 {
		return logits, nil
	}
	next := r.eos
	if k < len(script) {
		next = script[k]
	}
	V := demo.VocabSize
	row := logits[len(logits)-V:]
	for i := range row {
		row[i] = 0
	}
	row[next] = 50
	return logits, nil
}

func byteIDs(s string) []int32 {
	out := make([]int32, len(s))
	for i := range len(s) {
		out[i] = int32(s[i])
	}
	return out
}

// qwen3Template is the chat template of the real Qwen3 tokenizer.
func qwen3Template(t testing.TB) string { return fixtureTemplate(t, "qwen3") }

// fixtureTemplate is the chat template of a real tokenizer of
// models/tokenizer/testdata.
func fixtureTemplate(t testing.TB, name string) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "models", "tokenizer", "testdata", name, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.ChatTemplate
}

// startScripted serves the demo model with Qwen3's template (a reply
// starts after "<|im_start|>assistant\n").
func startScripted(t *testing.T) (*testDaemon, *scriptedRunner) {
	return startScriptedWith(t, qwen3Template(t), append([]int32{demo.EndOfText + 1}, byteIDs("assistant\n")...))
}

// startScriptedWith serves the demo model with a chat template whose
// replies start after marker.
func startScriptedWith(t *testing.T, template string, marker []int32) (*testDaemon, *scriptedRunner) {
	var cfg map[string]any
	json.Unmarshal(demo.TokenizerConfigJSON(), &cfg)
	cfg["chat_template"] = template
	cfgJSON, _ := json.Marshal(cfg)
	tok, err := tokenizer.New(demo.TokenizerJSON(), cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	sr := &scriptedRunner{marker: marker, eos: demo.EndOfText + 2}
	sr.script.Store(&[]int32{})
	cpu := daemon.DefaultEngines()["cpu"]
	engines := map[string]daemon.Engine{"cpu": daemon.EngineFunc(func(ctx context.Context, m daemon.ModelConfig) (*daemon.Loaded, error) {
		l, err := cpu.Load(ctx, m)
		if err != nil {
			return nil, err
		}
		sr.Runner = l.Model
		l.Model, l.Tokenizer = sr, tok
		return l, nil
	})}
	return startDaemon(t, daemonOpts{engines: engines}), sr
}

var weatherTool = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("The weather in a city."),
	Parameters: openai.FunctionParameters{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []string{"city"},
	},
})

func TestOpenAIGoToolCalls(t *testing.T) {
	d, sr := startScripted(t)
	defer d.stop(t)
	c := goClient(d)
	ctx := context.Background()
	call := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	two := "Checking.\n" + call + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
	malformed := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>"
	runToolCases(t, d, sr, []toolCase{
		{"auto", call, openai.ChatCompletionToolChoiceOptionUnionParam{}, "", []string{`{"city": "Paris"}`}},
		{"two calls", two, openai.ChatCompletionToolChoiceOptionUnionParam{}, "Checking.", []string{`{"city": "Paris"}`, `{"city": "Oslo"}`}},
		{"malformed", malformed, openai.ChatCompletionToolChoiceOptionUnionParam{}, malformed, nil},
		{"plain", "Sunny.", openai.ChatCompletionToolChoiceOptionUnionParam{}, "Sunny.", nil},
		// Forced: the prompt ends with the call's start, the model writes the rest.
		{"required", call, toolRequired, "", []string{`{"city": "Paris"}`}},
		{"named", call, toolNamed, "", []string{`{"city": "Paris"}`}},
	})

	// The conversation goes on with the call and its result; tool_choice
	// "none" leaves the reply alone.
	ids := byteIDs(call)
	sr.script.Store(&ids)
	res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage("Weather in Paris?"),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{
				{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}}}},
			openai.ToolMessage("18 C, sunny", "call_1"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{weatherTool}, ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")},
		MaxTokens: openai.Int(200), Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Choices[0].Message; m.Content != call || len(m.ToolCalls) != 0 || res.Choices[0].FinishReason != "stop" {
		t.Fatalf("tool_choice none: %+v %q", m, res.Choices[0].FinishReason)
	}
}

// toolCase is a scripted reply and the calls the client must see.
type toolCase struct {
	name    string
	script  string
	choice  openai.ChatCompletionToolChoiceOptionUnionParam
	content string
	args    []string // get_weather's arguments, call by call
}

// runToolCases checks each case's reply through d, serving sr, plain and
// streamed: the calls, the content (null in JSON when empty) and the
// finish reason.
func runToolCases(t *testing.T, d *testDaemon, sr *scriptedRunner, cases []toolCase) {
	c := goClient(d)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ids := byteIDs(tc.script)
			sr.script.Store(&ids)
			params := openai.ChatCompletionNewParams{
				Model:    "demo",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris? (" + tc.name + ")")},
				Tools:    []openai.ChatCompletionToolUnionParam{weatherTool}, ToolChoice: tc.choice,
				MaxTokens: openai.Int(800), Temperature: openai.Float(0),
			}
			check := func(how string, msg openai.ChatCompletionMessage, finish string) {
				t.Helper()
				want := "tool_calls"
				if len(tc.args) == 0 {
					want = "stop"
				}
				if msg.Content != tc.content || finish != want || len(msg.ToolCalls) != len(tc.args) {
					t.Fatalf("%s: content %q finish %q calls %+v", how, msg.Content, finish, msg.ToolCalls)
				}
				for i, call := range msg.ToolCalls {
					if call.Function.Name != "get_weather" || call.Function.Arguments != tc.args[i] || call.Type != "function" || call.ID == "" {
						t.Fatalf("%s: call %d %+v", how, i, call)
					}
				}
			}
			res, err := c.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			check("plain", res.Choices[0].Message, res.Choices[0].FinishReason)
			if raw := res.Choices[0].Message.JSON.Content.Raw(); (tc.content == "") != (raw == "null") {
				t.Fatalf("content JSON %s", raw)
			}
			stream := c.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			check("streamed", acc.Choices[0].Message, acc.Choices[0].FinishReason)
		})
	}
}

var (
	toolRequired = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	toolNamed    = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
)

// TestOpenAIGoToolCallsDeepSeek: through DeepSeek-V3's real chat template,
// whose replies write calls between its own markers (a json code block of
// arguments per call): two calls in one block, and forced by tool_choice.
func TestOpenAIGoToolCallsDeepSeek(t *testing.T) {
	const (
		callsBegin, callsEnd = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
		callBegin, callEnd   = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
		sep                  = "<｜tool▁sep｜>"
	)
	one := func(city string) string {
		return callBegin + "function" + sep + "get_weather\n```json\n{\"city\": \"" + city + "\"}\n```" + callEnd
	}
	call := callsBegin + one("Paris") + callsEnd
	d, sr := startScriptedWith(t, fixtureTemplate(t, "deepseek_v3"), byteIDs("<｜Assistant｜>"))
	defer d.stop(t)
	runToolCases(t, d, sr, []toolCase{
		{"auto", call, openai.ChatCompletionToolChoiceOptionUnionParam{}, "", []string{`{"city": "Paris"}`}},
		{"two calls", "Checking." + callsBegin + one("Paris") + "\n" + one("Oslo") + callsEnd, openai.ChatCompletionToolChoiceOptionUnionParam{},
			"Checking.", []string{`{"city": "Paris"}`, `{"city": "Oslo"}`}},
		{"plain", "Sunny.", openai.ChatCompletionToolChoiceOptionUnionParam{}, "Sunny.", nil},
		{"required", call, toolRequired, "", []string{`{"city": "Paris"}`}},
		{"named", call, toolNamed, "", []string{`{"city": "Paris"}`}},
	})
}

// TestOpenAIGoToolCallsLlama: Llama 3.1's bare JSON calls, the whole
// reply, through its real template with the tools instruction of Llama's
// tool-calling template before it.
func TestOpenAIGoToolCallsLlama(t *testing.T) {
	tmpl := "{% if tools %}{{ '<|start_header_id|>system<|end_header_id|>\\n\\nRespond in the format " + llamaHint +
		". Do not use variables.<|eot_id|>' }}{% endif %}" + fixtureTemplate(t, "llama3_1")
	call := `{"name": "get_weather", "parameters": {"city": "Paris"}}`
	d, sr := startScriptedWith(t, tmpl, byteIDs("<|start_header_id|>assistant<|end_header_id|>\n\n"))
	defer d.stop(t)
	runToolCases(t, d, sr, []toolCase{
		{"auto", call, openai.ChatCompletionToolChoiceOptionUnionParam{}, "", []string{`{"city": "Paris"}`}},
		{"python tag, two", "<|python_tag|>" + call + "; " + call, openai.ChatCompletionToolChoiceOptionUnionParam{}, "",
			[]string{`{"city": "Paris"}`, `{"city": "Paris"}`}},
		{"plain", "Sunny {today}.", openai.ChatCompletionToolChoiceOptionUnionParam{}, "Sunny {today}.", nil},
		{"required", call, toolRequired, "", []string{`{"city": "Paris"}`}},
		{"named", call, toolNamed, "", []string{`{"city": "Paris"}`}},
	})
}

// llamaHint is Llama 3.1's request for a call (toolformat.go's llamaJSONHint).
const llamaHint = `{"name": function name, "parameters": dictionary of argument name and its value}`
