package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages
// API, for the clients and agents that speak it (its SDKs; coding agents
// pointed at a local base URL). It runs on the chat route's machinery: the
// system prompt and the turns become chat-template messages (an
// assistant's tool_use blocks its tool calls, a user's tool_result blocks
// tool messages), the tools the template's (input_schema as the function's
// parameters), and calls parsed out of the reply come back as tool_use
// blocks. A last assistant turn is a prefill: the reply continues it.
// messages_reply.go writes the replies, plain and streamed.

// messagesRequest is the body of POST /v1/messages.
type messagesRequest struct {
	Model         string          `json:"model"`
	Messages      []anthMessage   `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     *int            `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        *bool           `json:"stream"`
	Tools         []anthTool      `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	// Thinking {"type": "disabled"} asks a thinking template not to think
	// (enable_thinking false, as Qwen3's templates take it); its budget is
	// not enforced. Fields accepted and not used: metadata, service_tier.
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

type anthMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthBlock is any content block of a request, by type: text, tool_use,
// tool_result, thinking.
type anthBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
}

type anthTool struct {
	Type        string          `json:"type"` // "custom" or none; server tools are not run here
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// decodeMessages decodes a Messages request (counting: for count_tokens,
// where max_tokens is not asked for); header is X-Pocket-Session's value.
func decodeMessages(body []byte, header string, counting bool) (*job, *apiError) {
	var r messagesRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	j := &job{model: r.Model}
	sf := samplingFields{Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, Stream: r.Stream}
	if len(r.StopSequences) > 0 {
		sf.Stop, _ = json.Marshal(r.StopSequences)
	}
	if err := j.sampling(&sf, header); err != nil {
		if err.param == "stop" {
			err.param, err.msg = "stop_sequences", strings.Replace(err.msg, "stop", "stop_sequences", 1)
		}
		return nil, err
	}
	switch {
	case r.MaxTokens != nil && *r.MaxTokens < 1:
		return nil, badParam("max_tokens", "max_tokens: must be at least 1, got %d", *r.MaxTokens)
	case r.MaxTokens != nil:
		j.params.MaxTokens, j.maxTokensSet = *r.MaxTokens, true
	case !counting:
		return nil, badParam("max_tokens", "max_tokens: missing")
	}
	system, aerr := anthText(r.System, "system")
	if aerr != nil {
		return nil, aerr
	}
	if system != "" {
		j.messages = append(j.messages, tokenizer.Message{Role: "system", Content: system})
	}
	if len(r.Messages) == 0 {
		return nil, badParam("messages", "messages: must not be empty")
	}
	for i, m := range r.Messages {
		msgs, aerr := m.toTemplate(i)
		if aerr != nil {
			return nil, aerr
		}
		j.messages = append(j.messages, msgs...)
	}
	// A last assistant turn of text is the reply's start (a prefill).
	if last := j.messages[len(j.messages)-1]; last.Role == "assistant" {
		if len(last.ToolCalls) > 0 {
			return nil, badParam("messages", "messages: the last turn is the assistant's tool use: send its tool_result in a user turn")
		}
		j.prefill, _ = last.Content.(string)
		j.messages = j.messages[:len(j.messages)-1]
		if len(j.messages) == 0 {
			return nil, badParam("messages", "messages: an assistant prefill needs a user turn before it")
		}
	}
	if err := j.anthTools(r.Tools, r.ToolChoice); err != nil {
		return nil, err
	}
	if r.Thinking != nil && r.Thinking.Type == "disabled" {
		if j.kwargs == nil {
			j.kwargs = map[string]any{}
		}
		j.kwargs["enable_thinking"] = false
	}
	if j.prefill != "" && j.toolForce {
		return nil, badParam("tool_choice", "tool_choice: a forced tool call cannot continue an assistant prefill")
	}
	return j, nil
}

// anthText reads a string or a list of text blocks (system, a
// tool_result's content) as one string.
func anthText(raw json.RawMessage, param string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badParam(param, "%s: %v", param, err)
		}
		return s, nil
	}
	if raw[0] != '[' {
		return "", badParam(param, "%s: expected a string or a list of text blocks", param)
	}
	return joinTextParts(raw, param, "blocks")
}

// toTemplate turns turn i into chat-template messages: a user turn's
// tool_result blocks become tool messages (first, as they answer the
// assistant turn before), its text one user message; an assistant turn's
// text, thinking and tool_use blocks one assistant message.
func (m anthMessage) toTemplate(i int) ([]tokenizer.Message, *apiError) {
	p := fmt.Sprintf("messages[%d]", i)
	if m.Role != "user" && m.Role != "assistant" {
		return nil, badParam(p+".role", "%s.role: %q is not user or assistant (the system prompt is the system field)", p, m.Role)
	}
	raw := bytes.TrimSpace(m.Content)
	var blocks []anthBlock
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badParam(p+".content", "%s.content: %v", p, err)
		}
		return []tokenizer.Message{{Role: m.Role, Content: s}}, nil
	case len(raw) > 0 && raw[0] == '[':
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return nil, badParam(p+".content", "%s.content: expected a string or a list of content blocks", p)
		}
	default:
		return nil, badParam(p+".content", "%s.content: expected a string or a list of content blocks", p)
	}
	var out []tokenizer.Message
	msg := tokenizer.Message{Role: m.Role}
	var text strings.Builder
	for k, b := range blocks {
		bp := fmt.Sprintf("%s.content[%d]", p, k)
		switch {
		case b.Type == "text" && b.Text != nil:
			text.WriteString(*b.Text)
		case b.Type == "thinking" && m.Role == "assistant":
			msg.ReasoningContent += b.Thinking
		case b.Type == "redacted_thinking" && m.Role == "assistant":
		case b.Type == "tool_use" && m.Role == "assistant":
			if b.Name == "" {
				return nil, badParam(bp+".name", "%s.name: missing", bp)
			}
			args := bytes.TrimSpace(b.Input)
			if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
				return nil, badParam(bp+".input", "%s.input: expected a JSON object", bp)
			}
			msg.ToolCalls = append(msg.ToolCalls, tokenizer.ToolCall{ID: b.ID, Type: "function",
				Function: tokenizer.FunctionCall{Name: b.Name, Arguments: string(args)}})
		case b.Type == "tool_result" && m.Role == "user":
			content, aerr := anthText(b.Content, bp+".content")
			if aerr != nil {
				return nil, aerr
			}
			if b.IsError {
				content = "Error: " + content
			}
			out = append(out, tokenizer.Message{Role: "tool", Content: content, ToolCallID: b.ToolUseID})
		default:
			return nil, badParam(bp+".type", "%s.type: %q blocks are not supported in a %s turn (text, tool_use and thinking for the assistant; text and tool_result for the user)",
				bp, b.Type, m.Role)
		}
	}
	msg.Content = text.String()
	if text.Len() > 0 || len(msg.ToolCalls) > 0 || m.Role == "assistant" {
		out = append(out, msg)
	}
	if len(out) == 0 {
		return nil, badParam(p+".content", "%s.content: no text or tool_result", p)
	}
	return out, nil
}

// anthTools decodes tools and tool_choice into j through chatTools: a
// tool is a function whose parameters are its input_schema; tool_choice
// {"type": "auto"|"any"|"tool"|"none"} is "auto", "required", the named
// function or "none".
func (j *job) anthTools(tools []anthTool, choice json.RawMessage) *apiError {
	var raws []json.RawMessage
	for i, t := range tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			return badParam(p+".type", "%s.type: %q is a server tool, which pocketd does not run; send custom tools (name, description, input_schema)", p, t.Type)
		}
		if t.Name == "" {
			return badParam(p+".name", "%s.name: missing", p)
		}
		schema := bytes.TrimSpace(t.InputSchema)
		if len(schema) == 0 || schema[0] != '{' {
			return badParam(p+".input_schema", "%s.input_schema: expected a JSON schema object", p)
		}
		fn := map[string]any{"name": t.Name, "parameters": json.RawMessage(schema)}
		if t.Description != "" {
			fn["description"] = t.Description
		}
		raw, err := json.Marshal(map[string]any{"type": "function", "function": fn})
		if err != nil {
			return badParam(p+".input_schema", "%s.input_schema: %v", p, err)
		}
		raws = append(raws, raw)
	}
	var openAIChoice json.RawMessage
	if c := bytes.TrimSpace(choice); len(c) > 0 && string(c) != "null" {
		var tc struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(c, &tc) != nil {
			return badParam("tool_choice", `tool_choice: expected {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": ...} or {"type": "none"}`)
		}
		switch tc.Type {
		case "auto":
			openAIChoice = json.RawMessage(`"auto"`)
		case "any":
			openAIChoice = json.RawMessage(`"required"`)
		case "none":
			openAIChoice = json.RawMessage(`"none"`)
		case "tool":
			if tc.Name == "" {
				return badParam("tool_choice", "tool_choice: name: missing")
			}
			openAIChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		default:
			return badParam("tool_choice", "tool_choice: type %q is not auto, any, tool or none", tc.Type)
		}
	}
	return j.chatTools(raws, openAIChoice)
}
