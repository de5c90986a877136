package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/valyala/fasthttp"
)

// Scope says where a route is served and when.
type Scope uint8

const (
	// OnSocket serves the route on the Unix socket.
	OnSocket Scope = 1 << iota
	// OnTCP serves the route on the TCP gateway listener.
	OnTCP
	// BeforeReady lets the route answer while models load; other routes
	// wait for readiness (health routes use it to answer 503).
	BeforeReady

	// Everywhere is OnSocket|OnTCP.
	Everywhere = OnSocket | OnTCP
)

// Mux is the daemon's single route table. A pattern is an exact path
// ("/v0/health") or, ending in "/", a subtree ("/v0/sessions/"); the
// longest matching pattern wins. Registering a pattern twice panics, so a
// conflict shows at start-up, never at request time.
type Mux struct {
	exact   map[string]route
	subtree map[string]route
	sorted  []string // subtree patterns, longest first
}

type route struct {
	scope Scope
	h     fasthttp.RequestHandler
}

// RouteSet is a group of routes mounted at start-up, e.g. the OpenAI
// gateway's /v1 routes.
type RouteSet interface {
	Register(m *Mux)
}

// NewMux returns an empty route table.
func NewMux() *Mux {
	return &Mux{exact: map[string]route{}, subtree: map[string]route{}}
}

// Handle registers h for pattern, served where scope says.
func (m *Mux) Handle(pattern string, scope Scope, h fasthttp.RequestHandler) {
	if !strings.HasPrefix(pattern, "/") || h == nil || scope&(OnSocket|OnTCP) == 0 {
		panic(fmt.Sprintf("daemon: bad route %q", pattern))
	}
	table := m.exact
	if strings.HasSuffix(pattern, "/") {
		table = m.subtree
	}
	if _, dup := table[pattern]; dup {
		panic(fmt.Sprintf("daemon: route %q registered twice", pattern))
	}
	table[pattern] = route{scope: scope, h: h}
	if strings.HasSuffix(pattern, "/") {
		m.sorted = append(m.sorted, pattern)
		sort.Slice(m.sorted, func(i, j int) bool { return len(m.sorted[i]) > len(m.sorted[j]) })
	}
}

// lookup finds the route for path served on listener kind on.
func (m *Mux) lookup(path string, on Scope) (route, bool) {
	if r, ok := m.exact[path]; ok && r.scope&on != 0 {
		return r, true
	}
	for _, p := range m.sorted {
		if strings.HasPrefix(path, p) {
			if r := m.subtree[p]; r.scope&on != 0 {
				return r, true
			}
		}
	}
	return route{}, false
}

// Patterns lists the registered patterns served on on, sorted.
func (m *Mux) Patterns(on Scope) []string {
	var out []string
	for p, r := range m.exact {
		if r.scope&on != 0 {
			out = append(out, p)
		}
	}
	for p, r := range m.subtree {
		if r.scope&on != 0 {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// ErrorBody is the JSON error shape of every route, the same as OpenAI's,
// so one writer serves /v0 and /v1.
type ErrorBody = apitype.ErrorBody

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail = apitype.ErrorDetail

// ErrorType is the error "type" used for an HTTP status.
func ErrorType(status int) string {
	switch {
	case status == fasthttp.StatusNotFound:
		return "not_found_error"
	case status == fasthttp.StatusTooManyRequests:
		return "rate_limit_error"
	case status == fasthttp.StatusUnauthorized:
		return "authentication_error"
	case status == fasthttp.StatusServiceUnavailable:
		return "unavailable_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	}
	return "server_error"
}

// WriteError replies with status and an ErrorBody carrying msg.
func WriteError(ctx *fasthttp.RequestCtx, status int, msg string) {
	WriteJSON(ctx, status, ErrorBody{Error: ErrorDetail{Message: msg, Type: ErrorType(status)}})
}

// WriteJSON replies with status and v as JSON.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = fasthttp.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"message":"encoding the reply failed","type":"server_error","param":null,"code":null}}` + "\n")
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(buf.Bytes())
}

// StreamBody sets ctx's body to what write writes, as SetBodyStreamWriter
// does, with a panic in write recovered and logged (the reply is cut
// short). fasthttp runs write on a goroutine of its own, which the
// handler's recover (Server.handler) does not reach: there a panic would
// end the daemon and every session's KV with it.
func StreamBody(ctx *fasthttp.RequestCtx, log *slog.Logger, write func(w *bufio.Writer)) {
	path := string(ctx.Path())
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("stream panic", "path", path, "panic", p, "stack", string(debug.Stack()))
			}
		}()
		write(w)
	})
}
