package gateway_test

import (
	"context"
	"encoding/json"
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
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, "response_format"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}}}}`, "response_format"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}`, "response_format"},
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
	// Through the client: JSON mode. The demo model is random, so the bias
	// makes it want '}' most and '{' next: '}' cannot open the reply, so
	// it is '{', then '}' closes the object and generation stops there.
	jr, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(16),
		Temperature: openai.Float(0), LogitBias: map[string]int64{"125": 100, "123": 50},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}},
	})
	if err != nil {
		t.Fatalf("json_object: %v", err)
	}
	if got := jr.Choices[0]; got.Message.Content != "{}" || got.FinishReason != "stop" {
		t.Fatalf("json_object with '}' favoured: %q, finish %q", got.Message.Content, got.FinishReason)
	}
	// Unbiased and sampled: whatever the random model says is one JSON
	// object, or (cut by max_tokens) the start of one.
	for seed := range 4 {
		jr, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(48),
			Temperature: openai.Float(1), Seed: openai.Int(int64(seed)),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}},
		})
		if err != nil {
			t.Fatalf("json_object seed %d: %v", seed, err)
		}
		got := jr.Choices[0]
		t.Logf("json_object seed %d: %q (%s)", seed, got.Message.Content, got.FinishReason)
		var obj map[string]any
		switch got.FinishReason {
		case "stop":
			if err := json.Unmarshal([]byte(got.Message.Content), &obj); err != nil || obj == nil {
				t.Fatalf("json_object seed %d: %q is not a JSON object: %v", seed, got.Message.Content, err)
			}
		case "length":
			if !strings.HasPrefix(strings.TrimLeft(got.Message.Content, " \t\r\n"), "{") {
				t.Fatalf("json_object seed %d: %q does not start an object", seed, got.Message.Content)
			}
		default:
			t.Fatalf("json_object seed %d: finish %q", seed, got.FinishReason)
		}
	}
	// Structured outputs: a schema of enums and booleans, so that even the
	// random model's reply ends, and parses into the schema's shape.
	schema := map[string]any{"type": "object", "additionalProperties": false, "required": []string{"mood", "ok"},
		"properties": map[string]any{"mood": map[string]any{"enum": []string{"happy", "sad"}}, "ok": map[string]any{"type": "boolean"}}}
	for seed := range 3 {
		sr, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(200),
			Seed: openai.Int(int64(seed)),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
				JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "mood", Strict: openai.Bool(true), Schema: schema}}},
		})
		if err != nil {
			t.Fatalf("json_schema: %v", err)
		}
		got := sr.Choices[0]
		var v struct {
			Mood string `json:"mood"`
			OK   *bool  `json:"ok"`
		}
		if got.FinishReason != "stop" || json.Unmarshal([]byte(got.Message.Content), &v) != nil || (v.Mood != "happy" && v.Mood != "sad") || v.OK == nil {
			t.Fatalf("json_schema seed %d: %q (%s)", seed, got.Message.Content, got.FinishReason)
		}
	}
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
			JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "x", Schema: map[string]any{"type": "object",
				"properties": map[string]any{"when": map[string]any{"type": "string", "format": "date-time"}}}}}},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "format") {
		t.Fatalf("json_schema with format: %v", err)
	}
	if _, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(2),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfText: &openai.ResponseFormatTextParam{}},
	}); err != nil {
		t.Fatalf("response_format text: %v", err)
	}
}
