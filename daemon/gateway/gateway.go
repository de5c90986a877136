// Package gateway is pocketd's OpenAI-compatible HTTP API: the /v1 chat
// and text completion routes, /v1/responses, /v1/models, /tokenize, /detokenize and
// /metrics (and Anthropic's /v1/messages, messages.go), mounted on the daemon's route table (a daemon.RouteSet) and so
// served by fasthttp on both the TCP listener and the Unix socket, over
// the same session manager and KV cache as /v0.
//
// It owns the OpenAI wire format (request decoding, responses, SSE
// streams, errors in OpenAI's shape), optional API keys for the TCP
// listener, and the Prometheus metrics. Stateless requests run on
// ephemeral sequences (session.Manager.Complete), so a client that repeats
// its conversation on every turn reuses the KV of the earlier turns
// through the prefix cache; usage.prompt_tokens_details.cached_tokens
// reports how much. A request may instead name a /v0 session
// ("session_id" or the X-Pocket-Session header) to continue it.
package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// Anonymous is the owner of TCP requests made without an API key: it is
// (uid_t)-1, never a real uid, so such requests see no /v0 sessions and
// share one prefix-cache namespace.
const Anonymous session.Owner = math.MaxUint32

// Gateway is the OpenAI route set. Build it with New, mount it with
// daemon.Server.AddRoutes before Run.
type Gateway struct {
	srv     *daemon.Server
	keys    map[[32]byte]bool // sha256 of accepted keys; nil: no auth on TCP
	selfUID session.Owner
	metrics *metrics

	once   sync.Once
	models map[string]*modelInfo
	order  []string

	responses responseStore // stored Responses (responses.go)
}

// modelInfo is what the handlers need of a served model.
type modelInfo struct {
	name    string
	ctxLen  int
	vocab   int
	hidden  int                  // an embedding's width
	tok     *tokenizer.Tokenizer // nil: token ids only
	created int64
}

// New builds the gateway for srv, reading the API keys file of the
// server's config (server.api_keys_file) when one is set.
func New(srv *daemon.Server) (*Gateway, error) {
	g := &Gateway{srv: srv, selfUID: session.Owner(os.Getuid())}
	if path := srv.Config().Server.APIKeysFile; path != "" {
		keys, err := LoadKeys(path)
		if err != nil {
			return nil, err
		}
		g.keys = keys
	}
	g.metrics = newMetrics(srv)
	return g, nil
}

// LoadKeys reads an API keys file: one key per line; blank lines and lines
// starting with # are ignored. A file without keys is an error, so that a
// misconfigured file never leaves the listener open by accident.
func LoadKeys(path string) (map[[32]byte]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("api keys: %w", err)
	}
	keys := map[[32]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys[sha256.Sum256([]byte(line))] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api keys %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("api keys %s: no keys in the file", path)
	}
	return keys, nil
}

// Register implements daemon.RouteSet. /health is the daemon's own (503
// while models load).
func (g *Gateway) Register(m *daemon.Mux) {
	h := func(route string, fn fasthttp.RequestHandler) fasthttp.RequestHandler {
		return g.metrics.instrument(route, g.authorize(fn))
	}
	m.Handle("/v1/chat/completions", daemon.Everywhere, h("/v1/chat/completions", post(g.serveChat)))
	m.Handle("/v1/completions", daemon.Everywhere, h("/v1/completions", post(g.serveCompletion)))
	m.Handle("/v1/embeddings", daemon.Everywhere, h("/v1/embeddings", post(g.serveEmbeddings)))
	m.Handle("/v1/responses", daemon.Everywhere, h("/v1/responses", post(g.serveResponses)))
	m.Handle("/v1/messages", daemon.Everywhere, h("/v1/messages", post(g.serveMessages)))
	m.Handle("/v1/messages/count_tokens", daemon.Everywhere, h("/v1/messages/count_tokens", post(g.serveCountTokens)))
	m.Handle("/v1/responses/", daemon.Everywhere, h("/v1/responses/{id}", g.serveResponse))
	m.Handle("/v1/models", daemon.Everywhere, h("/v1/models", g.serveModels))
	m.Handle("/v1/models/", daemon.Everywhere, h("/v1/models/{id}", g.serveModel))
	m.Handle("/tokenize", daemon.Everywhere, h("/tokenize", post(g.serveTokenize)))
	m.Handle("/detokenize", daemon.Everywhere, h("/detokenize", post(g.serveDetokenize)))
	m.Handle("/metrics", daemon.Everywhere|daemon.BeforeReady, h("/metrics", g.metrics.serve))
}

