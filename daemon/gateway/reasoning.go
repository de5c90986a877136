package gateway

import (
	"github.com/pocketllm/pocketllm/internal/textutil"
	"strings"
	"unicode"

	"github.com/pocketllm/pocketllm/session"
)

// Reasoning: a thinking model (a chat template that writes <think> blocks:
// Qwen3, DeepSeek-R1, GLM-4.5, MiniMax-M2) opens its reply with its
// reasoning between <think> and </think>. The chat route returns that as
// the message's reasoning_content (DeepSeek's and vLLM's field, which
// chat UIs show apart) and the rest as content, where tool calls are
// parsed; the Messages API returns it as a thinking block. A template
// that opens the block in the prompt (the reply starts inside it) is
// followed too. "reasoning_format": "none" keeps the reply whole.

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// templateThinks reports whether a chat template writes reasoning blocks.
func templateThinks(template string) bool { return strings.Contains(template, thinkOpen) }

// promptOpensThink reports whether a rendered prompt ends inside a
// reasoning block (the template opened it for the reply).
func promptOpensThink(prompt string) bool {
	return strings.HasSuffix(strings.TrimRightFunc(prompt, unicode.IsSpace), thinkOpen)
}

// reasonSplit separates a reply's reasoning from its content as the text
// arrives: feed returns what each part gained (the reasoning without the
// tags and the whitespace around it, the content without the whitespace
// that follows </think>), holding back what a later piece may still make
// a tag; flush releases the rest at the end.
type reasonSplit struct {
	state   int
	buf     string
	started bool // some reasoning was released (leading whitespace is gone)
}

const (
	rsStart   = iota // before the reply's first visible text
	rsThink          // inside the reasoning
	rsAfter          // after </think>, before the content's first visible text
	rsContent        // the content
)

func newReasonSplit(inside bool) *reasonSplit {
	if inside {
		return &reasonSplit{state: rsThink}
	}
	return &reasonSplit{}
}

func (r *reasonSplit) feed(s string) (reasoning, content string) {
	r.buf += s
	for {
		switch r.state {
		case rsStart:
			t := strings.TrimLeftFunc(r.buf, unicode.IsSpace)
			switch {
			case strings.HasPrefix(t, thinkOpen):
				r.state, r.buf = rsThink, t[len(thinkOpen):]
				continue
			case strings.HasPrefix(thinkOpen, t): // "" or a start of the tag: wait
				return "", ""
			}
			r.state = rsContent
			content, r.buf = r.buf, ""
			return "", content
		case rsThink:
			if i := strings.Index(r.buf, thinkClose); i >= 0 {
				reasoning = r.release(strings.TrimRightFunc(r.buf[:i], unicode.IsSpace))
				r.state, r.buf = rsAfter, r.buf[i+len(thinkClose):]
				_, content = r.feed("")
				return reasoning, content
			}
			// Hold a possible start of </think>, and trailing whitespace
			// (it may precede the tag).
			cut := len(r.buf) - textutil.HeldPrefix(r.buf, thinkClose)
			cut = len(strings.TrimRightFunc(r.buf[:cut], unicode.IsSpace))
			reasoning, r.buf = r.release(r.buf[:cut]), r.buf[cut:]
			return reasoning, ""
		case rsAfter:
			t := strings.TrimLeftFunc(r.buf, unicode.IsSpace)
			if t == "" {
				r.buf = ""
				return "", ""
			}
			r.state, r.buf = rsContent, ""
			return "", t
		default:
			content, r.buf = r.buf, ""
			return "", content
		}
	}
}

// thinking reports whether the reply is inside its reasoning or the
// whitespace after it: a token that leaves it so wrote no content.
func (r *reasonSplit) thinking() bool { return r.state == rsThink || r.state == rsAfter }

// release is reasoning text s, without its leading whitespace when it is
// the first released.
func (r *reasonSplit) release(s string) string {
	if !r.started {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		r.started = s != ""
	}
	return s
}

// flush ends the reply: a reasoning block never closed (the reply ran out
// of tokens) keeps what it held; held text before any reasoning is content.
func (r *reasonSplit) flush() (reasoning, content string) {
	b := r.buf
	r.buf = ""
	switch r.state {
	case rsThink:
		return r.release(strings.TrimRightFunc(b, unicode.IsSpace)), ""
	case rsStart, rsContent:
		return "", b
	}
	return "", ""
}

// replyParsers are the parsers a reply of j goes through, nil where it
// needs none: the reasoning split (a thinking template), then the
// tool-call parser (tools; primed with a forced call's opening, which
// releases nothing).
func (j *job) replyParsers() (*reasonSplit, *toolParser) {
	var rs *reasonSplit
	if j.reasoning {
		rs = newReasonSplit(j.thinkInside)
	}
	var p *toolParser
	if j.tools {
		p = &toolParser{f: j.toolFmt, types: j.toolTypes}
		p.feed(j.toolPrefix)
	}
	return rs, p
}

// splitReasoning splits a whole reply.
func splitReasoning(text string, inside bool) (reasoning, content string) {
	r := newReasonSplit(inside)
	a, b := r.feed(text)
	c, d := r.flush()
	return a + c, b + d
}

// reasonChunks makes a chat stream (choice i) send a reply's reasoning as
// reasoning_content deltas and its content as before: through ts, the
// tool-call filter, where the request has tools, else as content deltas.
// A token's logprobs go with the first chunk sent at or after it.
func reasonChunks(cs *chunkStream[chunkChoice], rs *reasonSplit, i int, logprobs bool, m *modelInfo, ts *toolStream) {
	var pending []tokenLogprob
	emit := func(reasoning, content string) []chunkChoice {
		var out []chunkChoice
		if reasoning != "" {
			out = append(out, chunkChoice{Index: i, Delta: chunkDelta{ReasoningContent: &reasoning}})
		}
		switch {
		case ts != nil && content != "":
			out = append(out, ts.chunks(ts.p.feed(content))...)
		case content != "":
			out = append(out, chunkChoice{Index: i, Delta: chunkDelta{Content: &content}})
		}
		if len(out) > 0 && len(pending) > 0 {
			if out[0].Logprobs == nil {
				out[0].Logprobs = &chatLogprobs{Content: []tokenLogprob{}}
			}
			out[0].Logprobs.Content = append(pending, out[0].Logprobs.Content...)
			pending = nil
		}
		return out
	}
	cs.scored = nil
	cs.filter = func(ev session.TokenEvent) []chunkChoice {
		if logprobs {
			pending = append(pending, m.chatLogprob(ev))
		}
		return emit(rs.feed(ev.Text))
	}
	cs.end = func(reason *string) []chunkChoice {
		out := emit(rs.flush())
		if ts != nil {
			out = append(out, ts.end(reason)...)
		}
		if len(pending) > 0 {
			out = append(out, chunkChoice{Index: i, Logprobs: &chatLogprobs{Content: pending}})
			pending = nil
		}
		return out
	}
}
