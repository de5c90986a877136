package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// POST /v1/embeddings: each input's final hidden states pooled and
// normalized (session.Embed), as decoder embedding checkpoints
// (Qwen3-Embedding) are meant to be used. Inputs run one after another.

// maxEmbedInputs bounds a request's inputs (OpenAI's limit).
const maxEmbedInputs = 2048

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	// Pooling is pocketd's extension: "last" or "mean" (default: the
	// model's, see docs/gateway.md).
	Pooling string `json:"pooling"`
}

type embeddingJS struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type embeddingList struct {
	Object string         `json:"object"`
	Data   []embeddingJS  `json:"data"`
	Model  string         `json:"model"`
	Usage  embeddingUsage `json:"usage"`
}

// embedInputs decodes input: a string, a list of strings, a list of token
// ids, or a list of such lists; each becomes one embedding. Texts are
// returned as such (texts[i] != nil), token lists as ids[i].
func embedInputs(raw json.RawMessage) (texts []*string, ids [][]int32, aerr *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, badParam("input", "input: missing")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []*string{&one}, [][]int32{nil}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return nil, nil, badParam("input", "input: expected a string, a list of strings, a list of token ids or a list of such lists")
	}
	if len(list) > maxEmbedInputs {
		return nil, nil, badParam("input", "input: at most %d inputs, got %d", maxEmbedInputs, len(list))
	}
	var toks []int32
	if json.Unmarshal(raw, &toks) == nil { // one list of token ids
		return []*string{nil}, [][]int32{toks}, nil
	}
	for i, item := range list {
		var s string
		var t []int32
		switch {
		case json.Unmarshal(item, &s) == nil:
			texts, ids = append(texts, &s), append(ids, nil)
		case json.Unmarshal(item, &t) == nil:
			texts, ids = append(texts, nil), append(ids, t)
		default:
			return nil, nil, badParam("input", "input[%d]: expected a string or a list of token ids", i)
		}
	}
	return texts, ids, nil
}

func (g *Gateway) serveEmbeddings(ctx *fasthttp.RequestCtx) {
	var r embeddingRequest
	if aerr := decodeJSON(ctx.PostBody(), &r); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	texts, ids, aerr := embedInputs(r.Input)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	format := "float"
	if r.EncodingFormat != nil {
		format = *r.EncodingFormat
	}
	if format != "float" && format != "base64" {
		writeError(ctx, badParam("encoding_format", "encoding_format: %q is not float or base64", format))
		return
	}
	pool, err := session.ParsePooling(r.Pooling)
	if err != nil {
		writeError(ctx, badParam("pooling", "pooling: %q is not last or mean", r.Pooling))
		return
	}
	m, aerr := g.model(r.Model)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if d := r.Dimensions; d != nil && (*d < 1 || *d > m.hidden) {
		writeError(ctx, badParam("dimensions", "dimensions: must be from 1 to %d (model %s's width), got %d", m.hidden, m.name, *d))
		return
	}
	// Every input is checked before any runs.
	prompts := make([][]int32, len(ids))
	total := 0
	for i := range ids {
		p := fmt.Sprintf("input[%d]", i)
		if texts[i] != nil {
			if m.tok == nil {
				writeError(ctx, badParam("input", "model %s has no tokenizer: send the input as token ids", m.name))
				return
			}
			// With the tokenizer's special tokens around the text, as
			// sentence-transformers encodes it (Qwen3-Embedding pools the
			// <|endoftext|> its tokenizer appends).
			prompts[i] = m.tok.EncodeSpecial(*texts[i])
		} else {
			prompts[i] = ids[i]
		}
		switch n := len(prompts[i]); {
		case n == 0:
			writeError(ctx, badParam("input", "%s: empty", p))
			return
		case n > m.ctxLen:
			writeError(ctx, &apiError{status: fasthttp.StatusBadRequest, code: "context_length_exceeded", param: "input",
				msg: fmt.Sprintf("%s is %d tokens; model %s's context is %d tokens", p, n, m.name, m.ctxLen)})
			return
		}
		for k, id := range prompts[i] {
			if id < 0 || int(id) >= m.vocab {
				writeError(ctx, badParam("input", "%s[%d]: token id %d is outside the vocabulary (%d)", p, k, id, m.vocab))
				return
			}
		}
		total += len(prompts[i])
	}
	out := embeddingList{Object: "list", Data: make([]embeddingJS, 0, len(prompts)), Model: m.name,
		Usage: embeddingUsage{PromptTokens: total, TotalTokens: total}}
	for i, p := range prompts {
		vec, err := g.srv.Sessions().Embed(g.srv.RequestContext(), g.owner(ctx), m.name, p, pool)
		if err != nil {
			writeError(ctx, fromSession(err))
			return
		}
		if r.Dimensions != nil && *r.Dimensions < len(vec) {
			vec = renormalize(vec[:*r.Dimensions])
		}
		e := embeddingJS{Object: "embedding", Index: i, Embedding: vec}
		if format == "base64" {
			e.Embedding = base64Floats(vec)
		}
		out.Data = append(out.Data, e)
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, out)
}

// renormalize scales v to unit length: a shortened embedding (the
// request's dimensions, as Matryoshka-trained models are used).
func renormalize(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if n = math.Sqrt(n); n > 0 {
		for i, x := range v {
			out[i] = float32(float64(x) / n)
		}
	}
	return out
}

// base64Floats is OpenAI's base64 encoding of an embedding: its float32s,
// little-endian.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
