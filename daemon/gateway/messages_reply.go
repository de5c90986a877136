package gateway

import (
	"bufio"
	"encoding/json"
	"strings"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// The replies of the Messages API (messages.go): a message object, or its
// stream of events (message_start; per content block its start, deltas
// and stop; message_delta with the stop reason and usage; message_stop),
// and errors in Anthropic's shape.

type anthReply struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Role         string    `json:"role"`
	Content      []any     `json:"content"`
	Model        string    `json:"model"`
	StopReason   *string   `json:"stop_reason"`
	StopSequence *string   `json:"stop_sequence"`
	Usage        anthUsage `json:"usage"`
}

// anthUsage counts the prompt as Anthropic does: input_tokens are those
// computed, cache_read_input_tokens those reused from the KV cache.
type anthUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func anthUsageOf(u session.Usage) anthUsage {
	cached := min(u.CachedTokens, u.PromptTokens)
	return anthUsage{InputTokens: u.PromptTokens - cached, OutputTokens: u.CompletionTokens, CacheReadInputTokens: cached}
}

type anthTextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthThinking struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"` // none: pocketd signs nothing
}

type anthToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// anthError writes e as Anthropic's error object, with its status.
func anthError(ctx *fasthttp.RequestCtx, e *apiError) {
	daemon.WriteJSON(ctx, e.status, anthErrorBody(e))
}

