package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// Function tools on /v1/responses: the Responses API's flat tool
// definitions and tool_choice become chat's, so that the prompt, the
// forced calls and the parsing of the reply are the chat route's
// (toolFormat); calls come back as function_call output items, and their
// results go in as function_call_output input items (chat's tool
// messages).

// responsesTool is a function tool as the Responses API defines it.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// responsesTools sets j's tools from the request's, converted to chat's
// shape for job.chatTools.
func (j *responsesJob) responsesTools(tools []json.RawMessage, choice json.RawMessage) *apiError {
	if c := bytes.TrimSpace(choice); len(c) > 0 && string(c) != "null" {
		j.choiceEcho = json.RawMessage(c)
	}
	chat := make([]json.RawMessage, 0, len(tools))
	for i, raw := range tools {
		p := fmt.Sprintf("tools[%d]", i)
		var t responsesTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return badParam(p, "%s: expected a tool object", p)
		}
		if t.Type != "function" {
			return badParam(p+".type", "%s.type: only \"function\" tools are supported, got %q", p, t.Type)
		}
		if t.Name == "" {
			return badParam(p+".name", "%s.name: missing", p)
		}
		fn := map[string]any{"name": t.Name}
		if t.Description != nil {
			fn["description"] = *t.Description
		}
		if ps := bytes.TrimSpace(t.Parameters); len(ps) > 0 && string(ps) != "null" {
			if ps[0] != '{' {
				return badParam(p+".parameters", "%s.parameters: expected a JSON schema object", p)
			}
			fn["parameters"] = json.RawMessage(ps)
		}
		if t.Strict != nil {
			fn["strict"] = *t.Strict
		}
		b, err := json.Marshal(map[string]any{"type": "function", "function": fn})
		if err != nil {
			return badParam(p, "%s: %v", p, err)
		}
		chat = append(chat, b)
	}
	// tool_choice {"type": "function", "name": f} is chat's
	// {"type": "function", "function": {"name": f}}.
	if c := bytes.TrimSpace(choice); len(c) > 0 && c[0] == '{' {
		var obj struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(c, &obj) != nil || obj.Type != "function" || obj.Name == "" {
			return badParam("tool_choice", `tool_choice: expected "auto", "none", "required" or {"type": "function", "name": ...}`)
		}
		choice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": obj.Name}})
	}
	if aerr := j.chatTools(chat, choice); aerr != nil {
		return aerr
	}
	if len(tools) > 0 {
		j.toolsEcho = tools
	}
	return nil
}

// functionCallItem is a call the model made (an output item), or one a
// client sends back with the conversation (an input item).
type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// inputItem is one element of a Responses input list.
type inputItem struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// addCallItem appends a function_call or function_call_output input item
// to out as chat messages: calls join the assistant message before them
// (or start one), outputs are tool messages.
func addCallItem(out []tokenizer.Message, it inputItem, p string) ([]tokenizer.Message, *apiError) {
	if it.CallID == "" {
		return nil, badParam(p+".call_id", "%s.call_id: missing", p)
	}
	if it.Type == "function_call_output" {
		text, aerr := responsesContent(it.Output, p+".output")
		if aerr != nil {
			return nil, aerr
		}
		return append(out, tokenizer.Message{Role: "tool", ToolCallID: it.CallID, Content: text}), nil
	}
	if it.Name == "" {
		return nil, badParam(p+".name", "%s.name: missing", p)
	}
	args := "{}"
	if it.Arguments != nil {
		args = *it.Arguments
	}
	call := tokenizer.ToolCall{ID: it.CallID, Type: "function", Function: tokenizer.FunctionCall{Name: it.Name, Arguments: args}}
	if n := len(out); n > 0 && out[n-1].Role == "assistant" {
		out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
		return out, nil
	}
	// "", not nil: templates apply string tests to every assistant
	// message's content (see chatMessage.toTemplate).
	return append(out, tokenizer.Message{Role: "assistant", Content: "", ToolCalls: []tokenizer.ToolCall{call}}), nil
}

