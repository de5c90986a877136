package daemon

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close() // leaves the file behind, like a crashed daemon
	if _, err := os.Lstat(path); err != nil {
		t.Fatal("the stale socket file should still exist")
	}
	ln, lock, err := ListenUnix(path, quiet)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer lock.Close()
	defer ln.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v", st.Mode())
	}
}

func TestLiveSocketRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	live, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	_, _, err = ListenUnix(path, quiet)
	if !errors.Is(err, ErrSocketInUse) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("live socket: %v", err)
	}
	// A second daemon of ours holds the lock: also refused.
	path2 := filepath.Join(t.TempDir(), "t.sock")
	ln, lock, err := ListenUnix(path2, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	defer ln.Close()
	if _, _, err := ListenUnix(path2, quiet); !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("second listener: %v", err)
	}
}

func TestNonSocketFileKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	os.WriteFile(path, []byte("precious"), 0o644)
	if _, _, err := ListenUnix(path, quiet); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("file was touched")
	}
}
