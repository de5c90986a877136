package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestOpenAIGoLogitBias: +100 on a token makes greedy decoding of the demo
// model write only that token, on both routes; out-of-range biases and
// JSON response formats are 400s naming their field.
func TestOpenAIGoLogitBias(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello!")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0), LogitBias: map[string]int64{"81": 100},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Choices[0].Message.Content; got != "QQQQQQ" { // byte token 81 is "Q"
		t.Fatalf("chat with logit_bias {81: 100}: %q", got)
	}
	cres, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model: "demo", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(4), Temperature: openai.Float(0), LogitBias: map[string]int64{"122": 100},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cres.Choices[0].Text; got != "zzzz" {
		t.Fatalf("completion with logit_bias {122: 100}: %q", got)
	}
	for _, tc := range []struct {
		body, param string
	}{
		{`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"5":101}}`, "logit_bias"},
		{`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"a":1}}`, "logit_bias"},
		{`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"100000":1}}`, "logit_bias"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`, "response_format"},
		{`{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, "tool_choice"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`, "tool_choice"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"code"}]}`, "tools[0].type"},
	} {
		status, body := do(t, d.tcp, "POST", d.base+"/v1/chat/completions", []byte(tc.body))
		e := checkError(t, status, body, 400)
		if e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Fatalf("%s: %s", tc.body, body)
		}
	}
	// Through the client: the refusal of JSON mode reads as such.
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "constrained") {
		t.Fatalf("json_object: %v", err)
	}
	if _, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(2),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfText: &openai.ResponseFormatTextParam{}},
	}); err != nil {
		t.Fatalf("response_format text: %v", err)
	}
}