func anthErrorBody(e *apiError) map[string]any {
	typ := "api_error"
	switch e.status {
	case fasthttp.StatusBadRequest, fasthttp.StatusMethodNotAllowed, fasthttp.StatusUnsupportedMediaType:
		typ = "invalid_request_error"
	case fasthttp.StatusUnauthorized:
		typ = "authentication_error"
	case fasthttp.StatusForbidden:
		typ = "permission_error"
	case fasthttp.StatusNotFound:
		typ = "not_found_error"
	case fasthttp.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case fasthttp.StatusTooManyRequests:
		typ = "rate_limit_error"
	case fasthttp.StatusServiceUnavailable:
		typ = "overloaded_error"
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": e.msg}}
}

// prepareMessages decodes and prepares a Messages request, or writes its
// error.
func (g *Gateway) prepareMessages(ctx *fasthttp.RequestCtx, counting bool) (*job, *prepared) {
	j, aerr := decodeMessages(ctx.PostBody(), string(ctx.Request.Header.Peek("X-Pocket-Session")), counting)
	if aerr != nil {
		anthError(ctx, aerr)
		return nil, nil
	}
	p, aerr := g.prepare(ctx, j, func(m *modelInfo, _ bool) ([]int32, *apiError) { return j.chatPrompt(m, "messages") })
	if aerr != nil {
		anthError(ctx, aerr)
		return nil, nil
	}
	return j, p
}

// serveCountTokens is POST /v1/messages/count_tokens: the prompt's tokens.
func (g *Gateway) serveCountTokens(ctx *fasthttp.RequestCtx) {
	if _, p := g.prepareMessages(ctx, true); p != nil {
		daemon.WriteJSON(ctx, fasthttp.StatusOK, map[string]int{"input_tokens": len(p.prompt)})
	}
}

func (g *Gateway) serveMessages(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	j, p := g.prepareMessages(ctx, false)
	if p == nil {
		return
	}
	id := newID("msg")
	if j.stream {
		g.streamMessages(ctx, j, p, id, start)
		return
	}
	res, err := p.run(g.srv.RequestContext(), g.timed(p.m.name, start, 0, nil))
	if err != nil {
		anthError(ctx, fromSession(err))
		return
	}
	reply := anthReply{ID: id, Type: "message", Role: "assistant", Content: []any{}, Model: p.m.name, Usage: anthUsageOf(res.Usage)}
	text, calls := res.Text, []anthToolUse(nil)
	if j.reasoning {
		var reasoning string
		if reasoning, text = splitReasoning(text, j.thinkInside); reasoning != "" {
			reply.Content = append(reply.Content, anthThinking{Type: "thinking", Thinking: reasoning})
		}
	}
	if j.tools {
		msg, _ := toolMessage(text, j, res.FinishReason)
		text = ""
		if msg.Content != nil {
			text = *msg.Content
		}
		for _, tc := range msg.ToolCalls {
			calls = append(calls, anthToolUse{Type: "tool_use", ID: toolUseID(), Name: tc.Function.Name,
				Input: anthInput(tc.Function.Arguments)})
		}
	}
	if text != "" || len(calls) == 0 && len(reply.Content) == 0 {
		reply.Content = append(reply.Content, anthTextBlock{Type: "text", Text: text})
	}
	for _, c := range calls {
		reply.Content = append(reply.Content, c)
	}
	reply.StopReason, reply.StopSequence = anthStop(res, len(calls) > 0)
	daemon.WriteJSON(ctx, fasthttp.StatusOK, reply)
}

// toolUseID is an Anthropic-style tool_use id.
func toolUseID() string { return "toolu_" + strings.TrimPrefix(newCallID(), "call_") }

// anthInput is a call's arguments (a JSON string from the tool-call
// parser) as the tool_use block's input object; anything else (a model's
// malformed arguments) is kept whole under "arguments".
func anthInput(args string) json.RawMessage {
	a := strings.TrimSpace(args)
	if strings.HasPrefix(a, "{") && json.Valid([]byte(a)) {
		return json.RawMessage(a)
	}
	out, _ := json.Marshal(map[string]string{"arguments": args})
	return out
}

// anthStop is a finished reply's stop_reason and stop_sequence: max_tokens
// at the length limit, tool_use when calls were made, stop_sequence when
// one of the request's stop strings ended it, else end_turn.
func anthStop(res session.GenerateResult, calls bool) (*string, *string) {
	reason := "end_turn"
	var seq *string
	switch {
	case res.FinishReason == "length":
		reason = "max_tokens"
	case calls:
		reason = "tool_use"
	case res.Stop != "":
		reason, seq = "stop_sequence", &res.Stop
	}
	return &reason, seq
}

// anthEvents writes a Messages stream's events.
type anthEvents struct {
	s *sse
	w *bufio.Writer
}

func (e anthEvents) send(typ string, fields map[string]any) error {
	fields["type"] = typ
	e.w.WriteString("event: " + typ + "\n")
	return e.s.event(fields)
}

// streamMessages replies with the Messages API's events. Without tools a
// text block's deltas follow the tokens; with them the reply's text and
// calls are released by the tool-call parser as they complete (a text
// block opened lazily, each call a tool_use block with its input in one
// input_json_delta).
func (g *Gateway) streamMessages(ctx *fasthttp.RequestCtx, j *job, p *prepared, id string, start time.Time) {
	gen, first, ok := g.startStreamErr(ctx, p, start, anthError)
	if gen == nil {
		return
	}
	log := g.srv.Logger()
	daemon.StreamBody(ctx, log, func(w *bufio.Writer) {
		defer gen.cancel()
		ev := anthEvents{s: newSSE(w), w: w}
		gone := func() {
			gen.cancel()
			<-gen.done
			log.Debug("client went away during a messages stream", "id", id, "generated", len(gen.res.IDs))
		}
		head := anthReply{ID: id, Type: "message", Role: "assistant", Content: []any{}, Model: p.m.name,
			Usage: anthUsage{InputTokens: len(p.prompt)}}
		if ev.send("message_start", map[string]any{"message": head}) != nil || ev.send("ping", map[string]any{}) != nil {
			gone()
			return
		}
		b := anthBlocks{ev: ev}
		rs, parser := j.replyParsers()
		calls := 0
		// content passes a reply's content on: through the tool-call
		// parser where there are tools.
		var release func(pieces []toolPiece) error
		content := func(text string) error {
			if parser != nil {
				return release(parser.feed(text))
			}
			if text == "" {
				return nil
			}
			return b.text(text)
		}
		// split passes a piece of the reply on: its reasoning to a
		// thinking block, its content on.
		split := func(text string, end bool) error {
			if rs == nil {
				return content(text)
			}
			var r, c string
			if end {
				r, c = rs.flush()
			} else {
				r, c = rs.feed(text)
			}
			if r != "" {
				if err := b.thinking(r); err != nil {
					return err
				}
			}
			return content(c)
		}
		release = func(pieces []toolPiece) error {
			for _, pc := range pieces {
				var err error
				if pc.call == nil {
					err = b.text(pc.text)
				} else {
					calls++
					err = b.toolUse(anthToolUse{Type: "tool_use", ID: toolUseID(), Name: pc.call.Name,
						Input: json.RawMessage("{}")}, pc.call.Arguments)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
		for tok, more := first, ok; more; tok, more = gen.next() {
			if split(tok.Text, false) != nil {
				gone()
				return
			}
		}
		if gen.err != nil {
			e := fromSession(gen.err)
			w.WriteString("event: error\n")
			ev.s.event(anthErrorBody(e))
			return
		}
		if rs != nil && split("", true) != nil || parser != nil && release(parser.flush()) != nil {
			gone()
			return
		}
		if b.index == 0 && b.text("") != nil { // a reply of nothing is one empty text block
			gone()
			return
		}
		if b.close() != nil {
			gone()
			return
		}
		reason, seq := anthStop(gen.res, calls > 0)
		u := anthUsageOf(gen.res.Usage)
		if ev.send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
			"usage": map[string]int{"output_tokens": u.OutputTokens, "input_tokens": u.InputTokens,
				"cache_read_input_tokens": u.CacheReadInputTokens}}) != nil {
			gone()
			return
		}
		ev.send("message_stop", map[string]any{})
	})
}

// anthBlocks numbers a stream's content blocks and keeps the open text or
// thinking block's state.
type anthBlocks struct {
	ev    anthEvents
	index int    // the next block's (0: none sent yet)
	open  string // the type of the block open (index-1): "text", "thinking" or none
}

func (b *anthBlocks) text(s string) error {
	return b.delta("text", s, anthTextBlock{Type: "text"}, map[string]string{"type": "text_delta", "text": s})
}

func (b *anthBlocks) thinking(s string) error {
	return b.delta("thinking", s, anthThinking{Type: "thinking"}, map[string]string{"type": "thinking_delta", "thinking": s})
}

// delta sends s as a delta of the open block of type typ, opening it
// (start) after closing another.
func (b *anthBlocks) delta(typ, s string, start any, delta map[string]string) error {
	if b.open != typ {
		if err := b.close(); err != nil {
			return err
		}
		if err := b.ev.send("content_block_start", map[string]any{"index": b.index, "content_block": start}); err != nil {
			return err
		}
		b.open = typ
		b.index++
	}
	if s == "" {
		return nil
	}
	return b.ev.send("content_block_delta", map[string]any{"index": b.index - 1, "delta": delta})
}

// close stops an open text or thinking block.
func (b *anthBlocks) close() error {
	if b.open == "" {
		return nil
	}
	b.open = ""
	return b.ev.send("content_block_stop", map[string]any{"index": b.index - 1})
}

func (b *anthBlocks) toolUse(t anthToolUse, args string) error {
	if err := b.close(); err != nil {
		return err
	}
	i := b.index
	b.index++
	input := string(anthInput(args))
	if err := b.ev.send("content_block_start", map[string]any{"index": i, "content_block": t}); err != nil {
		return err
	}
	if err := b.ev.send("content_block_delta", map[string]any{"index": i, "delta": map[string]string{"type": "input_json_delta", "partial_json": input}}); err != nil {
		return err
	}
	return b.ev.send("content_block_stop", map[string]any{"index": i})
}
