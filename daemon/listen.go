package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// ErrSocketInUse means another process is accepting on the socket path.
var ErrSocketInUse = errors.New("socket in use")

// Listeners are the daemon's two listening sockets.
type Listeners struct {
	// Unix serves /v0 and the OpenAI routes to local clients; its
	// connections carry the peer's credentials (see PeerCred).
	Unix net.Listener
	// HTTP is the TCP gateway; nil when disabled.
	HTTP net.Listener
	// Activated reports which came from systemd socket activation.
	UnixActivated, HTTPActivated bool

	lock *os.File
}

// Close closes both listeners and releases the socket lock.
func (l *Listeners) Close() error {
	var errs []error
	if l.Unix != nil {
		errs = append(errs, ignoreClosed(l.Unix.Close()))
	}
	if l.HTTP != nil {
		errs = append(errs, ignoreClosed(l.HTTP.Close()))
	}
	if l.lock != nil {
		errs = append(errs, l.lock.Close())
	}
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// OpenListeners returns the listeners systemd passed (LISTEN_FDS, named
// "unix" and "http"; unnamed ones are told apart by address family), and
// opens whichever is missing itself: the Unix socket at socketPath (see
// ListenUnix) and TCP at listen ("off" or "" disables it).
func OpenListeners(socketPath, listen string, log *slog.Logger) (*Listeners, error) {
	l := &Listeners{}
	activated, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	for name, lns := range activated {
		for _, ln := range lns {
			if ln == nil {
				continue // not a listening stream socket
			}
			kind := name
			if kind != "unix" && kind != "http" {
				kind = "http"
				if ln.Addr().Network() == "unix" {
					kind = "unix"
				}
			}
			switch {
			case kind == "unix" && l.Unix == nil:
				l.Unix, l.UnixActivated = ln, true
			case kind == "http" && l.HTTP == nil:
				l.HTTP, l.HTTPActivated = ln, true
			default:
				log.Warn("ignoring extra activated socket", "name", name, "addr", ln.Addr().String())
				ln.Close()
			}
		}
	}
	if l.Unix == nil {
		ln, lock, err := ListenUnix(socketPath, log)
		if err != nil {
			l.Close()
			return nil, err
		}
		l.Unix, l.lock = ln, lock
	}
	if l.HTTP == nil && listen != "" && listen != "off" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("listen %s: %w", listen, err)
		}
		l.HTTP = ln
	}
	l.Unix = &credListener{Listener: l.Unix, log: log}
	return l, nil
}

// ListenUnix listens on a Unix socket at path, replacing a stale socket
// file safely: it takes an exclusive lock on path+".lock" (so two daemons
// starting at once cannot both remove and recreate it), dials the old
// socket, and removes the file only when nobody answers. A live socket
// gives ErrSocketInUse; a non-socket file at path is never removed. The
// socket is made mode 0666: every local user may connect, and sessions are
// isolated per uid by SO_PEERCRED; restrict access with the directory's
// permissions. The returned lock must stay open while listening.
func ListenUnix(path string, log *slog.Logger) (net.Listener, *os.File, error) {
	if path == "" {
		return nil, nil, errors.New("no socket path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := checkStale(path); err != nil {
		return nil, nil, err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("socket lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("%s: %w: another pocketd holds %s.lock", path, ErrSocketInUse, path)
	}
	// Under the lock, look again: the holder may have gone between the two.
	if err := checkStale(path); err != nil {
		lock.Close()
		return nil, nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		if err := os.Remove(path); err != nil {
			lock.Close()
			return nil, nil, fmt.Errorf("remove stale socket: %w", err)
		}
		log.Info("replaced stale socket", "path", path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		lock.Close()
		return nil, nil, fmt.Errorf("chmod socket: %w", err)
	}
	return ln, lock, nil
}

// checkStale returns nil when path is absent or a socket nobody accepts on.
func checkStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; not removing it", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		who := ""
		if cred, err := connCred(c); err == nil {
			who = fmt.Sprintf(" (pid %d)", cred.Pid)
		}
		c.Close()
		return fmt.Errorf("%s: %w: another process is serving it%s", path, ErrSocketInUse, who)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return nil // stale: nobody listens
	}
	return fmt.Errorf("probe %s: %w", path, err)
}

// credListener records the peer credentials of every accepted connection.
type credListener struct {
	net.Listener
	log *slog.Logger
}

// PeerConn is a Unix connection with its peer's credentials, taken at
// accept time (SO_PEERCRED).
type PeerConn struct {
	net.Conn
	UID, GID uint32
	PID      int32
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cred, err := connCred(c)
		if err != nil {
			// Without credentials we cannot tell whose sessions these are.
			l.log.Warn("dropping connection without peer credentials", "err", err)
			c.Close()
			continue
		}
		return &PeerConn{Conn: c, UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
	}
}

func connCred(c net.Conn) (*syscall.Ucred, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no file descriptor", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}
