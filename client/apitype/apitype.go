// Package apitype holds the JSON wire types of pocketd's Unix-socket API,
// version 0 (/v0). The daemon encodes them and package client decodes
// them, so the two cannot drift apart.
package apitype

import (
	"encoding/json"
	"time"
)

// Health is GET /v0/health (and the TCP /health).
type Health struct {
	// Status is "ok" when ready, "loading" while models load (HTTP 503),
	// "degraded" while a model's worker process restarts (HTTP 503),
	// "no_models" when the configuration lists no model (HTTP 200: the
	// daemon runs, but has nothing to serve), "stopping" while draining
	// (HTTP 503).
	Status string   `json:"status"`
	Models []string `json:"models"`
	// Message explains a status other than "ok".
	Message string `json:"message,omitempty"`
	// Workers describes the models served by worker processes.
	Workers []WorkerHealth `json:"workers,omitempty"`
}

// WorkerHealth is the state of one model's worker process.
type WorkerHealth struct {
	Model    string `json:"model"`
	PID      int    `json:"pid"` // 0 while restarting
	Restarts int    `json:"restarts"`
	// Error says why the worker is not serving (empty when it is).
	Error string `json:"error,omitempty"`
	// Ranks lists every rank process of the model's tensor-parallel group,
	// in rank order (one entry for a single worker); PID above is rank 0's.
	Ranks []RankHealth `json:"ranks,omitempty"`
}

// RankHealth is the state of one rank process of a worker group.
type RankHealth struct {
	Rank int `json:"rank"`
	PID  int `json:"pid"` // 0 while the group is rebuilt
	// GPU is the rank's GPU ordinal (absent for a CPU rank).
	GPU *int `json:"gpu,omitempty"`
	// Device describes the rank's device, as the rank reports it (empty
	// while the group is rebuilt).
	Device string `json:"device,omitempty"`
	// Restarts counts the rank's restarts: the group's rebuilds, since a
	// group is restarted whole.
	Restarts int `json:"restarts"`
}

// Model describes one served model (GET /v0/models).
type Model struct {
	Name         string `json:"name"`
	Architecture string `json:"architecture"`
	Backend      string `json:"backend"`
	Path         string `json:"path"`
	VocabSize    int    `json:"vocab_size"`
	// ContextLength is the maximum tokens a session may hold.
	ContextLength int `json:"context_length"`
	// Tokenizer reports whether text input works (else tokens only).
	Tokenizer bool `json:"tokenizer"`
	// ChatTemplate reports whether messages input works.
	ChatTemplate bool `json:"chat_template"`
}

// Models is GET /v0/models.
type Models struct {
	Models []Model `json:"models"`
}

// Session is one session's metadata.
type Session struct {
	ID      string    `json:"id"`
	Model   string    `json:"model"`
	Tokens  int       `json:"tokens"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Sessions is GET /v0/sessions: the caller's sessions.
type Sessions struct {
	Sessions []Session `json:"sessions"`
}

// CreateSession is the body of POST /v0/sessions.
type CreateSession struct {
	Model string `json:"model"`
}

// Message is one chat message, as the chat template sees it.
type Message struct {
	Role string `json:"role"`
	// Content is a string, null, or a list of content parts.
	Content          any        `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// ToolCall is an assistant's function call.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names a function and its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
}

