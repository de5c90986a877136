package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/client"
)

// binDir holds the pocketd binary, built once for the package's
// subprocess tests (on first use, so unit-test runs do not pay for it).
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "pocketd-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(binDir, 0o755)
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// pocketdBinary builds ../cmd/pocketd once.
func pocketdBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "pocketd")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/pocketd").CombinedOutput()
		if err != nil {
			binError = fmt.Errorf("build pocketd: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// sharedDir makes a temp directory every uid can enter and write (the
// socket directory of the other-uid tests).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pocketd-test")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testServer is an in-process daemon on a real Unix socket and TCP port.
type testServer struct {
	srv    *Server
	sock   string
	http   string
	cancel context.CancelFunc
	done   chan error

	stopOnce sync.Once
	stopErr  error
}

// stop shuts the server down and returns what Run returned. The test's
// cleanup calls it too, so a test may stop its server early (to check
// what is left once it is gone).
func (ts *testServer) stop() error {
	ts.stopOnce.Do(func() {
		ts.cancel()
		ts.stopErr = <-ts.done
	})
	return ts.stopErr
}

func startServer(t *testing.T, models ...ModelConfig) *testServer {
	t.Helper()
	return startServerConfig(t, Config{Version: 1, Models: models})
}

// startServerConfig is startServer with cfg's [cache] and [limits] (its
// [server] table is the test's).
func startServerConfig(t *testing.T, cfg Config) *testServer {
	t.Helper()
	dir := sharedDir(t)
	cfg.Server.Socket = filepath.Join(dir, "pocketd.sock")
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.StateDir = filepath.Join(dir, "state")
	srv, err := New(Options{Config: cfg, Logger: quiet, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{srv: srv, sock: cfg.Server.Socket, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-ts.done:
		t.Fatalf("server exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("server not ready")
	}
	_, h := srv.Addrs()
	ts.http = h.String()
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return ts
}

func (ts *testServer) client() *client.Client { return &client.Client{Socket: ts.sock} }

// httpClient is a plain net/http client over the Unix socket, like
// `curl --unix-socket`.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func fixtureModel(arch string) ModelConfig {
	return ModelConfig{Path: filepath.Join("..", "models", "testdata", "models", arch)}
}
