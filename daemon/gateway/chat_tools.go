package gateway

import (
	"github.com/pocketllm/pocketllm/session"
)

// Tool calls in chat replies, whole and streamed (OpenAI's shapes).

// toolCallJS is one call of a reply's message.tool_calls.
type toolCallJS struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolCallDelta is a streamed piece of a call: the first names it, the
// next carries its arguments.
type toolCallDelta struct {
	Index    int        `json:"index"`
	ID       string     `json:"id,omitempty"`
	Type     string     `json:"type,omitempty"`
	Function *funcDelta `json:"function,omitempty"`
}

type funcDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// toolMessage builds the reply message of a chat with tools from the
// generated text (after the forced call prefix, if any) and adjusts the
// finish reason: a reply that made calls and ended by itself finishes with
// "tool_calls". The content is null when only calls were made.
func toolMessage(text string, j *job, reason string) (chatOut, string) {
	content, calls := parseToolCalls(j.toolPrefix+text, j.toolFmt, j.toolTypes)
	msg := chatOut{Role: "assistant"}
	if content != "" || len(calls) == 0 {
		msg.Content = &content
	}
	for _, c := range calls {
		tc := toolCallJS{ID: newCallID(), Type: "function"}
		tc.Function.Name, tc.Function.Arguments = c.Name, c.Arguments
		msg.ToolCalls = append(msg.ToolCalls, tc)
	}
	if len(calls) > 0 && reason == "stop" {
		reason = "tool_calls"
	}
	return msg, reason
}

// toolStream turns a streamed chat's tokens into content and tool-call
// deltas. Logprobs of tokens that released nothing yet ride on the next
// chunk sent.
type toolStream struct {
	m        *modelInfo
	index    int // the choice's
	p        toolParser
	calls    int
	logprobs bool
	pending  []tokenLogprob
}

func newToolStream(m *modelInfo, j *job, index int) *toolStream {
	ts := &toolStream{m: m, logprobs: j.params.Logprobs, index: index, p: toolParser{f: j.toolFmt, types: j.toolTypes}}
	ts.p.feed(j.toolPrefix) // an opened call: releases nothing
	return ts
}

func (ts *toolStream) token(ev session.TokenEvent) []chunkChoice {
	if ts.logprobs {
		ts.pending = append(ts.pending, ts.m.chatLogprob(ev))
	}
	return ts.chunks(ts.p.feed(ev.Text))
}

// end flushes the parser; reason becomes "tool_calls" when calls were
// made and the generation ended by itself.
func (ts *toolStream) end(reason *string) []chunkChoice {
	out := ts.chunks(ts.p.flush())
	if len(ts.pending) > 0 {
		out = append(out, chunkChoice{Index: ts.index, Logprobs: &chatLogprobs{Content: ts.pending}})
		ts.pending = nil
	}
	if ts.calls > 0 && *reason == "stop" {
		*reason = "tool_calls"
	}
	return out
}

func (ts *toolStream) chunks(pieces []toolPiece) []chunkChoice {
	var out []chunkChoice
	for _, pc := range pieces {
		if pc.call == nil {
			text := pc.text
			out = append(out, chunkChoice{Index: ts.index, Delta: chunkDelta{Content: &text}})
			continue
		}
		i := ts.calls
		ts.calls++
		out = append(out,
			chunkChoice{Index: ts.index, Delta: chunkDelta{ToolCalls: []toolCallDelta{{Index: i, ID: newCallID(), Type: "function",
				Function: &funcDelta{Name: pc.call.Name}}}}},
			chunkChoice{Index: ts.index, Delta: chunkDelta{ToolCalls: []toolCallDelta{{Index: i, Function: &funcDelta{Arguments: pc.call.Arguments}}}}})
	}
	if len(out) > 0 && len(ts.pending) > 0 {
		out[0].Logprobs = &chatLogprobs{Content: ts.pending}
		ts.pending = nil
	}
	return out
}
