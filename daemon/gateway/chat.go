package gateway

import (
	"bufio"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// POST /v1/chat/completions.

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             *usage       `json:"usage"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatOut       `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type chatOut struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
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

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int           `json:"index"`
	Delta        chunkDelta    `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
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

func (g *Gateway) serveChat(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	j, aerr := decodeChat(ctx.PostBody(), string(ctx.Request.Header.Peek("X-Pocket-Session")))
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	p, aerr := g.prepare(ctx, j, func(m *modelInfo) ([]int32, *apiError) {
		if m.tok == nil || !m.tok.HasChatTemplate() {
			return nil, badParam("model", "model %s has no chat template: use /v1/completions", m.name)
		}
		text, err := m.tok.ApplyChatTemplate(j.messages, true, j.kwargs)
		if err != nil {
			return nil, badParam("messages", "messages: %v", err)
		}
		return m.tok.Encode(text), nil
	})
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	id, created := newID("chatcmpl"), time.Now()
	if j.stream {
		g.streamChat(ctx, j, p, id, created, start)
		return
	}
	var lps *chatLogprobs
	var onToken func(session.TokenEvent) error
	if j.params.Logprobs {
		lps = &chatLogprobs{Content: []tokenLogprob{}}
		onToken = func(ev session.TokenEvent) error {
			lps.Content = append(lps.Content, p.m.chatLogprob(ev))
			return nil
		}
	}
	res, err := p.run(g.srv.RequestContext(), g.timed(p.m.name, start, onToken))
	if err != nil {
		writeError(ctx, fromSession(err))
		return
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, chatCompletion{
		ID: id, Object: "chat.completion", Created: created.Unix(), Model: p.m.name, SystemFingerprint: fingerprint,
		Choices: []chatChoice{{Message: chatOut{Role: "assistant", Content: res.Text}, Logprobs: lps, FinishReason: res.FinishReason}},
		Usage:   usageOf(res.Usage),
	})
}

// streamChat replies with chat.completion.chunk events. An error before
// the first token gets a plain error reply with its status.
func (g *Gateway) streamChat(ctx *fasthttp.RequestCtx, j *job, p *prepared, id string, created time.Time, start time.Time) {
	gen := g.start(p, start)
	first, ok := gen.next()
	if !ok && gen.err != nil {
		gen.cancel()
		writeError(ctx, fromSession(gen.err))
		return
	}
	sseHeaders(ctx)
	prefix := chunkPrefix(id, "chat.completion.chunk", p.m.name, created)
	chunk := func(c chunkChoice) chatChunk {
		return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created.Unix(), Model: p.m.name,
			SystemFingerprint: fingerprint, Choices: []chunkChoice{c}}
	}
	log := g.srv.Logger()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer gen.cancel()
		s := newSSE(w)
		empty := ""
		if s.event(chunk(chunkChoice{Delta: chunkDelta{Role: "assistant", Content: &empty}})) != nil {
			return
		}
		var buf []byte
		for ev, more := first, ok; more; ev, more = gen.next() {
			var err error
			switch {
			case j.params.Logprobs:
				text := ev.Text
				err = s.event(chunk(chunkChoice{Delta: chunkDelta{Content: &text},
					Logprobs: &chatLogprobs{Content: []tokenLogprob{p.m.chatLogprob(ev)}}}))
			case ev.Text != "":
				buf = append(append(buf[:0], prefix...), `"delta":{"content":`...)
				buf = appendJSONString(buf, ev.Text)
				buf = append(buf, `},"logprobs":null,"finish_reason":null}]}`...)
				err = s.raw(buf)
			}
			if err != nil {
				gen.cancel() // the client is gone: stop at the next token
				<-gen.done
				log.Debug("client went away during a chat stream", "id", id, "generated", len(gen.res.IDs))
				return
			}
		}
		if gen.err != nil {
			s.fail(fromSession(gen.err))
			return
		}
		reason := gen.res.FinishReason
		if s.event(chunk(chunkChoice{Delta: chunkDelta{}, FinishReason: &reason})) != nil {
			return
		}
		if j.includeUsage {
			c := chunk(chunkChoice{})
			c.Choices = []chunkChoice{}
			c.Usage = usageOf(gen.res.Usage)
			if s.event(c) != nil {
				return
			}
		}
		s.done()
	})
}
