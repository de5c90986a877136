package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// Request decoding. Fields OpenAI defines but the daemon does not use
// (user, metadata, store, ...) are accepted and ignored, as OpenAI's
// clients send them; known fields are type-checked and range-checked, and
// every error names its field (param). Nothing here panics on any input:
// FuzzDecode holds it to that.

const (
	maxStops       = 16
	maxTopLogprobs = 20
	// maxChoices bounds n: the choices of a request are generated one
	// after another (the daemon decodes one sequence at a time), so n
	// multiplies the request's time.
	maxChoices = 16
	// defaultCompletionMaxTokens is OpenAI's default for /v1/completions;
	// chat completions default to the rest of the context.
	defaultCompletionMaxTokens = 16
)

// decodeJSON decodes body, one JSON object, into v.
func decodeJSON(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badParam("", "request body is empty: send a JSON object")
	}
	if !utf8.Valid(body) {
		return badParam("", "request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			if te.Field == "" {
				return badParam("", "request body: expected a JSON object, got JSON %s", te.Value)
			}
			field := strings.ReplaceAll(te.Field, "samplingFields.", "")
			return badParam(field, "%s: expected %s, got JSON %s", field, jsonType(te.Type.String()), te.Value)
		case errors.As(err, &se):
			return badParam("", "invalid JSON at byte %d: %v", se.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badParam("", "invalid JSON: truncated")
		}
		return badParam("", "invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badParam("", "invalid JSON: unexpected data after the object")
	}
	return nil
}

// jsonType names a Go type the way a JSON user thinks of it.
func jsonType(t string) string {
	switch {
	case strings.HasPrefix(t, "*"):
		return jsonType(t[1:])
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	case strings.HasPrefix(t, "map["), strings.Contains(t, "."):
		return "an object"
	}
	return t
}

// samplingFields are shared by both completion routes.
type samplingFields struct {
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	Seed              *int64          `json:"seed"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	Stop              json.RawMessage `json:"stop"`
	N                 *int            `json:"n"`
	Stream            *bool           `json:"stream"`
	StreamOptions     *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	SessionID string             `json:"session_id"`
	LogitBias map[string]float64 `json:"logit_bias"`
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatMessage     `json:"messages"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ResponseFormat      json.RawMessage   `json:"response_format"`
	// ChatTemplateKwargs are extra template variables (vLLM's extension),
	// e.g. {"enable_thinking": false}.
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
	// ReasoningFormat (llama.cpp's field): "none" keeps a thinking model's
	// <think> block in the content; otherwise it is reasoning_content
	// (reasoning.go).
	ReasoningFormat *string `json:"reasoning_format"`
	samplingFields
}

type chatMessage struct {
	Role             string               `json:"role"`
	Content          json.RawMessage      `json:"content"`
	Name             string               `json:"name"`
	ToolCalls        []tokenizer.ToolCall `json:"tool_calls"`
	ToolCallID       string               `json:"tool_call_id"`
	ReasoningContent string               `json:"reasoning_content"`
}

// completionRequest is POST /v1/completions.
type completionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Echo      *bool           `json:"echo"`
	Logprobs  *int            `json:"logprobs"`
	Suffix    *string         `json:"suffix"`
	BestOf    *int            `json:"best_of"`
	samplingFields
}

