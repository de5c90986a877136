package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
)

// End to end with the official Go client, github.com/openai/openai-go.

func goClient(d *testDaemon, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(d.base + "/v1/"),
		option.WithAPIKey("unused"), option.WithMaxRetries(0), option.WithRequestTimeout(60 * time.Second)}, opts...)...)
}

func TestOpenAIGoChat(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:       "demo",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Say hello.")},
		MaxTokens:   openai.Int(12),
		Temperature: openai.Float(0),
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(3),
	}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 1 || res.Object != "chat.completion" || res.Model != "demo" || !strings.HasPrefix(res.ID, "chatcmpl-") {
		t.Fatalf("response %+v", res)
	}
	ch := res.Choices[0]
	if ch.Message.Role != "assistant" || ch.FinishReason != "length" && ch.FinishReason != "stop" {
		t.Fatalf("choice %+v", ch)
	}
	u := res.Usage
	if u.CompletionTokens < 1 || u.CompletionTokens > 12 || u.PromptTokens < 10 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage %+v", u)
	}
	if n := len(ch.Logprobs.Content); int64(n) != u.CompletionTokens {
		t.Fatalf("%d logprobs for %d tokens", n, u.CompletionTokens)
	}
	for _, lp := range ch.Logprobs.Content {
		if lp.Logprob > 0 || len(lp.TopLogprobs) != 3 || lp.TopLogprobs[0].Logprob < lp.TopLogprobs[2].Logprob {
			t.Fatalf("logprob %+v", lp)
		}
		// Greedy: the sampled token is the most likely one.
		if lp.Logprob != lp.TopLogprobs[0].Logprob {
			t.Fatalf("greedy token %q (%v) is not the top one %+v", lp.Token, lp.Logprob, lp.TopLogprobs[0])
		}
	}

	// The same request streamed gives the same text (greedy), usage last.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	params.Logprobs, params.TopLogprobs = param.Opt[bool]{}, param.Opt[int64]{}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != ch.Message.Content {
		t.Fatalf("streamed %q, plain %q", got, ch.Message.Content)
	}
	if acc.Choices[0].FinishReason != ch.FinishReason || acc.Usage.CompletionTokens != u.CompletionTokens || acc.Usage.PromptTokens != u.PromptTokens {
		t.Fatalf("streamed finish %q usage %+v; plain %q %+v", acc.Choices[0].FinishReason, acc.Usage, ch.FinishReason, u)
	}
	if chunks < 3 {
		t.Fatalf("only %d chunks", chunks)
	}
}

func TestOpenAIGoStop(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	// Greedy decoding of the demo model settles into a loop: find text it
	// produces, then stop on it.
	base := openai.ChatCompletionNewParams{Model: "demo", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story.")},
		MaxTokens: openai.Int(40), Temperature: openai.Float(0)}
	full, err := c.Chat.Completions.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	text := full.Choices[0].Message.Content
	if len(text) < 10 {
		t.Skipf("greedy reply %q too short to pick a stop string from", text)
	}
	stop := text[6:9]
	cut := strings.Index(text, stop)
	for _, s := range []openai.ChatCompletionNewParamsStopUnion{{OfString: openai.String(stop)}, {OfStringArray: []string{"\x00never", stop}}} {
		p := base
		p.Stop = s
		res, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Choices[0]; got.Message.Content != text[:cut] || got.FinishReason != "stop" {
			t.Fatalf("stop %q: got %q (%s), want %q (stop)", stop, got.Message.Content, got.FinishReason, text[:cut])
		}
		// Streamed, the stop string is held back and never sent.
		stream := c.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0]; got.Message.Content != text[:cut] || got.FinishReason != "stop" {
			t.Fatalf("streamed stop %q: got %q (%s), want %q", stop, got.Message.Content, got.FinishReason, text[:cut])
		}
	}
}

func TestOpenAIGoCompletionEcho(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	prompt := "The quick brown fox"
	res, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "demo", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(5), Echo: openai.Bool(true), Logprobs: openai.Int(2), Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := res.Choices[0]
	if !strings.HasPrefix(ch.Text, prompt) || res.Usage.CompletionTokens != 5 {
		t.Fatalf("text %q usage %+v", ch.Text, res.Usage)
	}
	// Byte-level demo tokenizer: one token per prompt byte, then 5 new.
	lp := ch.Logprobs
	if n := len(lp.Tokens); n != len(prompt)+5 || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("logprobs lengths %d %d %d %d", len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(lp.TextOffset))
	}
	if strings.Join(lp.Tokens, "") != ch.Text {
		t.Fatalf("tokens %q do not spell %q", lp.Tokens, ch.Text)
	}
	for i := 1; i < len(lp.TokenLogprobs); i++ {
		if lp.TokenLogprobs[i] >= 0 || lp.TextOffset[i] != lp.TextOffset[i-1]+int64(len(lp.Tokens[i-1])) {
			t.Fatalf("token %d: logprob %v offset %d", i, lp.TokenLogprobs[i], lp.TextOffset[i])
		}
	}

	// Token ids as the prompt.
	res, err = c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "demo", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{72, 105, 33}}, MaxTokens: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.PromptTokens != 3 || res.Usage.CompletionTokens < 1 {
		t.Fatalf("usage %+v", res.Usage)
	}
}

