// Package client is the Go client of pocketd's Unix-socket API (/v0).
//
// The zero Client is ready to use: it finds the socket in $POCKETD_SOCKET,
// else $XDG_RUNTIME_DIR/pocketd.sock, else /run/pocketd/pocketd.sock, and
// retries the connection for a few seconds while the daemon starts. The
// socket path, the dialer and the whole HTTP client can be replaced.
//
// Every non-2xx reply becomes an *Error carrying the status and the
// daemon's message; it unwraps to a sentinel (ErrNotFound, ErrBadRequest,
// ErrBusy, ErrUnavailable) so callers can branch with errors.Is.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/pocketllm/pocketllm/client/apitype"
)

// Sentinel errors an *Error unwraps to.
var (
	ErrNotFound    = errors.New("not found")              // 404: no such session or model (for this user)
	ErrBadRequest  = errors.New("bad request")            // 400, 413
	ErrBusy        = errors.New("daemon busy")            // 429: the model's queue is full
	ErrUnavailable = errors.New("not ready")              // 503: loading or stopping
	ErrServer      = errors.New("daemon error")           // 5xx
	ErrNoDaemon    = errors.New("pocketd is not running") // nobody listens on the socket
)

// Error is a non-2xx reply from the daemon.
type Error struct {
	Status  int
	Message string
	Type    string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("pocketd: HTTP %d", e.Status)
	}
	return "pocketd: " + e.Message
}

// Unwrap maps the status to a sentinel error.
func (e *Error) Unwrap() error {
	switch {
	case e.Status == http.StatusNotFound:
		return ErrNotFound
	case e.Status == http.StatusTooManyRequests:
		return ErrBusy
	case e.Status == http.StatusServiceUnavailable:
		return ErrUnavailable
	case e.Status >= 400 && e.Status < 500:
		return ErrBadRequest
	}
	return ErrServer
}

// DefaultSocket is the socket path a zero Client uses.
func DefaultSocket() string {
	if s := os.Getenv("POCKETD_SOCKET"); s != "" {
		return s
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "pocketd.sock")
	}
	return "/run/pocketd/pocketd.sock"
}

// Client talks to pocketd. The zero value is usable; set fields before the
// first call.
type Client struct {
	// Socket is the Unix socket path ("": DefaultSocket()).
	Socket string
	// Dial replaces the Unix-socket dialer (tests, other transports).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// HTTPClient replaces the whole HTTP client; Socket and Dial are then
	// unused.
	HTTPClient *http.Client
	// StartWait bounds how long a call retries connecting while the
	// daemon starts (0: 3s; negative: no retry).
	StartWait time.Duration

	once sync.Once
	hc   *http.Client
}

func (c *Client) socket() string {
	if c.Socket != "" {
		return c.Socket
	}
	return DefaultSocket()
}

func (c *Client) http() *http.Client {
	c.once.Do(func() {
		if c.HTTPClient != nil {
			c.hc = c.HTTPClient
			return
		}
		c.hc = &http.Client{Transport: &http.Transport{
			DialContext:         c.dial,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		}}
	})
	return c.hc
}

// dial connects to the socket, retrying while the daemon starts: the
// socket file may not exist yet (ENOENT) or nobody accepts yet
// (ECONNREFUSED).
func (c *Client) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	dial := c.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	wait := c.StartWait
	if wait == 0 {
		wait = 3 * time.Second
	}
	deadline := time.Now().Add(wait)
	backoff := 20 * time.Millisecond
	for {
		conn, err := dial(ctx, "unix", c.socket())
		if err == nil {
			return conn, nil
		}
		retry := errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
		if !retry || time.Now().Add(backoff).After(deadline) {
			if retry {
				return nil, fmt.Errorf("%w: %s: %w", ErrNoDaemon, c.socket(), err)
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// do sends a request and returns the response of a 2xx reply; other
// statuses become *Error.
func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://pocketd"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http().Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		defer res.Body.Close()
		return nil, readError(res)
	}
	return res, nil
}

func readError(res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	e := &Error{Status: res.StatusCode}
	var body apitype.ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error.Message != "" {
		e.Message, e.Type = body.Error.Message, body.Error.Type
	} else {
		e.Message = string(bytes.TrimSpace(b))
	}
	return e
}

// call does a request and decodes a JSON reply into out.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	res, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, res.Body)
		return err
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("pocketd: decode reply: %w", err)
	}
	return nil
}

func sessionPath(id string, rest string) string {
	return "/v0/sessions/" + url.PathEscape(id) + rest
}

// Health returns the daemon's status. A daemon that is loading or
// stopping answers with its Health (Status "loading" or "stopping") and
// an *Error unwrapping to ErrUnavailable.
func (c *Client) Health(ctx context.Context) (*apitype.Health, error) {
	var h apitype.Health
	err := c.call(ctx, "GET", "/v0/health", nil, &h)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusServiceUnavailable {
		if json.Unmarshal([]byte(e.Message), &h) == nil && h.Status != "" {
			e.Message = "pocketd is " + h.Status
			return &h, err
		}
	}
	return &h, err
}