// job is a decoded generation request.
type job struct {
	model        string
	params       session.GenerateParams
	maxTokensSet bool
	stream       bool
	includeUsage bool
	sessionID    string
	// n is the number of choices: generated one after another from the
	// same prompt, which the prefix cache then holds (only stateless
	// requests).
	n int

	// chat
	messages []tokenizer.Message
	kwargs   map[string]any
	// tools: the reply is parsed for tool calls, in toolFmt (the model's:
	// set with the prompt), its arguments typed by toolTypes. toolForce
	// is tool_choice "required" or a named function (toolName); the
	// prompt then ends with toolPrefix, the start of such a call, which
	// is the reply's first text.
	tools      bool
	toolFmt    *toolFormat
	toolTypes  paramTypes
	toolForce  bool
	toolName   string
	toolPrefix string
	// prefill is the start of the reply the client wrote (the Messages
	// API's last assistant turn): the prompt ends with it, and the reply
	// continues it.
	prefill string
	// reasoning: the model's template thinks and the reply's reasoning is
	// split from its content (reasoning.go), starting inside the block
	// where the prompt opened it (thinkInside); rawReasoning turns that
	// off (reasoning_format "none").
	reasoning, thinkInside, rawReasoning bool

	// completions: exactly one of text and ids (text may be "" with a
	// session: then the session's history is the prompt).
	text   *string
	ids    []int32
	echo   bool
	suffix *string // fill in the middle: the code after the gap
	legacy bool    // legacy logprobs format
}

// decodeChat decodes a chat request; header is the X-Pocket-Session
// header's value.
func decodeChat(body []byte, header string) (*job, *apiError) {
	var r chatRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	j := &job{model: r.Model, kwargs: r.ChatTemplateKwargs}
	if err := j.sampling(&r.samplingFields, header); err != nil {
		return nil, err
	}
	if r.Messages == nil {
		return nil, badParam("messages", "messages: missing")
	}
	if len(r.Messages) == 0 {
		return nil, badParam("messages", "messages: must not be empty")
	}
	for i, m := range r.Messages {
		msg, err := m.toTemplate(i)
		if err != nil {
			return nil, err
		}
		j.messages = append(j.messages, msg)
	}
	if err := j.chatTools(r.Tools, r.ToolChoice); err != nil {
		return nil, err
	}
	if f := r.ReasoningFormat; f != nil {
		switch *f {
		case "none":
			j.rawReasoning = true
		case "", "auto", "deepseek":
		default:
			return nil, badParam("reasoning_format", "reasoning_format: %q is not none, auto or deepseek", *f)
		}
	}
	if err := responseFormat(r.ResponseFormat, &j.params); err != nil {
		return nil, err
	}
	max := r.MaxCompletionTokens
	param := "max_completion_tokens"
	if max == nil {
		max, param = r.MaxTokens, "max_tokens"
	}
	if max != nil {
		if *max < 1 {
			return nil, badParam(param, "%s: must be at least 1, got %d", param, *max)
		}
		j.params.MaxTokens, j.maxTokensSet = *max, true
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > maxTopLogprobs {
			return nil, badParam("top_logprobs", "top_logprobs: must be in [0, %d], got %d", maxTopLogprobs, *r.TopLogprobs)
		}
		if r.Logprobs == nil || !*r.Logprobs {
			return nil, badParam("top_logprobs", "top_logprobs: needs logprobs: true")
		}
		j.params.TopLogprobs = *r.TopLogprobs
	}
	j.params.Logprobs = r.Logprobs != nil && *r.Logprobs
	return j, nil
}

var roles = map[string]string{"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}

// toTemplate checks a message and converts it for the chat template:
// content parts are joined into one string ("developer" becomes "system",
// which templates know).
func (m chatMessage) toTemplate(i int) (tokenizer.Message, *apiError) {
	p := fmt.Sprintf("messages[%d]", i)
	role, ok := roles[m.Role]
	if m.Role == "" {
		return tokenizer.Message{}, badParam(p+".role", "%s.role: missing", p)
	}
	if !ok {
		return tokenizer.Message{}, badParam(p+".role", "%s.role: %q is not system, developer, user, assistant or tool", p, m.Role)
	}
	out := tokenizer.Message{Role: role, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, ReasoningContent: m.ReasoningContent}
	raw := bytes.TrimSpace(m.Content)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		if role != "assistant" || len(m.ToolCalls) == 0 {
			return out, badParam(p+".content", "%s.content: missing", p)
		}
		// "", not null: templates such as Qwen3's apply string tests
		// (`'</think>' in message.content`) to every assistant message.
		out.Content = ""
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return out, badParam(p+".content", "%s.content: %v", p, err)
		}
		out.Content = s
	case raw[0] == '[':
		s, aerr := joinTextParts(raw, p+".content", "parts")
		if aerr != nil {
			return out, aerr
		}
		out.Content = s
	default:
		return out, badParam(p+".content", "%s.content: expected a string or a list of text parts", p)
	}
	return out, nil
}

