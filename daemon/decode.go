package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// Request decoding for /v0: strict JSON (unknown fields, trailing data and
// wrong types are errors that name the field), then range checks. Every
// function here returns an error wrapping errBadBody for bad input and
// never panics; FuzzDecode holds them to that.

var errBadBody = errors.New("bad request body")

const (
	defaultMaxTokens = 256
	maxStops         = 16
	maxTopLogprobs   = 20
)

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadBody, fmt.Sprintf(format, args...))
}

// decodeStrict decodes one JSON object into v. An empty body is {}.
func decodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			field := te.Field
			if field == "" {
				field = "body"
			}
			return badf("%s: expected %s, got JSON %s", field, te.Type, te.Value)
		case errors.As(err, &se):
			return badf("invalid JSON at byte %d: %v", se.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badf("truncated JSON")
		}
		return badf("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badf("unexpected data after the JSON object")
	}
	return nil
}

// createRequest is POST /v0/sessions.
type createRequest struct {
	Model string `json:"model"`
}

func decodeCreate(body []byte) (string, error) {
	var r createRequest
	if err := decodeStrict(body, &r); err != nil {
		return "", err
	}
	return r.Model, nil
}

// appendRequest mirrors apitype.Append with the tokenizer's message type.
type appendRequest struct {
	Text                *string             `json:"text"`
	Tokens              []int32             `json:"tokens"`
	Messages            []tokenizer.Message `json:"messages"`
	AddGenerationPrompt *bool               `json:"add_generation_prompt"`
	ChatKwargs          map[string]any      `json:"chat_kwargs"`
}

func decodeAppend(body []byte) (session.AppendInput, error) {
	var r appendRequest
	if err := decodeStrict(body, &r); err != nil {
		return session.AppendInput{}, err
	}
	n := 0
	if r.Text != nil {
		n++
	}
	if r.Tokens != nil {
		n++
	}
	if r.Messages != nil {
		n++
	}
	if n != 1 {
		return session.AppendInput{}, badf(`give exactly one of "text", "tokens" or "messages"`)
	}
	in := session.AppendInput{Tokens: r.Tokens, Messages: r.Messages, AddGenerationPrompt: r.AddGenerationPrompt, ChatKwargs: r.ChatKwargs}
	if r.Text != nil {
		if *r.Text == "" {
			return session.AppendInput{}, badf(`"text" is empty`)
		}
		in.Text = *r.Text
	}
	if r.Tokens != nil && len(r.Tokens) == 0 {
		return session.AppendInput{}, badf(`"tokens" is empty`)
	}
	for i, t := range r.Tokens {
		if t < 0 {
			return session.AppendInput{}, badf("tokens[%d]: negative id %d", i, t)
		}
	}
	if r.Messages != nil && len(r.Messages) == 0 {
		return session.AppendInput{}, badf(`"messages" is empty`)
	}
	for i, m := range r.Messages {
		if m.Role == "" {
			return session.AppendInput{}, badf("messages[%d].role: missing", i)
		}
	}
	if r.AddGenerationPrompt != nil && r.Messages == nil {
		return session.AppendInput{}, badf(`"add_generation_prompt" applies to "messages" only`)
	}
	return in, nil
}

// decodeGenerate decodes POST /v0/sessions/{id}/generate, the body the
// client sends as apitype.Generate.
func decodeGenerate(body []byte) (session.GenerateParams, bool, error) {
	var r apitype.Generate
	if err := decodeStrict(body, &r); err != nil {
		return session.GenerateParams{}, false, err
	}
	p := session.GenerateParams{MaxTokens: defaultMaxTokens, Sampling: session.SamplingParams{Temperature: 1, Seed: r.Seed}}
	if r.MaxTokens != nil {
		if *r.MaxTokens < 1 {
			return p, false, badf("max_tokens: must be at least 1, got %d", *r.MaxTokens)
		}
		p.MaxTokens = *r.MaxTokens
	}
	check := func(name string, v *float64, lo, hi float64, dst *float64) error {
		if v == nil {
			return nil
		}
		if math.IsNaN(*v) || *v < lo || *v > hi {
			return badf("%s: %v is outside [%v, %v]", name, *v, lo, hi)
		}
		*dst = *v
		return nil
	}
	sp := &p.Sampling
	for _, c := range []struct {
		name   string
		v      *float64
		lo, hi float64
		dst    *float64
	}{
		{"temperature", r.Temperature, 0, 100, &sp.Temperature},
		{"top_p", r.TopP, 0, 1, &sp.TopP},
		{"min_p", r.MinP, 0, 1, &sp.MinP},
		{"repetition_penalty", r.RepetitionPenalty, 0, 100, &sp.RepetitionPenalty},
		{"presence_penalty", r.PresencePenalty, -2, 2, &sp.PresencePenalty},
		{"frequency_penalty", r.FrequencyPenalty, -2, 2, &sp.FrequencyPenalty},
	} {
		if err := check(c.name, c.v, c.lo, c.hi, c.dst); err != nil {
			return p, false, err
		}
	}
	if r.TopK != nil {
		if *r.TopK < 0 {
			return p, false, badf("top_k: must not be negative, got %d", *r.TopK)
		}
		sp.TopK = *r.TopK
	}
	var err error
	if sp.LogitBias, err = session.ParseLogitBias(r.LogitBias); err != nil {
		return p, false, badf("%v", err)
	}
	if len(r.Stop) > maxStops {
		return p, false, badf("stop: at most %d strings, got %d", maxStops, len(r.Stop))
	}
	for i, s := range r.Stop {
		if s == "" {
			return p, false, badf("stop[%d]: empty string", i)
		}
	}
	p.Stop = r.Stop
	if r.TopLogprobs < 0 || r.TopLogprobs > maxTopLogprobs {
		return p, false, badf("top_logprobs: must be in [0, %d], got %d", maxTopLogprobs, r.TopLogprobs)
	}
	p.Logprobs = r.Logprobs || r.TopLogprobs > 0
	p.TopLogprobs = r.TopLogprobs
	p.JSON = r.JSON
	if len(r.JSONSchema) > 0 {
		s, err := session.CompileSchema(r.JSONSchema)
		if err != nil {
			return p, false, badf("json_schema: %v", err)
		}
		p.Schema = s
	}
	return p, r.Stream, nil
}

type forkRequest struct {
	At *int `json:"at"`
}

func decodeFork(body []byte) (int, error) {
	var r forkRequest
	if err := decodeStrict(body, &r); err != nil {
		return 0, err
	}
	if r.At == nil {
		return -1, nil
	}
	if *r.At < 0 {
		return 0, badf("at: must not be negative, got %d", *r.At)
	}
	return *r.At, nil
}

type truncateRequest struct {
	Length *int `json:"length"`
}

func decodeTruncate(body []byte) (int, error) {
	var r truncateRequest
	if err := decodeStrict(body, &r); err != nil {
		return 0, err
	}
	if r.Length == nil {
		return 0, badf("length: missing")
	}
	if *r.Length < 0 {
		return 0, badf("length: must not be negative, got %d", *r.Length)
	}
	return *r.Length, nil
}