// WaitReady polls Health until the daemon is ready (models loaded), the
// daemon is stopping, or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		h, err := c.Health(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrUnavailable) || h.Status == "stopping" {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Models lists the served models.
func (c *Client) Models(ctx context.Context) ([]apitype.Model, error) {
	var m apitype.Models
	return m.Models, c.call(ctx, "GET", "/v0/models", nil, &m)
}

// NewSession creates a session on model.
func (c *Client) NewSession(ctx context.Context, model string) (*apitype.Session, error) {
	var s apitype.Session
	return &s, c.call(ctx, "POST", "/v0/sessions", apitype.CreateSession{Model: model}, &s)
}

// Sessions lists the caller's sessions.
func (c *Client) Sessions(ctx context.Context) ([]apitype.Session, error) {
	var s apitype.Sessions
	return s.Sessions, c.call(ctx, "GET", "/v0/sessions", nil, &s)
}

// Session returns one session's metadata.
func (c *Client) Session(ctx context.Context, id string) (*apitype.Session, error) {
	var s apitype.Session
	return &s, c.call(ctx, "GET", sessionPath(id, ""), nil, &s)
}

// DeleteSession removes a session.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", sessionPath(id, ""), nil, nil)
}

// Tokens returns a session's token history.
func (c *Client) Tokens(ctx context.Context, id string) ([]int32, error) {
	var t apitype.Tokens
	return t.Tokens, c.call(ctx, "GET", sessionPath(id, "/tokens"), nil, &t)
}

// Append appends input to a session.
func (c *Client) Append(ctx context.Context, id string, in apitype.Append) (*apitype.AppendResult, error) {
	var r apitype.AppendResult
	return &r, c.call(ctx, "POST", sessionPath(id, "/append"), in, &r)
}

// AppendText appends text (tokenized by the daemon, no special tokens
// added).
func (c *Client) AppendText(ctx context.Context, id, text string) (*apitype.AppendResult, error) {
	return c.Append(ctx, id, apitype.Append{Text: &text})
}

// AppendTokens appends token ids.
func (c *Client) AppendTokens(ctx context.Context, id string, tokens []int32) (*apitype.AppendResult, error) {
	return c.Append(ctx, id, apitype.Append{Tokens: tokens})
}

// AppendMessages renders messages with the model's chat template and
// appends them (with the assistant generation prompt).
func (c *Client) AppendMessages(ctx context.Context, id string, msgs ...apitype.Message) (*apitype.AppendResult, error) {
	return c.Append(ctx, id, apitype.Append{Messages: msgs})
}

// Fork copies a session's first at tokens (at < 0: all) into a new
// session of the same owner.
func (c *Client) Fork(ctx context.Context, id string, at int) (*apitype.Session, error) {
	var body apitype.Fork
	if at >= 0 {
		body.At = &at
	}
	var s apitype.Session
	return &s, c.call(ctx, "POST", sessionPath(id, "/fork"), body, &s)
}

// Truncate cuts a session to length tokens.
func (c *Client) Truncate(ctx context.Context, id string, length int) (*apitype.Session, error) {
	var s apitype.Session
	return &s, c.call(ctx, "POST", sessionPath(id, "/truncate"), apitype.Truncate{Length: &length}, &s)
}

// Generate generates tokens at the end of a session and appends them to
// it. With onToken nil the reply comes whole; otherwise the call streams
// and onToken runs for each token as it is generated. An error returned by
// onToken ends the stream (the daemon stops generating) and is returned.
func (c *Client) Generate(ctx context.Context, id string, req apitype.Generate, onToken func(apitype.Token) error) (*apitype.GenerateResult, error) {
	req.Stream = onToken != nil
	if !req.Stream {
		var r apitype.GenerateResult
		return &r, c.call(ctx, "POST", sessionPath(id, "/generate"), req, &r)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := c.do(ctx, "POST", sessionPath(id, "/generate"), req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var line apitype.StreamLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("pocketd: bad stream line %q: %w", sc.Bytes(), err)
		}
		switch {
		case line.Error != nil:
			return nil, streamError(line.Error)
		case line.Done:
			r := &apitype.GenerateResult{Done: true, IDs: line.IDs, Text: line.Text, FinishReason: line.FinishReason}
			if r.IDs == nil {
				r.IDs = []int32{}
			}
			if line.Usage != nil {
				r.Usage = *line.Usage
			}
			return r, nil
		case line.ID != nil:
			tok := apitype.Token{ID: *line.ID, Text: line.Text, Logprob: line.Logprob, TopLogprobs: line.TopLogprobs}
			if err := onToken(tok); err != nil {
				return nil, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pocketd: stream: %w", err)
	}
	return nil, fmt.Errorf("pocketd: stream ended without a result: %w", io.ErrUnexpectedEOF)
}

// streamError turns an error line into an *Error with the status its type
// implies.
func streamError(d *apitype.ErrorDetail) error {
	status := http.StatusInternalServerError
	switch d.Type {
	case "invalid_request_error":
		status = http.StatusBadRequest
	case "not_found_error":
		status = http.StatusNotFound
	case "rate_limit_error":
		status = http.StatusTooManyRequests
	case "unavailable_error":
		status = http.StatusServiceUnavailable
	}
	return &Error{Status: status, Message: d.Message, Type: d.Type}
}