// joinTextParts joins a list of {"type": "text", "text": ...} objects (a
// chat message's content parts, Anthropic's text blocks), named param and
// called what in errors, into one string.
func joinTextParts(raw json.RawMessage, param, what string) (string, *apiError) {
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(param, "%s: expected a string or a list of text %s", param, what)
	}
	var b strings.Builder
	for k, part := range parts {
		if part.Type != "text" || part.Text == nil {
			return "", badParam(fmt.Sprintf("%s[%d]", param, k), "%s[%d]: only text %s are supported, got type %q", param, k, what, part.Type)
		}
		b.WriteString(*part.Text)
	}
	return b.String(), nil
}

// decodeCompletion decodes a text completion request; header is the
// X-Pocket-Session header's value.
func decodeCompletion(body []byte, header string) (*job, *apiError) {
	var r completionRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	j := &job{model: r.Model, legacy: true}
	if err := j.sampling(&r.samplingFields, header); err != nil {
		return nil, err
	}
	// With a suffix an empty prompt is a gap at the start of the text.
	fim := r.Suffix != nil && *r.Suffix != ""
	if err := j.prompt(r.Prompt, fim); err != nil {
		return nil, err
	}
	j.params.MaxTokens = defaultCompletionMaxTokens
	if r.MaxTokens != nil {
		if *r.MaxTokens < 1 {
			return nil, badParam("max_tokens", "max_tokens: must be at least 1, got %d", *r.MaxTokens)
		}
		j.params.MaxTokens, j.maxTokensSet = *r.MaxTokens, true
	}
	if r.Logprobs != nil {
		if *r.Logprobs < 0 || *r.Logprobs > maxTopLogprobs {
			return nil, badParam("logprobs", "logprobs: must be in [0, %d], got %d", maxTopLogprobs, *r.Logprobs)
		}
		j.params.Logprobs, j.params.TopLogprobs = true, *r.Logprobs
	}
	j.echo = r.Echo != nil && *r.Echo
	if r.Suffix != nil && *r.Suffix != "" {
		switch {
		case j.text == nil:
			return nil, badParam("suffix", "suffix: needs a text prompt (the code before the gap)")
		case j.sessionID != "":
			return nil, badParam("suffix", "suffix: not supported with a session")
		case j.echo:
			return nil, badParam("echo", "echo: not supported with a suffix")
		}
		j.suffix = r.Suffix
	}
	if r.BestOf != nil && *r.BestOf != 1 {
		return nil, badParam("best_of", "best_of: only 1 is supported")
	}
	if j.echo && j.sessionID != "" {
		return nil, badParam("echo", "echo: not supported with a session")
	}
	return j, nil
}

// prompt decodes a completion prompt: a string, token ids, or a list of
// one of either.
func (j *job) prompt(raw json.RawMessage, emptyOK bool) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		if j.sessionID != "" {
			s := ""
			j.text = &s
			return nil
		}
		return badParam("prompt", "prompt: missing")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" && j.sessionID == "" && !emptyOK {
			return badParam("prompt", "prompt: must not be empty")
		}
		j.text = &s
		return nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		return j.promptIDs(ids)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return badParam("prompt", "prompt: expected a string, a list of token ids, or a list of one of either")
	}
	if len(list) != 1 {
		return badParam("prompt", "prompt: one prompt per request (got %d); send the others as separate requests", len(list))
	}
	if json.Unmarshal(list[0], &s) == nil {
		if s == "" && j.sessionID == "" {
			return badParam("prompt", "prompt: must not be empty")
		}
		j.text = &s
		return nil
	}
	if json.Unmarshal(list[0], &ids) == nil {
		return j.promptIDs(ids)
	}
	return badParam("prompt", "prompt[0]: expected a string or a list of token ids")
}

