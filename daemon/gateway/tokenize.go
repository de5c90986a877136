package gateway

import (
	"strings"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/valyala/fasthttp"
)

// GET /v1/models, GET /v1/models/{id}, POST /tokenize, POST /detokenize.

type modelJS struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Created       int64  `json:"created"`
	OwnedBy       string `json:"owned_by"`
	ContextLength int    `json:"context_length"`
	MaxModelLen   int    `json:"max_model_len"`
}

type modelList struct {
	Object string    `json:"object"`
	Data   []modelJS `json:"data"`
}

func (m *modelInfo) js() modelJS {
	return modelJS{ID: m.name, Object: "model", Created: m.created, OwnedBy: "pocketd", ContextLength: m.ctxLen, MaxModelLen: m.ctxLen}
}

// allowGet reports whether ctx is a GET, answering any other method with
// 405.
func allowGet(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsGet() {
		return true
	}
	ctx.Response.Header.Set("Allow", "GET")
	writeError(ctx, &apiError{status: fasthttp.StatusMethodNotAllowed, msg: "method " + string(ctx.Method()) + " not allowed; use GET"})
	return false
}

func (g *Gateway) serveModels(ctx *fasthttp.RequestCtx) {
	if !allowGet(ctx) {
		return
	}
	g.loadModels()
	out := modelList{Object: "list", Data: []modelJS{}}
	for _, name := range g.order {
		out.Data = append(out.Data, g.models[name].js())
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, out)
}

func (g *Gateway) serveModel(ctx *fasthttp.RequestCtx) {
	if !allowGet(ctx) {
		return
	}
	name := strings.TrimPrefix(string(ctx.Path()), "/v1/models/")
	if name == "" {
		writeError(ctx, &apiError{status: fasthttp.StatusNotFound, msg: "no model named"})
		return
	}
	m, aerr := g.model(name)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, m.js())
}

// tokenizeRequest is POST /tokenize: a text prompt, or chat messages
// rendered with the chat template.
type tokenizeRequest struct {
	Model               string         `json:"model"`
	Prompt              *string        `json:"prompt"`
	Messages            []chatMessage  `json:"messages"`
	AddGenerationPrompt *bool          `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs"`
	// AddSpecialTokens puts the tokenizer's special tokens around the
	// text (Llama's BOS), as vLLM's /tokenize does: by default for a
	// prompt, which /v1/completions encodes so, and not for messages,
	// whose template writes its own.
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

type tokenizeResponse struct {
	Tokens      []int32 `json:"tokens"`
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
}

type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// tokenizerModel is the model named, which must have a tokenizer.
func (g *Gateway) tokenizerModel(name string) (*modelInfo, *apiError) {
	m, aerr := g.model(name)
	if aerr != nil {
		return nil, aerr
	}
	if m.tok == nil {
		return nil, badParam("model", "model %s has no tokenizer", m.name)
	}
	return m, nil
}

func (g *Gateway) serveTokenize(ctx *fasthttp.RequestCtx) {
	var r tokenizeRequest
	if aerr := decodeJSON(ctx.PostBody(), &r); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if (r.Prompt == nil) == (r.Messages == nil) {
		writeError(ctx, badParam("prompt", `give exactly one of "prompt" or "messages"`))
		return
	}
	m, aerr := g.tokenizerModel(r.Model)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	text := ""
	if r.Prompt != nil {
		text = *r.Prompt
	} else {
		if !m.tok.HasChatTemplate() {
			writeError(ctx, badParam("model", "model %s has no chat template", m.name))
			return
		}
		var msgs []tokenizer.Message
		for i, cm := range r.Messages {
			msg, aerr := cm.toTemplate(i)
			if aerr != nil {
				writeError(ctx, aerr)
				return
			}
			msgs = append(msgs, msg)
		}
		gen := r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
		var err error
		if text, err = m.tok.ApplyChatTemplate(msgs, gen, r.ChatTemplateKwargs); err != nil {
			writeError(ctx, badParam("messages", "messages: %v", err))
			return
		}
	}
	special := r.Prompt != nil
	if r.AddSpecialTokens != nil {
		special = *r.AddSpecialTokens
	}
	toks := m.tok.Encode(text)
	if special {
		toks = m.tok.EncodeSpecial(text)
	}
	if toks == nil {
		toks = []int32{}
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, tokenizeResponse{Tokens: toks, Count: len(toks), MaxModelLen: m.ctxLen})
}

func (g *Gateway) serveDetokenize(ctx *fasthttp.RequestCtx) {
	var r detokenizeRequest
	if aerr := decodeJSON(ctx.PostBody(), &r); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if r.Tokens == nil {
		writeError(ctx, badParam("tokens", "tokens: missing"))
		return
	}
	m, aerr := g.tokenizerModel(r.Model)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	for i, id := range r.Tokens {
		if id < 0 || int(id) >= m.vocab {
			writeError(ctx, badParam("tokens", "tokens[%d]: id %d is outside the vocabulary (%d)", i, id, m.vocab))
			return
		}
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, detokenizeResponse{Prompt: m.tok.Decode(r.Tokens)})
}
