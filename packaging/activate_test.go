package packaging_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/packaging"
)

// TestSocketActivation starts the packaged pocketd the way the packaged
// units do, through systemd-socket-activate: the unit's ExecStart (binary
// and config taken from the .deb) with both sockets named as the units name
// them, the Unix socket moved to a scratch directory and the gateway to a
// free loopback port. The first request arrives before the daemon exists
// (it is what starts it), as under systemd. The daemon must send READY=1,
// answer on both sockets, ping the watchdog, and exit cleanly on SIGTERM.
// --demo and --state-dir are added so it needs no model and writes only here.
func TestSocketActivation(t *testing.T) {
	needTool(t, "systemd-socket-activate", "systemd")
	_, root := buildDeb(t)
	bin := filepath.Join(root, "usr/bin/pocketd")
	if out, err := exec.Command(bin, "serve", "--help").CombinedOutput(); err != nil {
		t.Skipf("the packaged pocketd has no serve subcommand yet (%v): %s", err, bytes.TrimSpace(out))
	}

	unitDir := filepath.Join(root, "usr/lib/systemd/system")
	load := func(name string) unit {
		b, err := os.ReadFile(filepath.Join(unitDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return parseUnit(t, b)
	}
	svc, unixUnit, httpUnit := load("pocketd.service"), load("pocketd.socket"), load("pocketd-http.socket")

	dir := t.TempDir()
	sock := filepath.Join(dir, "pocketd.sock")
	if unixUnit.get("Socket", "ListenStream") != "/run/pocketd/pocketd.sock" {
		t.Fatalf("pocketd.socket listens on %q; update this test", unixUnit.get("Socket", "ListenStream"))
	}
	httpAddr := freePort(t)

	// ExecStart with the packaged binary and a copy of the packaged config.
	argv := strings.Fields(svc.get("Service", "ExecStart"))
	argv[0] = bin
	cfg := filepath.Join(dir, "pocketd.toml")
	b, err := os.ReadFile(filepath.Join(root, packaging.ConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, a := range argv {
		if a == packaging.ConfigPath {
			argv[i] = cfg
		}
	}
	argv = append(argv, "--demo", "--state-dir", filepath.Join(dir, "state"))

	notify := listenNotify(t, filepath.Join(dir, "notify"))
	args := []string{
		"--listen=" + sock, "--listen=" + httpAddr,
		"--fdname=" + unixUnit.get("Socket", "FileDescriptorName") + ":" + httpUnit.get("Socket", "FileDescriptorName"),
		"--setenv=NOTIFY_SOCKET=" + notify.path,
		"--setenv=WATCHDOG_USEC=2000000",
		"--",
	}
	cmd := exec.Command("systemd-socket-activate", append(args, argv...)...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("systemd-socket-activate and pocketd said:\n%s", logs.String())
		}
	})
	waitFor(t, exited, func() bool { _, err := os.Stat(sock); return err == nil }, "the socket to appear")

	// This request starts the daemon. It may be answered before the model
	// has loaded ("loading", 503) or after; either way it must be answered.
	health := make(chan error, 1)
	go func() {
		err := get(unixClient(sock), "http://pocketd/v0/health")
		if err != nil && strings.Contains(err.Error(), "503") {
			err = nil
		}
		health <- err
	}()

	if err := notify.wait("READY=1", 2*time.Minute, exited); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-health:
		if err != nil {
			t.Fatalf("the activating request over the Unix socket: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the activating request over the Unix socket got no answer")
	}
	if err := get(unixClient(sock), "http://pocketd/v0/health"); err != nil {
		t.Errorf("Unix socket after READY=1: %v", err)
	}
	if err := get(unixClient(sock), "http://pocketd/v0/models"); err != nil {
		t.Errorf("Unix socket: %v", err)
	}
	if err := get(http.DefaultClient, "http://"+httpAddr+"/health"); err != nil {
		t.Errorf("HTTP gateway socket: %v", err)
	}
	if err := notify.wait("WATCHDOG=1", 5*time.Second, exited); err != nil {
		t.Errorf("with WATCHDOG_USEC=2s: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("pocketd after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("pocketd did not exit within 30s of SIGTERM")
	}
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

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

func get(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// waitFor polls cond for up to a minute, failing early if the process exits.
func waitFor(t *testing.T, exited <-chan error, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		select {
		case err := <-exited:
			t.Fatalf("exited (%v) while waiting for %s", err, what)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// notifySocket is a stand-in for systemd's notification socket: it collects
// the sd_notify assignments the daemon sends.
type notifySocket struct {
	path string
	msgs chan string
}

func listenNotify(t *testing.T, path string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &notifySocket{path: path, msgs: make(chan string, 1024)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(buf[:k]))
			for sc.Scan() {
				select {
				case n.msgs <- sc.Text():
				default:
				}
			}
		}
	}()
	return n
}

// wait returns once the daemon sends want, or an error on timeout or exit.
func (n *notifySocket) wait(want string, d time.Duration, exited <-chan error) error {
	timeout := time.After(d)
	var seen []string
	for {
		select {
		case m, ok := <-n.msgs:
			if !ok {
				return fmt.Errorf("notify socket closed before %s", want)
			}
			if m == want {
				return nil
			}
			seen = append(seen, m)
		case err := <-exited:
			return fmt.Errorf("pocketd exited (%v) before sending %s; it sent %q", err, want, seen)
		case <-timeout:
			return fmt.Errorf("no %s within %s; pocketd sent %q", want, d, seen)
		}
	}
}
