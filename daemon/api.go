package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// The /v0 API on the Unix socket (see DESIGN.md). Each handler acts for
// the peer's uid: sessions of other uids do not exist for it (404).

func (s *Server) registerV0(m *Mux) {
	m.Handle("/health", Everywhere|BeforeReady, s.serveHealth)
	m.Handle("/v0/health", OnSocket|BeforeReady, s.serveHealth)
	m.Handle("/v0/models", OnSocket, s.serveModels)
	m.Handle("/v0/sessions", OnSocket, s.serveSessions)
	m.Handle("/v0/sessions/", OnSocket, s.serveSession)
}

// StatusOf maps a session error to an HTTP status.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, session.ErrNotFound), errors.Is(err, session.ErrUnknownModel):
		return fasthttp.StatusNotFound
	case errors.Is(err, session.ErrBadRequest), errors.Is(err, session.ErrContextLength), errors.Is(err, errBadBody):
		return fasthttp.StatusBadRequest
	case errors.Is(err, session.ErrQueueFull):
		return fasthttp.StatusTooManyRequests
	case errors.Is(err, session.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, worker.ErrWorkerLost):
		return fasthttp.StatusServiceUnavailable
	}
	return fasthttp.StatusInternalServerError
}

// WriteErr replies with err's status (StatusOf) and message.
func WriteErr(ctx *fasthttp.RequestCtx, err error) {
	WriteError(ctx, StatusOf(err), err.Error())
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow ...string) {
	ctx.Response.Header.Set("Allow", strings.Join(allow, ", "))
	WriteError(ctx, fasthttp.StatusMethodNotAllowed, "method "+string(ctx.Method())+" not allowed; use "+strings.Join(allow, " or "))
}

func (s *Server) serveHealth(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		methodNotAllowed(ctx, "GET")
		return
	}
	h := apitype.Health{Models: []string{}}
	h.Status, h.Message = s.status()
	for _, m := range s.ModelInfos() {
		h.Models = append(h.Models, m.Name)
	}
	if ws := s.workerHealth(); len(ws) > 0 {
		h.Workers = ws
	}
	status := fasthttp.StatusOK
	if h.Status != "ok" && h.Status != "no_models" {
		status = fasthttp.StatusServiceUnavailable
	}
	WriteJSON(ctx, status, h)
}

func (s *Server) serveModels(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx, "GET")
		return
	}
	WriteJSON(ctx, fasthttp.StatusOK, apitype.Models{Models: s.ModelInfos()})
}

// owner is the caller's uid; /v0 routes are served only on the socket,
// whose connections always carry one.
func owner(ctx *fasthttp.RequestCtx) (session.Owner, bool) {
	uid, ok := PeerUID(ctx)
	if !ok {
		WriteError(ctx, fasthttp.StatusForbidden, "the /v0 API is served on the Unix socket only")
	}
	return uid, ok
}

func sessionJSON(in session.Info) apitype.Session {
	return apitype.Session{ID: in.ID, Model: in.Model, Tokens: in.Tokens, Created: in.Created, Updated: in.Updated}
}

// serveSessions is /v0/sessions: GET lists, POST creates.
func (s *Server) serveSessions(ctx *fasthttp.RequestCtx) {
	uid, ok := owner(ctx)
	if !ok {
		return
	}
	mgr := s.Sessions()
	switch {
	case ctx.IsGet():
		out := apitype.Sessions{Sessions: []apitype.Session{}}
		for _, in := range mgr.List(uid) {
			out.Sessions = append(out.Sessions, sessionJSON(in))
		}
		WriteJSON(ctx, fasthttp.StatusOK, out)
	case ctx.IsPost():
		model, err := decodeCreate(ctx.PostBody())
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		if model == "" {
			// With one model served, it is the default.
			if ms := s.ModelInfos(); len(ms) == 1 {
				model = ms[0].Name
			} else {
				WriteError(ctx, fasthttp.StatusBadRequest, `model: missing (this daemon serves several models)`)
				return
			}
		}
		in, err := mgr.Open(uid, model)
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		WriteJSON(ctx, fasthttp.StatusOK, sessionJSON(in))
	default:
		methodNotAllowed(ctx, "GET", "POST")
	}
}