// TestOpenAIGoChoices: n > 1 gives n choices, indexed, generated from one
// prompt (counted once in the usage, found in the prefix cache after the
// first); with a seed each choice is reproducible and streamed choices
// equal the plain ones.
func TestOpenAIGoChoices(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:     "demo",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Name three colours.")},
		MaxTokens: openai.Int(8), Temperature: openai.Float(1), Seed: openai.Int(7), N: openai.Int(3),
		Logprobs: openai.Bool(true),
	}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(res.Choices))
	}
	var texts []string
	var tokens int64
	for i, ch := range res.Choices {
		if ch.Index != int64(i) || ch.Message.Role != "assistant" || ch.FinishReason == "" {
			t.Fatalf("choice %d: %+v", i, ch)
		}
		texts = append(texts, ch.Message.Content)
		tokens += int64(len(ch.Logprobs.Content))
	}
	if texts[0] == texts[1] && texts[1] == texts[2] {
		t.Errorf("three sampled choices with seeds 7, 8, 9 are all %q", texts[0])
	}
	u := res.Usage
	if u.CompletionTokens != tokens || u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.PromptTokens < 5 || u.PromptTokens > 40 {
		t.Fatalf("usage %+v for %d generated tokens", u, tokens)
	}

	// The same request streamed: chunks of each choice under its index,
	// the same texts (the seeds), one usage chunk for all.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	got := make([]string, 3)
	finished := 0
	var su openai.CompletionUsage
	for stream.Next() {
		ch := stream.Current()
		if ch.Usage.TotalTokens > 0 {
			su = ch.Usage
		}
		for _, cc := range ch.Choices {
			if cc.Index < 0 || cc.Index >= 3 {
				t.Fatalf("chunk for choice %d", cc.Index)
			}
			got[cc.Index] += cc.Delta.Content
			if cc.FinishReason != "" {
				finished++
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != texts[i] {
			t.Errorf("streamed choice %d %q, plain %q", i, got[i], texts[i])
		}
	}
	if finished != 3 || su.CompletionTokens != u.CompletionTokens || su.PromptTokens != u.PromptTokens {
		t.Errorf("%d finish reasons, stream usage %+v, plain %+v", finished, su, u)
	}

	// Completions: every choice echoes the prompt.
	cres, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model: "demo", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once")},
		MaxTokens: openai.Int(4), Echo: openai.Bool(true), N: openai.Int(2), Seed: openai.Int(1), Logprobs: openai.Int(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cres.Choices) != 2 {
		t.Fatalf("%d completion choices", len(cres.Choices))
	}
	for i, ch := range cres.Choices {
		if ch.Index != int64(i) || !strings.HasPrefix(ch.Text, "Once") || strings.Join(ch.Logprobs.Tokens, "") != ch.Text {
			t.Fatalf("completion choice %d: %+v", i, ch)
		}
	}
}

func TestOpenAIGoErrors(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
	for _, tc := range []struct {
		name   string
		p      openai.ChatCompletionNewParams
		status int
		param  string
		code   string
	}{
		{"unknown model", openai.ChatCompletionNewParams{Model: "gpt-9", Messages: msgs}, 404, "model", "model_not_found"},
		{"n=17", openai.ChatCompletionNewParams{Model: "demo", Messages: msgs, N: openai.Int(17)}, 400, "n", ""},
		{"over context", openai.ChatCompletionNewParams{Model: "demo", Messages: msgs, MaxTokens: openai.Int(1 << 20)}, 400, "max_tokens", "context_length_exceeded"},
		{"temperature", openai.ChatCompletionNewParams{Model: "demo", Messages: msgs, Temperature: openai.Float(-1)}, 400, "temperature", ""},
		{"top_logprobs", openai.ChatCompletionNewParams{Model: "demo", Messages: msgs, Logprobs: openai.Bool(true), TopLogprobs: openai.Int(99)}, 400, "top_logprobs", ""},
	} {
		_, err := c.Chat.Completions.New(ctx, tc.p)
		var ae *openai.Error
		if !errors.As(err, &ae) {
			t.Fatalf("%s: error %v is not an *openai.Error", tc.name, err)
		}
		if ae.StatusCode != tc.status || ae.Param != tc.param || ae.Code != tc.code || ae.Message == "" {
			t.Errorf("%s: status %d param %q code %q message %q; want %d %q %q", tc.name, ae.StatusCode, ae.Param, ae.Code, ae.Message, tc.status, tc.param, tc.code)
		}
	}
	// A stream that fails before its first token gets a real status too.
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "nope", Messages: msgs})
	for stream.Next() {
	}
	var ae *openai.Error
	if !errors.As(stream.Err(), &ae) || ae.StatusCode != 404 {
		t.Fatalf("stream error %v, want a 404 *openai.Error", stream.Err())
	}

	models, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "demo" {
		t.Fatalf("models %+v", models.Data)
	}
	m, err := c.Models.Get(ctx, "demo")
	if err != nil || m.ID != "demo" {
		t.Fatalf("model %+v, %v", m, err)
	}
}