// Append is the body of POST /v0/sessions/{id}/append: exactly one of
// Text, Tokens or Messages. Text that starts a session is encoded with
// the special tokens the tokenizer puts before a text (Llama's BOS);
// text after that, and tokens, are taken as they are.
type Append struct {
	Text     *string   `json:"text,omitempty"`
	Tokens   []int32   `json:"tokens,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	// AddGenerationPrompt applies to Messages (default true).
	AddGenerationPrompt *bool `json:"add_generation_prompt,omitempty"`
	// ChatKwargs are extra chat-template variables (enable_thinking, tools).
	ChatKwargs map[string]any `json:"chat_kwargs,omitempty"`
}

// AppendResult is the reply to append.
type AppendResult struct {
	// Tokens is the session's length after the append.
	Tokens int `json:"tokens"`
	// Reused counts the tokens whose KV state was already there.
	Reused int `json:"reused"`
	// Prefilled counts the tokens run through the model.
	Prefilled int `json:"prefilled"`
}

// Generate is the body of POST /v0/sessions/{id}/generate. Omitted
// sampling fields take their defaults: max_tokens 256, temperature 1 (0 is
// greedy), no top-p/top-k/min-p, no penalties, a random seed.
type Generate struct {
	MaxTokens         *int     `json:"max_tokens,omitempty"`
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	Seed              *uint64  `json:"seed,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	PresencePenalty   *float64 `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty,omitempty"`
	// LogitBias maps token ids (decimal strings) to a bias in [-100, 100]
	// added to their logits after the penalties, as OpenAI's logit_bias.
	LogitBias   map[string]float64 `json:"logit_bias,omitempty"`
	Stop        []string           `json:"stop,omitempty"`
	Logprobs    bool               `json:"logprobs,omitempty"`
	TopLogprobs int                `json:"top_logprobs,omitempty"`
	// JSON holds the reply to one JSON object: tokens that would break it
	// are never sampled, and generation stops when the object closes
	// (finish "stop"); as the gateway's response_format json_object.
	JSON bool `json:"json,omitempty"`
	// JSONSchema holds the reply to one value of this JSON schema (the
	// subset OpenAI's strict structured outputs use; others get a 400),
	// as the gateway's response_format json_schema.
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
	// Stream selects an NDJSON reply: one Token line per generated token,
	// then a GenerateResult line with "done": true (or an "error" line).
	Stream bool `json:"stream,omitempty"`
}

// Token is one streamed token line.
type Token struct {
	ID          int32        `json:"id"`
	Text        string       `json:"text"`
	Logprob     *float32     `json:"logprob,omitempty"`
	TopLogprobs []TopLogprob `json:"top_logprobs,omitempty"`
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	ID      int32   `json:"id"`
	Text    string  `json:"text"`
	Logprob float32 `json:"logprob"`
}

// Usage counts the tokens of a generate call.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CachedTokens     int `json:"cached_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// GenerateResult is the reply to generate (the last NDJSON line when
// streaming, with Done set). The generated tokens have been appended to
// the session.
type GenerateResult struct {
	Done         bool    `json:"done,omitempty"`
	IDs          []int32 `json:"ids"`
	Text         string  `json:"text"`
	FinishReason string  `json:"finish_reason"`
	Usage        Usage   `json:"usage"`
}

// StreamLine is any line of a generate stream, for decoding: a token
// (ID set), the result (Done set) or an error (Error set).
type StreamLine struct {
	ID          *int32       `json:"id,omitempty"`
	Text        string       `json:"text"`
	Logprob     *float32     `json:"logprob,omitempty"`
	TopLogprobs []TopLogprob `json:"top_logprobs,omitempty"`

	Done         bool    `json:"done,omitempty"`
	IDs          []int32 `json:"ids,omitempty"`
	FinishReason string  `json:"finish_reason,omitempty"`
	Usage        *Usage  `json:"usage,omitempty"`

	Error *ErrorDetail `json:"error,omitempty"`
}

// Fork is the body of POST /v0/sessions/{id}/fork.
type Fork struct {
	// At is the number of tokens the fork keeps (default: all).
	At *int `json:"at,omitempty"`
}

// Truncate is the body of POST /v0/sessions/{id}/truncate.
type Truncate struct {
	Length *int `json:"length"`
}

// Tokens is GET /v0/sessions/{id}/tokens.
type Tokens struct {
	Tokens []int32 `json:"tokens"`
}

// Deleted is the reply to DELETE /v0/sessions/{id}.
type Deleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

// ErrorBody is every error reply: {"error": {"message", "type", ...}},
// the same shape as OpenAI's.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