func post(fn fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			writeError(ctx, &apiError{status: fasthttp.StatusMethodNotAllowed,
				msg: "method " + string(ctx.Method()) + " not allowed; use POST"})
			return
		}
		fn(ctx)
	}
}

// authorize checks the bearer key of TCP requests when keys are
// configured. The Unix socket needs none: its file permissions decide who
// may connect, and the peer's uid owns its sessions.
func (g *Gateway) authorize(fn fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if _, onSocket := daemon.PeerUID(ctx); onSocket || g.keys == nil {
			fn(ctx)
			return
		}
		auth := string(ctx.Request.Header.Peek("Authorization"))
		key, ok := strings.CutPrefix(auth, "Bearer ")
		if x := ctx.Request.Header.Peek("X-Api-Key"); auth == "" && len(x) > 0 {
			key, ok, auth = string(x), true, "x-api-key" // Anthropic's clients send the key so
		}
		if !ok || !g.keys[sha256.Sum256([]byte(strings.TrimSpace(key)))] {
			ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="pocketd"`)
			msg := "invalid API key"
			if auth == "" {
				msg = "missing API key: send Authorization: Bearer KEY"
			}
			writeError(ctx, &apiError{status: fasthttp.StatusUnauthorized, msg: msg, code: "invalid_api_key"})
			return
		}
		fn(ctx)
	}
}

// owner is who a request acts for: the peer uid on the socket; on TCP,
// the daemon's own uid when an API key authenticated the request (the key
// file is then the trust boundary), else Anonymous.
func (g *Gateway) owner(ctx *fasthttp.RequestCtx) session.Owner {
	if uid, ok := daemon.PeerUID(ctx); ok {
		return uid
	}
	if g.keys != nil {
		return g.selfUID
	}
	return Anonymous
}

// loadModels reads the served models once; they do not change after
// readiness, which every route but /metrics waits for.
func (g *Gateway) loadModels() {
	g.once.Do(func() {
		g.models = map[string]*modelInfo{}
		mgr := g.srv.Sessions()
		if mgr == nil {
			return
		}
		now := time.Now().Unix()
		for _, m := range mgr.Models() {
			tok, _ := mgr.Tokenizer(m.Name)
			g.models[m.Name] = &modelInfo{name: m.Name, ctxLen: m.ContextLength, vocab: m.VocabSize, hidden: m.HiddenSize, tok: tok, created: now}
			g.order = append(g.order, m.Name)
		}
	})
}

// model resolves a request's model name; "" means the only model served.
func (g *Gateway) model(name string) (*modelInfo, *apiError) {
	g.loadModels()
	if name == "" {
		if len(g.order) == 1 {
			return g.models[g.order[0]], nil
		}
		return nil, badParam("model", "model: missing (this daemon serves %d models)", len(g.order))
	}
	if m, ok := g.models[name]; ok {
		return m, nil
	}
	return nil, &apiError{status: fasthttp.StatusNotFound, param: "model", code: "model_not_found",
		msg: fmt.Sprintf("model %q does not exist; GET /v1/models lists the served models", name)}
}

// apiError is an error reply in OpenAI's shape.
type apiError struct {
	status int
	msg    string
	param  string
	code   string
}

func (e *apiError) Error() string { return e.msg }

func badParam(param, format string, args ...any) *apiError {
	return &apiError{status: fasthttp.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (e *apiError) body() daemon.ErrorBody {
	return daemon.ErrorBody{Error: daemon.ErrorDetail{Message: e.msg, Type: daemon.ErrorType(e.status),
		Param: strPtr(e.param), Code: strPtr(e.code)}}
}

func writeError(ctx *fasthttp.RequestCtx, e *apiError) {
	daemon.WriteJSON(ctx, e.status, e.body())
}

// fromSession maps a session error to an API error.
func fromSession(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	e := &apiError{status: daemon.StatusOf(err), msg: err.Error()}
	switch {
	case errors.Is(err, session.ErrUnknownModel):
		e.code, e.param = "model_not_found", "model"
	case errors.Is(err, session.ErrContextLength):
		e.code = "context_length_exceeded"
	case errors.Is(err, session.ErrQueueFull):
		e.code = "rate_limit_exceeded"
	case errors.Is(err, session.ErrNotFound):
		e.code, e.param = "session_not_found", "session_id"
	}
	return e
}
