package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
)

// Tests of the real pocketd binary: sd_notify, socket activation, SIGTERM
// draining, kill -9 and restart, stale and live sockets.

// daemonProc is a running pocketd.
type daemonProc struct {
	cmd    *exec.Cmd
	sock   string
	stderr *syncBuffer
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemon runs `pocketd serve --demo` with the socket and state in
// dir; extra args and env are added.
func startDaemon(t *testing.T, dir string, env []string, args ...string) *daemonProc {
	t.Helper()
	sock := filepath.Join(dir, "pocketd.sock")
	all := append([]string{"serve", "--demo", "--socket", sock, "--listen", "off", "--state-dir", filepath.Join(dir, "state")}, args...)
	return runDaemon(t, exec.Command(pocketdBinary(t), all...), sock, env)
}

func runDaemon(t *testing.T, cmd *exec.Cmd, sock string, env []string) *daemonProc {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	d := &daemonProc{cmd: cmd, sock: sock, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("pocketd stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

func (d *daemonProc) client() *client.Client {
	return &client.Client{Socket: d.sock, StartWait: 30 * time.Second}
}

func (d *daemonProc) waitExit(t *testing.T) error {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("pocketd did not exit")
	}
	return nil
}

// notifySocket listens for sd_notify datagrams.
func notifySocket(t *testing.T, dir string) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 256)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return path, ch
}

// waitFor reads notifications until one has a line equal to want,
// returning everything read.
func waitFor(t *testing.T, ch <-chan string, want string) []string {
	t.Helper()
	var seen []string
	timeout := time.After(60 * time.Second)
	for {
		select {
		case msg, ok := <-ch:
			if !ok {
				t.Fatalf("notify socket closed waiting for %s; saw %q", want, seen)
			}
			seen = append(seen, msg)
			if slices.Contains(strings.Split(msg, "\n"), want) {
				return seen
			}
		case <-timeout:
			t.Fatalf("no %s; saw %q", want, seen)
		}
	}
}

func TestSystemdNotify(t *testing.T) {
	dir := sharedDir(t)
	notify, ch := notifySocket(t, dir)
	// Port 0, the bound address read from the log: a port picked free
	// beforehand could be taken by another test's process before pocketd
	// binds it (seen once, packages run side by side).
	d := startDaemon(t, dir, []string{"NOTIFY_SOCKET=" + notify, "WATCHDOG_USEC=200000"}, "--listen", "127.0.0.1:0")

	seen := waitFor(t, ch, "READY=1")
	port := loggedHTTPAddr(t, d)
	// At READY=1 both listeners accept and the models answer.
	if res, err := http.Get("http://" + port + "/health"); err != nil || res.StatusCode != 200 {
		t.Fatalf("TCP not ready at READY=1: %v %v", res, err)
	}
	c := &client.Client{Socket: d.sock, StartWait: -1}
	if h, err := c.Health(context.Background()); err != nil || h.Status != "ok" {
		t.Fatalf("socket not ready at READY=1: %v", err)
	}
	var statuses []string
	for _, m := range seen {
		for _, l := range strings.Split(m, "\n") {
			if s, ok := strings.CutPrefix(l, "STATUS="); ok {
				statuses = append(statuses, s)
			}
		}
	}
	if len(statuses) < 2 || !strings.Contains(strings.Join(statuses, "|"), "loading model demo") || !strings.HasPrefix(statuses[len(statuses)-1], "ready") {
		t.Errorf("STATUS lines %q", statuses)
	}
	waitFor(t, ch, "WATCHDOG=1")
	waitFor(t, ch, "WATCHDOG=1") // keeps pinging

	d.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, ch, "STOPPING=1")
	if err := d.waitExit(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(d.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after a clean exit: %v", err)
	}
}

// TestSIGTERMDrains: a stream in flight when SIGTERM arrives completes.
func TestSIGTERMDrains(t *testing.T) {
	dir := sharedDir(t)
	d := startDaemon(t, dir, nil)
	c := d.client()
	ctx := context.Background()
	s, err := c.NewSession(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	c.AppendText(ctx, s.ID, "Tell me everything.")
	got := 0
	res, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: intp(400), Temperature: f64(0)}, func(apitype.Token) error {
		if got++; got == 5 {
			d.cmd.Process.Signal(syscall.SIGTERM)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("stream cut by SIGTERM: %v", err)
	}
	if len(res.IDs) != got || got < 5 {
		t.Fatalf("streamed %d, result %d ids", got, len(res.IDs))
	}
	if err := d.waitExit(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
	if !strings.Contains(d.stderr.String(), "shutting down") {
		t.Errorf("log: %s", d.stderr.String())
	}
}

// loggedHTTPAddr is the gateway's address from pocketd's "listening" log
// line (logged before READY=1).
func loggedHTTPAddr(t *testing.T, d *daemonProc) string {
	t.Helper()
	m := regexp.MustCompile(`\bhttp"?[=:]"?(127\.0\.0\.1:[0-9]+)`).FindStringSubmatch(d.stderr.String())
	if m == nil {
		t.Fatalf("no gateway address in the log:\n%s", d.stderr.String())
	}
	return m[1]
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestSocketActivation(t *testing.T) {
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatal("systemd-socket-activate not installed (apt-get install systemd)")
	}
	dir := sharedDir(t)
	sock := filepath.Join(dir, "activated.sock")
	port := freePort(t)
	// The daemon's own flags point elsewhere: it must use the passed fds.
	cmd := exec.Command(activate, "-l", sock, "-l", port, "--fdname=unix:http",
		pocketdBinary(t), "serve", "--demo", "--socket", filepath.Join(dir, "unused.sock"), "--listen", "127.0.0.1:1",
		"--state-dir", filepath.Join(dir, "state"))
	d := runDaemon(t, cmd, sock, nil)
	// systemd-socket-activate starts pocketd on the first connection.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socket never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := d.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" {
		t.Fatalf("health over the activated socket: %+v %v", h, err)
	}
	res, err := http.Get("http://" + port + "/health")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("health over the activated TCP socket: %v %v", res, err)
	}
	res.Body.Close()
	if _, err := os.Stat(filepath.Join(dir, "unused.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Error("pocketd opened its own socket despite activation")
	}
	if log := d.stderr.String(); !strings.Contains(log, "socket_activated=true") || !strings.Contains(log, "http_activated=true") {
		t.Errorf("log does not show activation:\n%s", log)
	}
}

// TestKill9Restart: answered calls survive kill -9, and the restarted
// daemon continues the session exactly as an uninterrupted one would.
func TestKill9Restart(t *testing.T) {
	dir := sharedDir(t)
	ctx := context.Background()
	d := startDaemon(t, dir, nil)
	c := d.client()
	s, err := c.NewSession(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendMessages(ctx, s.ID, apitype.Message{Role: "user", Content: "Remember this."}); err != nil {
		t.Fatal(err)
	}
	seed := uint64(42)
	g := apitype.Generate{MaxTokens: intp(10), Temperature: f64(0.9), Seed: &seed}
	if _, err := c.Generate(ctx, s.ID, g, nil); err != nil {
		t.Fatal(err)
	}
	fork, err := c.Fork(ctx, s.ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := c.Tokens(ctx, s.ID)
	// Reference: the same history in a fresh session, continued here.
	ref, _ := c.NewSession(ctx, "demo")
	c.AppendTokens(ctx, ref.ID, before)
	want, err := c.Generate(ctx, ref.ID, g, nil)
	if err != nil {
		t.Fatal(err)
	}

	d.cmd.Process.Signal(syscall.SIGKILL)
	d.waitExit(t)
	if _, err := os.Stat(d.sock); err != nil {
		t.Fatalf("kill -9 should leave the socket file: %v", err)
	}

	d2 := startDaemon(t, dir, nil) // replaces the stale socket
	c2 := d2.client()
	after, err := c2.Tokens(ctx, s.ID)
	if err != nil || !slices.Equal(after, before) {
		t.Fatalf("tokens after kill -9: %v %v, want %v", after, err, before)
	}
	if f, err := c2.Session(ctx, fork.ID); err != nil || f.Tokens != 5 {
		t.Fatalf("fork after kill -9: %+v %v", f, err)
	}
	got, err := c2.Generate(ctx, s.ID, g, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.IDs, want.IDs) {
		t.Fatalf("continuation after restart %v, uninterrupted %v", got.IDs, want.IDs)
	}
	if !strings.Contains(d2.stderr.String(), "replaced stale socket") {
		t.Errorf("log does not mention the stale socket:\n%s", d2.stderr.String())
	}
}

// TestLiveSocketFailsClearly: a second daemon on the same socket exits
// with an error that says the socket is in use.
func TestLiveSocketFailsClearly(t *testing.T) {
	dir := sharedDir(t)
	d := startDaemon(t, dir, nil)
	if err := d.client().WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, dir, nil)
	err := d2.waitExit(t)
	if err == nil || !strings.Contains(d2.stderr.String(), "socket in use") || !strings.Contains(d2.stderr.String(), fmt.Sprint(d.cmd.Process.Pid)) {
		t.Fatalf("second daemon: %v\n%s", err, d2.stderr.String())
	}
	if _, err := d.client().Health(context.Background()); err != nil {
		t.Fatalf("first daemon hurt: %v", err)
	}
}
