package daemon

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// TestStreamBodyRecovers: a panic in a streamed body's writer (which runs
// on fasthttp's goroutine, out of the handler's recover) cuts that reply
// short and is logged; the process and the server go on.
func TestStreamBodyRecovers(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/ok" {
			ctx.SetBodyString("fine")
			return
		}
		StreamBody(ctx, log, func(w *bufio.Writer) {
			w.WriteString("partial")
			w.Flush()
			panic("a bug in a stream's writer")
		})
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()
	c := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.Dial() }}}
	if resp, err := c.Get("http://x/stream"); err == nil {
		b, _ := io.ReadAll(resp.Body) // cut short: an error or a partial body
		resp.Body.Close()
		if strings.Contains(string(b), "bug") {
			t.Fatalf("body %q", b)
		}
	}
	resp, err := c.Get("http://x/ok")
	if err != nil {
		t.Fatalf("the server after a stream's panic: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "fine" {
		t.Fatalf("after a stream's panic: %q", b)
	}
	if !strings.Contains(logs.String(), "stream panic") || !strings.Contains(logs.String(), "path=/stream") {
		t.Fatalf("log: %s", logs.String())
	}
}