// serveSession is /v0/sessions/{id} and /v0/sessions/{id}/{action}.
func (s *Server) serveSession(ctx *fasthttp.RequestCtx) {
	uid, ok := owner(ctx)
	if !ok {
		return
	}
	rest := strings.TrimPrefix(string(ctx.Path()), "/v0/sessions/")
	id, action, _ := strings.Cut(rest, "/")
	if id == "" || strings.Contains(action, "/") {
		WriteError(ctx, fasthttp.StatusNotFound, "no route "+string(ctx.Path()))
		return
	}
	mgr := s.Sessions()
	post := func() bool {
		if !ctx.IsPost() {
			methodNotAllowed(ctx, "POST")
			return false
		}
		return true
	}
	switch action {
	case "":
		switch {
		case ctx.IsGet():
			in, err := mgr.Get(uid, id)
			if err != nil {
				WriteErr(ctx, err)
				return
			}
			WriteJSON(ctx, fasthttp.StatusOK, sessionJSON(in))
		case ctx.IsDelete():
			if err := mgr.Close(uid, id); err != nil {
				WriteErr(ctx, err)
				return
			}
			WriteJSON(ctx, fasthttp.StatusOK, apitype.Deleted{ID: id, Deleted: true})
		default:
			methodNotAllowed(ctx, "GET", "DELETE")
		}
	case "tokens":
		if !ctx.IsGet() {
			methodNotAllowed(ctx, "GET")
			return
		}
		toks, err := mgr.Tokens(uid, id)
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		if toks == nil {
			toks = []int32{}
		}
		WriteJSON(ctx, fasthttp.StatusOK, apitype.Tokens{Tokens: toks})
	case "append":
		if !post() {
			return
		}
		in, err := decodeAppend(ctx.PostBody())
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		res, err := mgr.Append(s.reqCtx, uid, id, in)
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		WriteJSON(ctx, fasthttp.StatusOK, apitype.AppendResult{Tokens: res.Tokens, Reused: res.Reused, Prefilled: res.Prefilled})
	case "generate":
		if post() {
			s.serveGenerate(ctx, mgr, uid, id)
		}
	case "fork":
		if !post() {
			return
		}
		at, err := decodeFork(ctx.PostBody())
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		in, err := mgr.Fork(uid, id, at)
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		WriteJSON(ctx, fasthttp.StatusOK, sessionJSON(in))
	case "truncate":
		if !post() {
			return
		}
		n, err := decodeTruncate(ctx.PostBody())
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		in, err := mgr.Truncate(uid, id, n)
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		WriteJSON(ctx, fasthttp.StatusOK, sessionJSON(in))
	default:
		WriteError(ctx, fasthttp.StatusNotFound, "no route "+string(ctx.Path()))
	}
}

func resultJSON(r session.GenerateResult, done bool) apitype.GenerateResult {
	ids := r.IDs
	if ids == nil {
		ids = []int32{}
	}
	return apitype.GenerateResult{Done: done, IDs: ids, Text: r.Text, FinishReason: r.FinishReason,
		Usage: apitype.Usage{PromptTokens: r.Usage.PromptTokens, CachedTokens: r.Usage.CachedTokens, CompletionTokens: r.Usage.CompletionTokens}}
}

func tokenJSON(ev session.TokenEvent, logprobs bool) apitype.Token {
	t := apitype.Token{ID: ev.ID, Text: ev.Text}
	if logprobs {
		lp := ev.Logprob
		t.Logprob = &lp
		for _, a := range ev.Top {
			t.TopLogprobs = append(t.TopLogprobs, apitype.TopLogprob{ID: a.ID, Text: a.Text, Logprob: a.Logprob})
		}
	}
	return t
}

// serveGenerate answers generate, whole or as NDJSON. When streaming, a
// failed flush means the client went away: the generation's context is
// cancelled, so it stops within a token.
func (s *Server) serveGenerate(ctx *fasthttp.RequestCtx, mgr *session.Manager, uid session.Owner, id string) {
	p, stream, err := decodeGenerate(ctx.PostBody())
	if err != nil {
		WriteErr(ctx, err)
		return
	}
	if !stream {
		res, err := mgr.Generate(s.reqCtx, uid, id, p, nil)
		if err != nil {
			WriteErr(ctx, err)
			return
		}
		WriteJSON(ctx, fasthttp.StatusOK, resultJSON(res, false))
		return
	}
	// Fail early, with a real status, for what can be known up front.
	if _, err := mgr.Get(uid, id); err != nil {
		WriteErr(ctx, err)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/x-ndjson")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	reqCtx, log := s.reqCtx, s.log
	StreamBody(ctx, log, func(w *bufio.Writer) {
		gctx, cancel := context.WithCancel(reqCtx)
		defer cancel()
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		gone := false
		res, err := mgr.Generate(gctx, uid, id, p, func(ev session.TokenEvent) error {
			if err := enc.Encode(tokenJSON(ev, p.Logprobs)); err != nil {
				gone = true
				return err
			}
			if err := w.Flush(); err != nil {
				gone = true
				cancel()
				return err
			}
			return nil
		})
		if gone {
			log.Debug("client went away during generate", "session", id, "generated", len(res.IDs))
			return
		}
		if err != nil {
			enc.Encode(ErrorBody{Error: ErrorDetail{Message: err.Error(), Type: ErrorType(StatusOf(err))}})
		} else {
			enc.Encode(resultJSON(res, true))
		}
		w.Flush()
	})
}
