package worker

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
)

// Commander makes the command line of one worker start. The Proxy adds
// the socketpair as ExtraFiles[0] (fd 3 in the worker) and takes over
// stdout and stderr (their lines go to the log).
type Commander func() *exec.Cmd

// FindBinary locates pocket-worker: bin when set, else $POCKET_WORKER,
// else pocket-worker next to this executable, else on $PATH.
func FindBinary(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	if b := os.Getenv("POCKET_WORKER"); b != "" {
		return b, nil
	}
	if exe, err := os.Executable(); err == nil {
		b := filepath.Join(filepath.Dir(exe), "pocket-worker")
		if _, err := os.Stat(b); err == nil {
			return b, nil
		}
	}
	b, err := exec.LookPath("pocket-worker")
	if err != nil {
		return "", fmt.Errorf("pocket-worker not found next to %s or on $PATH (set $POCKET_WORKER or the model's worker path): %w", os.Args[0], err)
	}
	return b, nil
}

// DefaultCommand runs `BIN serve-rank --backend B --device N`.
func DefaultCommand(bin, backend string, device int) Commander {
	return func() *exec.Cmd {
		return exec.Command(bin, "serve-rank", "--backend", backend, "--device", strconv.Itoa(device), "--fd", "3")
	}
}

// proc is one worker process and its connection.
type proc struct {
	gen     int
	cmd     *exec.Cmd
	conn    *net.UnixConn
	r       *bufio.Reader
	ready   Ready
	started time.Time
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
	tail    tail
	once    sync.Once
}

// kill ends the process and its connection (idempotent).
func (pr *proc) kill() {
	pr.once.Do(func() {
		if pr.cmd != nil && pr.cmd.Process != nil {
			pr.cmd.Process.Kill()
		}
		pr.conn.Close()
	})
}

func (pr *proc) pid() int {
	if pr.cmd == nil || pr.cmd.Process == nil {
		return 0
	}
	return pr.cmd.Process.Pid
}

// stop closes the connection (the worker exits on EOF) and kills the
// process if it has not exited after a while.
func (pr *proc) stop() {
	pr.conn.Close()
	select {
	case <-pr.exited:
	case <-time.After(5 * time.Second):
		pr.kill()
		<-pr.exited
	}
}

func (pr *proc) exitErr() error {
	err := pr.waitErr
	if err == nil {
		err = errors.New("exited")
	}
	if t := pr.tail.String(); t != "" {
		return fmt.Errorf("worker pid %d: %w; its last output: %s", pr.pid(), err, t)
	}
	return fmt.Errorf("worker pid %d: %w", pr.pid(), err)
}

// spawn starts generation gen of the worker and runs the handshake,
// allocating pool when it is set.
func (p *Proxy) spawn(gen int, pool kernels.KVSpec) (*proc, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "pocketd-worker")
	child := os.NewFile(uintptr(fds[1]), "pocket-worker-rank")
	defer parent.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		child.Close()
		return nil, err
	}
	cmd := p.opts.Command()
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stdout, cmd.Stderr = outW, outW
	// The worker also dies with the daemon (it exits on EOF as well).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	// Only the worker holds its end now: its exit is our EOF.
	child.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		return nil, fmt.Errorf("start worker %s: %w", cmd.Path, err)
	}
	pr := &proc{gen: gen, cmd: cmd, started: time.Now(), exited: make(chan struct{})}
	log := p.log.With("pid", cmd.Process.Pid)
	go func() {
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 4096), 1<<20)
		for sc.Scan() {
			pr.tail.add(sc.Text())
			log.Info("worker: " + sc.Text())
		}
	}()
	go func() {
		pr.waitErr = cmd.Wait()
		close(pr.exited)
	}()
	fc, err := net.FileConn(parent)
	if err != nil {
		cmd.Process.Kill()
		<-pr.exited
		return nil, err
	}
	pr.conn = fc.(*net.UnixConn)
	pr.r = bufio.NewReaderSize(pr.conn, 1<<16)
	if err := p.handshake(pr, pool); err != nil {
		pr.kill()
		<-pr.exited
		if t := pr.tail.String(); t != "" {
			err = fmt.Errorf("%w; its last output: %s", err, t)
		}
		return nil, fmt.Errorf("worker %s: %w", p.opts.Hello.Name, err)
	}
	log.Info("worker ready", "device", pr.ready.Device, "generation", gen, "took", time.Since(pr.started).Round(time.Millisecond))
	return pr, nil
}

func (p *Proxy) handshake(pr *proc, pool kernels.KVSpec) error {
	h := p.opts.Hello
	h.Version, h.Pool = Version, pool
	pr.conn.SetDeadline(time.Now().Add(p.opts.StartTimeout))
	defer pr.conn.SetDeadline(time.Time{})
	if err := writeFrame(pr.conn, msgHello, 0, h.encode(), nil); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	f, err := readFrame(pr.r, 64<<20)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	switch f.typ {
	case msgError:
		re, err := decodeError(f.payload)
		if err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		return re
	case msgReady:
	default:
		return fmt.Errorf("handshake: %w: %s instead of ready", ErrBadFrame, f.typ)
	}
	r, err := decodeReady(f.payload)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if p.cfg != nil && (r.KV != p.ready.KV || string(r.Config) != string(p.ready.Config)) {
		return fmt.Errorf("handshake: the restarted worker loaded a different model")
	}
	pr.ready = r
	return nil
}

// tail keeps a worker's last lines of output for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 8 {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, s)
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}