func (j *job) promptIDs(ids []int32) *apiError {
	if len(ids) == 0 {
		return badParam("prompt", "prompt: must not be empty")
	}
	for i, id := range ids {
		if id < 0 {
			return badParam("prompt", "prompt[%d]: negative token id %d", i, id)
		}
	}
	j.ids = ids
	return nil
}

// sampling checks the fields both routes share.
func (j *job) sampling(r *samplingFields, header string) *apiError {
	sp := &j.params.Sampling
	sp.Temperature = 1
	if r.Seed != nil {
		seed := uint64(*r.Seed)
		sp.Seed = &seed
	}
	for _, c := range []struct {
		name   string
		v      *float64
		lo, hi float64
		dst    *float64
	}{
		{"temperature", r.Temperature, 0, 100, &sp.Temperature},
		{"top_p", r.TopP, 0, 1, &sp.TopP},
		{"min_p", r.MinP, 0, 1, &sp.MinP},
		{"presence_penalty", r.PresencePenalty, -2, 2, &sp.PresencePenalty},
		{"frequency_penalty", r.FrequencyPenalty, -2, 2, &sp.FrequencyPenalty},
		{"repetition_penalty", r.RepetitionPenalty, 0, 100, &sp.RepetitionPenalty},
	} {
		if c.v == nil {
			continue
		}
		if math.IsNaN(*c.v) || *c.v < c.lo || *c.v > c.hi {
			return badParam(c.name, "%s: %v is outside [%v, %v]", c.name, *c.v, c.lo, c.hi)
		}
		*c.dst = *c.v
	}
	if r.TopK != nil {
		switch k := *r.TopK; {
		case k == -1: // vLLM's "disabled"
		case k < 0:
			return badParam("top_k", "top_k: must not be negative (or -1 for none), got %d", k)
		default:
			sp.TopK = k
		}
	}
	j.n = 1
	if r.N != nil {
		if *r.N < 1 || *r.N > maxChoices {
			return badParam("n", "n: must be from 1 to %d, got %d", maxChoices, *r.N)
		}
		j.n = *r.N
	}
	stops, err := decodeStop(r.Stop)
	if err != nil {
		return err
	}
	j.params.Stop = stops
	if sp.LogitBias, err = logitBias(r.LogitBias); err != nil {
		return err
	}
	j.stream = r.Stream != nil && *r.Stream
	if r.StreamOptions != nil && r.StreamOptions.IncludeUsage != nil {
		if !j.stream {
			return badParam("stream_options", "stream_options: only allowed with stream: true")
		}
		j.includeUsage = *r.StreamOptions.IncludeUsage
	}
	j.sessionID = r.SessionID
	if header != "" {
		if j.sessionID != "" && j.sessionID != header {
			return badParam("session_id", "session_id: %q differs from the X-Pocket-Session header %q", j.sessionID, header)
		}
		j.sessionID = header
	}
	if j.n > 1 && j.sessionID != "" {
		return badParam("n", "n: a session continues one conversation; ask for %d choices without one", j.n)
	}
	return nil
}

// decodeStop accepts null, a string, or a list of strings.
func decodeStop(raw json.RawMessage) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stops []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		stops = []string{one}
	} else if json.Unmarshal(raw, &stops) != nil {
		return nil, badParam("stop", "stop: expected a string or a list of strings")
	}
	if len(stops) > maxStops {
		return nil, badParam("stop", "stop: at most %d strings, got %d", maxStops, len(stops))
	}
	for i, s := range stops {
		if s == "" {
			return nil, badParam("stop", "stop[%d]: empty string", i)
		}
	}
	return stops, nil
}
