package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/openai/openai-go/v3"
)

// The Messages API through Anthropic's official Go client.

// accumulate reads a streamed message to its end: the message its events
// build, and the events' types in order.
func accumulate(t *testing.T, stream *ssestream.Stream[anthropic.MessageStreamEventUnion]) (anthropic.Message, []string) {
	t.Helper()
	var acc anthropic.Message
	var kinds []string
	for stream.Next() {
		ev := stream.Current()
		kinds = append(kinds, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return acc, kinds
}

func anthClient(d *testDaemon) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(d.base+"/"), aoption.WithAPIKey("unused"), aoption.WithMaxRetries(0),
		aoption.WithRequestTimeout(60*time.Second))
}

// TestAnthropicGoMessages: a greedy reply with a system prompt is the chat
// route's for the same conversation, plain and streamed (the stream's
// events accumulate to the same message); usage counts the prompt as
// count_tokens does; errors come in Anthropic's shape.
func TestAnthropicGoMessages(t *testing.T) {
	d := sharedDaemon(t)
	c := anthClient(d)
	ctx := context.Background()
	greedy := aoption.WithJSONSet("temperature", 0) // this client has no field for it
	params := anthropic.MessageNewParams{
		Model: "demo", MaxTokens: 12,
		System:   []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello!"))},
	}
	msg, err := c.Messages.New(ctx, params, greedy)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || len(msg.Content) != 1 || msg.Content[0].Type != "text" ||
		msg.StopReason != anthropic.StopReasonMaxTokens || msg.Usage.OutputTokens != 12 || !strings.HasPrefix(msg.ID, "msg") {
		t.Fatalf("message: %s", msg.RawJSON())
	}
	oc := goClient(d)
	chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "demo", MaxTokens: openai.Int(12), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Hello!")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := msg.Content[0].Text, chat.Choices[0].Message.Content; got != want {
		t.Fatalf("messages %q, chat %q", got, want)
	}
	count, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "demo",
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System},
		Messages: params.Messages})
	if err != nil {
		t.Fatal(err)
	}
	if in := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens; count.InputTokens != in || in != int64(chat.Usage.PromptTokens) {
		t.Fatalf("count_tokens %d, the message's input %d (+%d cached), the chat's %d", count.InputTokens,
			msg.Usage.InputTokens, msg.Usage.CacheReadInputTokens, chat.Usage.PromptTokens)
	}

	acc, kinds := accumulate(t, c.Messages.NewStreaming(ctx, params, greedy))
	if len(acc.Content) != 1 || acc.Content[0].Text != msg.Content[0].Text || acc.StopReason != anthropic.StopReasonMaxTokens ||
		acc.Usage.OutputTokens != 12 {
		t.Fatalf("streamed %+v (events %v), plain %q", acc, kinds, msg.Content[0].Text)
	}
	if kinds[0] != "message_start" || kinds[len(kinds)-1] != "message_stop" || kinds[len(kinds)-2] != "message_delta" {
		t.Fatalf("events %v", kinds)
	}

	// Errors: a missing max_tokens, an unknown model, a system turn.
	for _, body := range []string{
		`{"model": "demo", "messages": [{"role": "user", "content": "Hi"}]}`,
		`{"model": "demo", "max_tokens": 4, "messages": [{"role": "system", "content": "Hi"}]}`,
		`{"model": "demo", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}`,
	} {
		res, err := d.tcp.Post(d.base+"/v1/messages", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type, Message string
			} `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || res.StatusCode != http.StatusBadRequest || e.Type != "error" ||
			e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Fatalf("%s: %d %s", body, res.StatusCode, raw)
		}
	}
	_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "nope", MaxTokens: 4,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi"))}})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestAnthropicGoToolUse: the reply's call comes back as a tool_use block
// after the text before it (stop_reason tool_use), plain and streamed; its
// tool_result goes back in a user turn and reaches the template as the
// tool's output; stop_sequences end a reply with stop_reason
// stop_sequence; an assistant prefill is continued.
func TestAnthropicGoToolUse(t *testing.T) {
	d, sr := startScripted(t)
	defer d.stop(t)
	c := anthClient(d)
	ctx := context.Background()
	ids := byteIDs("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
	sr.script.Store(&ids)
	tool := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("The weather in a city."),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}
	ask := anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))
	params := anthropic.MessageNewParams{Model: "demo", MaxTokens: 200,
		Tools: []anthropic.ToolUnionParam{tool}, Messages: []anthropic.MessageParam{ask}}
	check := func(how string, m anthropic.Message) {
		t.Helper()
		if len(m.Content) != 2 || m.Content[0].Type != "text" || m.Content[0].Text != "Let me check." ||
			m.Content[1].Type != "tool_use" || m.Content[1].Name != "get_weather" || !strings.HasPrefix(m.Content[1].ID, "toolu_") ||
			m.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("%s: %+v", how, m.Content)
		}
		var in map[string]string
		if err := json.Unmarshal(m.Content[1].Input, &in); err != nil || in["city"] != "Paris" {
			t.Fatalf("%s: input %s", how, m.Content[1].Input)
		}
	}
	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	check("plain", *msg)
	acc, _ := accumulate(t, c.Messages.NewStreaming(ctx, params))
	check("streamed", acc)
	// tool_choice any forces a call: the prompt ends with its opening,
	// which the script then continues.
	call := byteIDs("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
	sr.script.Store(&call)
	forced := params
	forced.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
	if m, err := c.Messages.New(ctx, forced); err != nil || m.StopReason != anthropic.StopReasonToolUse || len(m.Content) != 1 ||
		m.Content[0].Name != "get_weather" {
		t.Fatalf("tool_choice any: %v %s", err, m.RawJSON())
	}

	// The result goes back as a tool_result block.
	sunny := byteIDs("Sunny.")
	sr.script.Store(&sunny)
	next, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "demo", MaxTokens: 200,
		Tools: []anthropic.ToolUnionParam{tool}, Messages: []anthropic.MessageParam{ask, msg.ToParam(),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[1].ID, "18 C, sunny", false))}})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Content) != 1 || next.Content[0].Text != "Sunny." || next.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("after the tool's result: %s", next.RawJSON())
	}
	prompt := string(bytesOf(sr.hist))
	// (The runner's record of the prompt holds only the positions this
	// request computed: the turns before came from the prefix cache.
	// TestDecodeMessages checks the turns' conversion.)
	if !strings.Contains(prompt, "<tool_response>\n18 C, sunny\n</tool_response>") || next.Usage.CacheReadInputTokens == 0 {
		t.Fatalf("the continued prompt lacks the result, or reused nothing (%d cached):\n%s", next.Usage.CacheReadInputTokens, prompt)
	}

	// stop_sequences, and an assistant prefill.
	words := byteIDs("The answer is 42, and then some.")
	sr.script.Store(&words)
	stopped, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "demo", MaxTokens: 100,
		StopSequences: []string{"nothing", ", and"}, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Q?"))}})
	if err != nil {
		t.Fatal(err)
	}
	if stopped.Content[0].Text != "The answer is 42" || stopped.StopReason != anthropic.StopReasonStopSequence || stopped.StopSequence != ", and" {
		t.Fatalf("stopped: %s", stopped.RawJSON())
	}
	cont, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "demo", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Q?")),
			anthropic.NewAssistantMessage(anthropic.NewTextBlock("The answer is"))}})
	if err != nil {
		t.Fatal(err)
	}
	if cont.Content[0].Text != " 42, and then some." || cont.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("prefill: %s", cont.RawJSON())
	}
}
