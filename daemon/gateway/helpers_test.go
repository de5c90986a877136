package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/daemon/gateway"
)

// A real daemon stack in process: daemon.Server with real TCP and Unix
// listeners, serving the built-in demo model (byte-level tokenizer, ChatML
// template), with the gateway mounted as pocketd serve mounts it.

type testDaemon struct {
	srv    *daemon.Server
	base   string // http://127.0.0.1:port
	sock   string
	tcp    *http.Client
	unix   *http.Client
	cancel context.CancelFunc
	done   chan error
}

type daemonOpts struct {
	keysFile string
	engines  map[string]daemon.Engine
	noWait   bool   // return before the models are loaded
	stateDir string // durable state (none: sessions and stored responses in memory)
}

func startDaemon(t testing.TB, o daemonOpts) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemon.Config{Version: daemon.ConfigVersion, Models: []daemon.ModelConfig{daemon.DemoModel()}}
	cfg.Server.Socket = filepath.Join(dir, "pocketd.sock")
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.APIKeysFile = o.keysFile
	cfg.Server.StateDir = o.stateDir
	cfg.Limits.MaxBodyBytes = 1 << 20
	cfg.Cache.KVBlocks = 2048
	srv, err := daemon.New(daemon.Options{Config: cfg, Engines: o.engines,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	srv.AddRoutes(gw)
	ctx, cancel := context.WithCancel(context.Background())
	d := &testDaemon{srv: srv, sock: cfg.Server.Socket, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- srv.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, h := srv.Addrs(); h != nil {
			d.base = "http://" + h.String()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon did not open its listeners")
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.tcp = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	d.unix = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.sock)
	}}}
	if !o.noWait {
		select {
		case <-srv.Ready():
		case err := <-d.done:
			t.Fatalf("daemon stopped: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("daemon not ready")
		}
	}
	return d
}

func (d *testDaemon) stop(t testing.TB) {
	d.cancel()
	if err := <-d.done; err != nil {
		t.Errorf("daemon Run: %v", err)
	}
	os.RemoveAll(filepath.Dir(d.sock))
}

var (
	sharedOnce sync.Once
	shared     *testDaemon
)

// sharedDaemon is one daemon for the tests that need no special config;
// TestMain stops it.
func sharedDaemon(t testing.TB) *testDaemon {
	sharedOnce.Do(func() { shared = startDaemon(t, daemonOpts{}) })
	if shared == nil {
		t.Fatal("shared daemon failed to start")
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.cancel()
		<-shared.done
		os.RemoveAll(filepath.Dir(shared.sock))
	}
	os.Exit(code)
}

// do sends a request and returns the status and body.
func do(t testing.TB, c *http.Client, method, url string, body []byte, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, b
}

func postJSON(t testing.TB, c *http.Client, url string, v any, header ...string) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, c, "POST", url, b, header...)
}

// errorBody is OpenAI's error shape, strictly: every key present.
type errorBody struct {
	Error *struct {
		Message *string `json:"message"`
		Type    *string `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// checkError asserts an error reply's status and shape and returns it.
func checkError(t testing.TB, status int, body []byte, want int) errorBody {
	t.Helper()
	if status != want {
		t.Fatalf("status %d, want %d; body %s", status, want, body)
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Fatalf("error body %s lacks error.%s", body, k)
		}
	}
	var e errorBody
	json.Unmarshal(body, &e)
	if e.Error.Message == nil || *e.Error.Message == "" || e.Error.Type == nil || *e.Error.Type == "" {
		t.Fatalf("error body %s: empty message or type", body)
	}
	return e
}

// sseEvents reads a whole event stream: the JSON of each data line, and
// whether it ended with [DONE]. A malformed line fails the test.
func sseEvents(r io.Reader) (events []map[string]any, done bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return events, done, fmt.Errorf("line %q is not a data line", line)
		}
		if done {
			return events, done, fmt.Errorf("data after [DONE]: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return events, done, fmt.Errorf("data %q: %v", data, err)
		}
		events = append(events, ev)
	}
	return events, done, sc.Err()
}
