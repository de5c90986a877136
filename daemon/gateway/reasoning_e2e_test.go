package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestReasoningSplit: a thinking model's <think> block (Qwen3's template)
// comes back as reasoning_content on the chat route, plain and streamed,
// with tool calls parsed from what follows; "reasoning_format": "none"
// keeps it in the content; the Messages API returns it as a thinking
// block and the Responses API as a reasoning item, plain and streamed.
func TestReasoningSplit(t *testing.T) {
	d, sr := startScripted(t)
	defer d.stop(t)
	ctx := context.Background()
	oc := goClient(d)
	reply := byteIDs("<think>\nThe user says hi.\n</think>\n\nHello there!")
	sr.script.Store(&reply)
	params := openai.ChatCompletionNewParams{Model: "demo", MaxCompletionTokens: openai.Int(200),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}}
	reasoningOf := func(raw string) string {
		var v struct {
			Choices []struct {
				Message struct {
					ReasoningContent string `json:"reasoning_content"`
				} `json:"message"`
				Delta struct {
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		json.Unmarshal([]byte(raw), &v)
		if len(v.Choices) == 0 {
			return ""
		}
		return v.Choices[0].Message.ReasoningContent + v.Choices[0].Delta.ReasoningContent
	}
	res, err := oc.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != "Hello there!" || reasoningOf(res.RawJSON()) != "The user says hi." {
		t.Fatalf("plain: %s", res.RawJSON())
	}
	stream := oc.Chat.Completions.NewStreaming(ctx, params)
	var content, reasoning strings.Builder
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) > 0 {
			content.WriteString(ch.Choices[0].Delta.Content)
		}
		reasoning.WriteString(reasoningOf(ch.RawJSON()))
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if content.String() != "Hello there!" || reasoning.String() != "The user says hi." {
		t.Fatalf("streamed: content %q, reasoning %q", content.String(), reasoning.String())
	}
	raw, err := oc.Chat.Completions.New(ctx, params, option.WithJSONSet("reasoning_format", "none"))
	if err != nil {
		t.Fatal(err)
	}
	if raw.Choices[0].Message.Content != string(bytesOf(reply)) || reasoningOf(raw.RawJSON()) != "" {
		t.Fatalf("reasoning_format none: %s", raw.RawJSON())
	}

	// Reasoning, then a call.
	call := byteIDs("<think>\nI need the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
	sr.script.Store(&call)
	tp := params
	tp.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})}
	res, err = oc.Chat.Completions.New(ctx, tp)
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Choices[0].Message; len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || m.Content != "" ||
		reasoningOf(res.RawJSON()) != "I need the weather." || res.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("reasoning and a call: %s", res.RawJSON())
	}
	stream = oc.Chat.Completions.NewStreaming(ctx, tp)
	reasoning.Reset()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		reasoning.WriteString(reasoningOf(ch.RawJSON()))
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || len(acc.Choices[0].Message.ToolCalls) != 1 || reasoning.String() != "I need the weather." {
		t.Fatalf("streamed reasoning and a call: %+v, reasoning %q", acc.Choices, reasoning.String())
	}

	// The Responses API: a reasoning item before the message. (Other
	// questions: the scripted runner must compute the prompt's end.)
	sr.script.Store(&reply)
	for k, ask := range []string{"Hi, responses", "Hi, responses streamed"} {
		rp := responses.ResponseNewParams{Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(ask)},
			MaxOutputTokens: openai.Int(200), Include: []responses.ResponseIncludable{"message.output_text.logprobs"}}
		var out *responses.Response
		var deltas, reasoningDeltas strings.Builder
		if k == 0 {
			if out, err = oc.Responses.New(ctx, rp); err != nil {
				t.Fatal(err)
			}
		} else {
			st := oc.Responses.NewStreaming(ctx, rp)
			for st.Next() {
				switch ev := st.Current(); ev.Type {
				case "response.reasoning_text.delta":
					reasoningDeltas.WriteString(ev.Delta)
				case "response.output_text.delta":
					deltas.WriteString(ev.Delta)
				case "response.completed":
					r := ev.Response
					out = &r
				}
			}
			if err := st.Err(); err != nil || out == nil {
				t.Fatalf("responses stream: %v", err)
			}
			if reasoningDeltas.String() != "The user says hi." || deltas.String() != "Hello there!" {
				t.Fatalf("responses stream deltas: reasoning %q, text %q", reasoningDeltas.String(), deltas.String())
			}
		}
		if len(out.Output) != 2 || out.Output[0].Type != "reasoning" || len(out.Output[0].Content) != 1 ||
			out.Output[0].Content[0].Text != "The user says hi." || out.OutputText() != "Hello there!" {
			t.Fatalf("responses %d: %s", k, out.RawJSON())
		}
		var text strings.Builder
		for _, lp := range out.Output[1].Content[0].Logprobs {
			text.WriteString(lp.Token)
		}
		if text.String() != "Hello there!" {
			t.Fatalf("responses %d: the message's logprobs are of %q", k, text.String())
		}
	}

	// reasoning.effort "minimal" turns Qwen3's thinking off: its template
	// then closes an empty block in the prompt.
	if _, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: "demo", MaxOutputTokens: openai.Int(8),
		Input:     responses.ResponseNewParamsInputUnion{OfString: openai.String("Quick, no thinking")},
		Reasoning: openai.ReasoningParam{Effort: openai.ReasoningEffortMinimal}}); err != nil {
		t.Fatal(err)
	}
	if prompt := string(bytesOf(sr.hist)); !strings.Contains(prompt, "Quick, no thinking") || !strings.Contains(prompt, "<think>\n\n</think>") {
		t.Fatalf("reasoning effort minimal: the prompt\n%s", prompt)
	}

	// With tools the items come whole at the stream's end: the reasoning
	// item, then the call.
	sr.script.Store(&call)
	rt := responses.ResponseNewParams{Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather, responses?")},
		MaxOutputTokens: openai.Int(200), Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, Strict: openai.Bool(false)}}}}
	st := oc.Responses.NewStreaming(ctx, rt)
	var done *responses.Response
	var kinds []string
	for st.Next() {
		ev := st.Current()
		kinds = append(kinds, ev.Type)
		if ev.Type == "response.completed" {
			r := ev.Response
			done = &r
		}
	}
	if err := st.Err(); err != nil || done == nil || len(done.Output) != 2 || done.Output[0].Type != "reasoning" ||
		done.Output[0].Content[0].Text != "I need the weather." || done.Output[1].Type != "function_call" {
		t.Fatalf("responses with tools, streamed: %v %v", err, kinds)
	}

	// The Messages API: a thinking block. (Another question: the scripted
	// runner must compute the prompt's end, not find it all cached.)
	sr.script.Store(&reply)
	ac := anthClient(d)
	mp := anthropic.MessageNewParams{Model: "demo", MaxTokens: 200, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi again"))}}
	msg, err := ac.Messages.New(ctx, mp)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != "The user says hi." ||
		msg.Content[1].Text != "Hello there!" {
		t.Fatalf("messages: %s", msg.RawJSON())
	}
	am, _ := accumulate(t, ac.Messages.NewStreaming(ctx, mp))
	if len(am.Content) != 2 || am.Content[0].Thinking != "The user says hi." || am.Content[1].Text != "Hello there!" {
		t.Fatalf("streamed messages: %+v", am.Content)
	}
}
