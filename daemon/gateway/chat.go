package gateway

import (
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// POST /v1/chat/completions.

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatOut       `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type chatOut struct {
	Role             string       `json:"role"`
	Content          *string      `json:"content"`
	ReasoningContent *string      `json:"reasoning_content,omitempty"`
	Refusal          *string      `json:"refusal"`
	ToolCalls        []toolCallJS `json:"tool_calls,omitempty"`
}

type chatLogprobs struct {
	Content []tokenLogprob `json:"content"`
	Refusal []tokenLogprob `json:"refusal"`
}

type tokenLogprob struct {
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []topLogprobJS `json:"top_logprobs"`
}

type topLogprobJS struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chunkChoice struct {
	Index        int           `json:"index"`
	Delta        chunkDelta    `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chunkDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

func byteInts(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

func (m *modelInfo) chatLogprob(ev session.TokenEvent) tokenLogprob {
	t := m.tokenText(ev.ID)
	lp := tokenLogprob{Token: t, Logprob: finiteLogprob(ev.Logprob), Bytes: byteInts(t), TopLogprobs: []topLogprobJS{}}
	for _, a := range ev.Top {
		lp.TopLogprobs = append(lp.TopLogprobs, topLogprobJS{Token: a.Text, Logprob: finiteLogprob(a.Logprob), Bytes: byteInts(a.Text)})
	}
	return lp
}

// chatPrompt renders j's messages with m's chat template and encodes
// them, with the tools (j.kwargs) and, for a forced call, its opening
// (j.toolPrefix); param names the field a template error blames.
func (j *job) chatPrompt(m *modelInfo, param string) ([]int32, *apiError) {
	if m.tok == nil || !m.tok.HasChatTemplate() {
		return nil, badParam("model", "model %s has no chat template: use /v1/completions", m.name)
	}
	text, err := m.tok.ApplyChatTemplate(j.messages, true, j.kwargs)
	if err != nil {
		return nil, badParam(param, "%s: %v", param, err)
	}
	if j.tools {
		j.toolFmt = toolFormatFor(m.tok.ChatTemplate())
	}
	if j.toolForce {
		// The reply starts with the call's opening, which the model
		// continues: how tool_choice "required" or a named function is
		// kept without constrained decoding.
		if !j.toolFmt.canForce(m.tok.ChatTemplate()) {
			return nil, badParam("tool_choice", "tool_choice: model %s's chat template does not write calls as %s blocks, so pocketd cannot force one; use \"auto\"", m.name, j.toolFmt.open)
		}
		j.toolPrefix = j.toolFmt.prefix(j.toolName)
		text += j.toolPrefix
	}
	text += j.prefill
	// A reply constrained to JSON has no reasoning block to split.
	if !j.rawReasoning && !j.params.JSON && j.params.Schema == nil && templateThinks(m.tok.ChatTemplate()) {
		j.reasoning, j.thinkInside = true, promptOpensThink(text)
	}
	return m.tok.Encode(text), nil
}

func (g *Gateway) serveChat(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	j, aerr := decodeChat(ctx.PostBody(), string(ctx.Request.Header.Peek("X-Pocket-Session")))
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	p, aerr := g.prepare(ctx, j, func(m *modelInfo, _ bool) ([]int32, *apiError) { return j.chatPrompt(m, "messages") })
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	id, created := newID("chatcmpl"), time.Now()
	if j.stream {
		g.streamChat(ctx, j, p, id, created, start)
		return
	}
	choices := make([]chatChoice, 0, j.n)
	usages := make([]session.Usage, 0, j.n)
	for i := range j.n {
		var lps *chatLogprobs
		var onToken func(session.TokenEvent) error
		if j.params.Logprobs {
			lps = &chatLogprobs{Content: []tokenLogprob{}}
			onToken = func(ev session.TokenEvent) error {
				lps.Content = append(lps.Content, p.m.chatLogprob(ev))
				return nil
			}
		}
		res, err := p.choice(i)(g.srv.RequestContext(), g.timed(p.m.name, start, i, onToken))
		if err != nil {
			writeError(ctx, fromSession(err))
			return
		}
		text, reasoning := res.Text, ""
		if j.reasoning {
			reasoning, text = splitReasoning(text, j.thinkInside)
		}
		msg, reason := chatOut{Role: "assistant", Content: &text}, res.FinishReason
		if j.tools {
			msg, reason = toolMessage(text, j, reason)
		}
		if reasoning != "" {
			msg.ReasoningContent = &reasoning
		}
		choices = append(choices, chatChoice{Index: i, Message: msg, Logprobs: lps, FinishReason: reason})
		usages = append(usages, res.Usage)
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, completionObject[chatChoice]{
		ID: id, Object: "chat.completion", Created: created.Unix(), Model: p.m.name, SystemFingerprint: fingerprint,
		Choices: choices, Usage: usageOf(choicesUsage(usages)),
	})
}

// streamChat replies with chat.completion.chunk events.
func (g *Gateway) streamChat(ctx *fasthttp.RequestCtx, j *job, p *prepared, id string, created time.Time, start time.Time) {
	streamChunks(g, ctx, p, start, j.n, func(i int) chunkStream[chunkChoice] {
		empty := ""
		cs := chunkStream[chunkChoice]{
			route: "chat", id: id, object: "chat.completion.chunk", created: created,
			opening:  &chunkChoice{Index: i, Delta: chunkDelta{Role: "assistant", Content: &empty}},
			textOpen: `"delta":{"content":`, textClose: `},"logprobs":null,"finish_reason":null}]}`,
			closing: func(reason *string) chunkChoice {
				return chunkChoice{Index: i, Delta: chunkDelta{}, FinishReason: reason}
			},
			includeUsage: j.includeUsage,
		}
		if j.params.Logprobs {
			cs.scored = func(ev session.TokenEvent) chunkChoice {
				text := ev.Text
				return chunkChoice{Index: i, Delta: chunkDelta{Content: &text},
					Logprobs: &chatLogprobs{Content: []tokenLogprob{p.m.chatLogprob(ev)}}}
			}
		}
		var ts *toolStream
		if j.tools {
			ts = newToolStream(p.m, j, i)
			cs.filter, cs.end = ts.token, ts.end
		}
		if j.reasoning {
			reasonChunks(&cs, newReasonSplit(j.thinkInside), i, j.params.Logprobs, p.m, ts)
		}
		return cs
	})
}