// replyItems turns a reply into output items and the assistant message
// the conversation keeps: with tools, the calls parsed out of the text
// become function_call items after a message with the rest (none when
// only calls were made); status is the items'. lps are the reply's
// tokens' logprobs (when asked for): all the message's where it is the
// whole reply, else those of the tokens that released its text
// (replyLogprobs.content).
//
// A thinking model's reasoning (reasoning.go) comes first, as a reasoning
// item with id rsID; the rest of the reply is the text the other items
// are made from, and the conversation keeps only that.
func replyItems(res session.GenerateResult, j *responsesJob, msgID, rsID, status string, lps replyLogprobs) ([]any, tokenizer.Message) {
	text := res.Text
	var items []any
	if j.reasoning {
		var reasoning string
		if reasoning, text = splitReasoning(text, j.thinkInside); reasoning != "" {
			items = append(items, reasoningItem(rsID, reasoning, status))
		}
	}
	keep := tokenizer.Message{Role: "assistant", Content: text}
	message := func(text string, lps []tokenLogprob) responseItem {
		part := textPart(text)
		if lps != nil {
			part.Logprobs = lps
		}
		return responseItem{Type: "message", ID: msgID, Status: status, Role: "assistant", Content: []outputText{part}}
	}
	if !j.tools {
		mine := lps.lps
		if j.reasoning {
			mine = lps.content(j.job)
		}
		return append(items, message(text, mine)), keep
	}
	msg, _ := toolMessage(text, j.job, res.FinishReason)
	keep.Content = ""
	if msg.Content != nil {
		items = append(items, message(*msg.Content, lps.content(j.job)))
		keep.Content = *msg.Content
	}
	for _, tc := range msg.ToolCalls {
		items = append(items, functionCallItem{Type: "function_call", ID: newID("fc"), CallID: tc.ID,
			Name: tc.Function.Name, Arguments: tc.Function.Arguments, Status: "completed"})
		keep.ToolCalls = append(keep.ToolCalls, tokenizer.ToolCall{ID: tc.ID, Type: "function",
			Function: tokenizer.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
	}
	return items, keep
}

// replyLogprobs are a reply's tokens' logprobs, when asked for, with the
// text each token released.
type replyLogprobs struct {
	lps   []tokenLogprob
	texts []string
}

func (r *replyLogprobs) add(lp tokenLogprob, text string) {
	r.lps, r.texts = append(r.lps, lp), append(r.texts, text)
}

// content is the logprobs of the tokens whose text is the message's, in a
// reply with tool calls or reasoning (nil when none were asked for): the
// tokens replayed through the job's reasoning split and tool-call parser,
// a token counting for the message where its text released some of it,
// with those before it that released nothing yet (as a chat stream's
// chunks carry them); tokens of the reasoning or inside the calls are left
// out (neither item has logprobs).
func (r replyLogprobs) content(j *job) []tokenLogprob {
	if r.lps == nil {
		return nil
	}
	out := []tokenLogprob{}
	rs, p := j.replyParsers()
	held := 0
	// step takes what a token (or the end) released: a token that leaves
	// the reply in its reasoning drops the tokens held, message text takes
	// them.
	step := func(content string, flush bool, upto int) {
		if rs != nil && rs.thinking() {
			held = 0
		}
		var pieces []toolPiece
		switch {
		case p == nil && content != "":
			pieces = []toolPiece{{text: content}}
		case p != nil && flush:
			pieces = append(p.feed(content), p.flush()...)
		case p != nil:
			pieces = p.feed(content)
		}
		if len(pieces) == 0 {
			return
		}
		for _, pc := range pieces {
			if pc.call == nil && pc.text != "" {
				out = append(out, r.lps[upto-held:upto]...)
				break
			}
		}
		held = 0
	}
	for i, text := range r.texts {
		held++
		if rs != nil {
			_, text = rs.feed(text)
		}
		step(text, false, i+1)
	}
	rest := ""
	if rs != nil {
		_, rest = rs.flush()
	}
	step(rest, true, len(r.texts))
	return out
}

// reasoningItem is a Responses reasoning item holding a reply's reasoning
// as its one reasoning_text part (no summary: pocketd writes none).
func reasoningItem(id, text, status string) responseReasoning {
	return responseReasoning{Type: "reasoning", ID: id, Summary: []any{}, Status: status,
		Content: []reasoningText{{Type: "reasoning_text", Text: text}}}
}

type responseReasoning struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
	Status  string          `json:"status"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}
