package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/internal/leakcheck"
)

// TestNoLeaksUnderChurn drives every kind of request a long-lived daemon
// sees, the ones that go wrong included (streams the client abandons,
// bodies cut off mid-request, connections opened and dropped, sessions
// that do not exist), over the socket API and the OpenAI gateway, and
// checks that the daemon's goroutines and file descriptors come back to
// where they stood before: one goroutine or descriptor left behind per
// request would, over weeks of uptime, take the daemon down. Then it stops
// the daemon and checks that nothing of it is left running.
//
// goleak (go.uber.org/goleak) is the check for the end: it names each
// goroutine left over by its stack, and retries while goroutines are still
// winding down, which a hand-rolled count cannot tell from a leak.
func TestNoLeaksUnderChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("churn")
	}
	before := leakcheck.Start(t)
	d := startDaemon(t, daemonOpts{})
	stopped := false
	defer func() {
		if !stopped {
			d.stop(t)
		}
	}()
	ch := newChurner(t, d)

	ch.round(0) // warm: lazily started workers, pools and caches
	ch.idle()
	gen0 := d.srv.Sessions().Stats().CompletionTokens
	base := leakcheck.Take(t)

	const rounds = 12
	for i := 1; i <= rounds; i++ {
		ch.round(i)
	}
	ch.idle()
	now := base.Check(t, fmt.Sprintf("%d rounds of churn", rounds), 2)
	// Three streams a round, each allowed 4000 tokens, were abandoned by
	// their clients after a token or two.
	gen := leakcheck.Idle(t, d.srv.Sessions().Stats(), gen0, rounds*3*400)
	t.Logf("after %d rounds: %d goroutines (warm %d), %d descriptors (warm %d), %d tokens generated",
		rounds, now.Goroutines, base.Goroutines, now.FDs, base.FDs, gen)

	d.stop(t)
	stopped = true
	// regexp2's process-wide clock for match timeouts stops a second after
	// the last timeout it serves.
	before.Stopped(t, goleak.IgnoreAnyFunction("github.com/dlclark/regexp2.runClock"))
}

// churner issues the requests of one round, with clients whose idle
// connections it can close (so that what stays open between rounds is the
// daemon's, not a keep-alive pool's).
type churner struct {
	t      *testing.T
	d      *testDaemon
	c      *client.Client
	unixTr *http.Transport
	tcpTr  *http.Transport
	tcp    *http.Client
}

func newChurner(t *testing.T, d *testDaemon) *churner {
	unixTr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.sock)
	}}
	tcpTr := &http.Transport{}
	return &churner{t: t, d: d, unixTr: unixTr, tcpTr: tcpTr,
		c: &client.Client{HTTPClient: &http.Client{Transport: unixTr}}, tcp: &http.Client{Transport: tcpTr}}
}

func (ch *churner) idle() {
	ch.unixTr.CloseIdleConnections()
	ch.tcpTr.CloseIdleConnections()
}

func (ch *churner) round(i int) {
	t, c, ctx := ch.t, ch.c, context.Background()
	t.Helper()

	// A session's life over the socket API: append, generate, fork,
	// truncate, delete.
	s, err := c.NewSession(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendText(ctx, s.ID, fmt.Sprintf("Round %d: once upon a time", i)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: new(8), Temperature: new(0.0)}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := c.Fork(ctx, s.ID, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Truncate(ctx, s.ID, 3); err != nil {
		t.Fatal(err)
	}

	// A stream the client stops reading (the callback's error closes it),
	// and one whose context it cancels: both must end the generation.
	leakcheck.Abandon(t, c, f.ID, s.ID, 4000, 3)

	// Requests that fail: a missing session, a malformed body, an unknown
	// model.
	if _, err := c.Session(ctx, "no-such-session"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing session: %v", err)
	}
	hc := &http.Client{Transport: ch.unixTr}
	if st, _ := do(t, hc, "POST", "http://pocketd/v0/sessions/"+s.ID+"/append", []byte(`{"text": `)); st != 400 {
		t.Fatalf("malformed append: %d", st)
	}
	if _, err := c.NewSession(ctx, "no-such-model"); err == nil {
		t.Fatal("unknown model: no error")
	}
	for _, id := range []string{s.ID, f.ID} {
		if err := c.DeleteSession(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// Connections dropped half-way: before a request line ends, in the
	// middle of a body, and right after connecting; on both listeners.
	for _, dial := range []func() (net.Conn, error){
		func() (net.Conn, error) { return net.Dial("unix", ch.d.sock) },
		func() (net.Conn, error) { return net.Dial("tcp", strings.TrimPrefix(ch.d.base, "http://")) },
	} {
		for _, partial := range []string{"", "POST /v0/sess", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"model\":"} {
			conn, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(conn, partial)
			conn.Close()
		}
	}

	// The gateway: a whole completion, a whole stream, a stream dropped
	// after its first chunk, and errors.
	base := ch.d.base
	chat := func(stream bool, maxTokens int) string {
		return fmt.Sprintf(`{"model":"demo","stream":%v,"max_tokens":%d,"temperature":0,"messages":[{"role":"user","content":"Hello, round %d"}]}`, stream, maxTokens, i)
	}
	if st, _ := do(t, ch.tcp, "POST", base+"/v1/chat/completions", []byte(chat(false, 6))); st != 200 {
		t.Fatalf("chat completion: %d", st)
	}
	readStream(t, ch.tcp, base+"/v1/chat/completions", chat(true, 6), -1)
	readStream(t, ch.tcp, base+"/v1/chat/completions", chat(true, 4000), 1)
	if st, _ := do(t, ch.tcp, "POST", base+"/v1/chat/completions", []byte(`{"model":"nope","messages":[]}`)); st < 400 {
		t.Fatalf("unknown model: %d", st)
	}
	if st, _ := do(t, ch.tcp, "POST", base+"/v1/completions", []byte(`{"model":"demo","prompt":`)); st != 400 {
		t.Fatalf("malformed completion: %d", st)
	}
}

// readStream posts body and reads its event stream: all of it (keep < 0)
// or keep data lines, then drops the connection.
func readStream(t *testing.T, hc *http.Client, url, body string, keep int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("stream: %d", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	n := 0
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "data: ") {
			continue
		}
		if sc.Text() == "data: [DONE]" {
			return
		}
		if n++; keep >= 0 && n == keep {
			return // the deferred cancel drops the connection mid-stream
		}
	}
	if keep < 0 {
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		t.Fatal("stream ended without [DONE]")
	}
}
