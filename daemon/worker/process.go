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

// Commander makes the command line of one rank's start (rank 0 of 1
// for a single worker). The Proxy adds the socketpair as ExtraFiles[0]
// (fd 3 in the worker) and the shared-memory region, when there is one,
// as ExtraFiles[1] (fd 4), and takes over stdout and stderr (their lines
// go to the log).
type Commander func(rank int) *exec.Cmd

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

// DefaultCommand runs `BIN serve-rank --backend B --device D --rank R`,
// rank R on devices[R] (the device is ignored by the CPU backend; without
// devices, rank R gets device R).
func DefaultCommand(bin, backend string, devices ...int) Commander {
	return func(rank int) *exec.Cmd {
		dev := rank
		if rank < len(devices) {
			dev = devices[rank]
		}
		return exec.Command(bin, "serve-rank", "--backend", backend, "--device", strconv.Itoa(dev),
			"--rank", strconv.Itoa(rank), "--fd", "3")
	}
}

// proc is one worker process and its connection.
type proc struct {
	gen     int
	rank    int
	cmd     *exec.Cmd
	conn    *net.UnixConn
	r       *bufio.Reader
	world   int // ranks in its group
	ready   Ready
	started time.Time
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
	tail    tail
	once    sync.Once
	// shm is the rank's shared-memory region (a sealed memfd of shmSize
	// bytes), which the daemon reads and writes with pread/pwrite;
	// shmSize is 0 when there is none or the worker did not map it.
	shm     *os.File
	shmSize int64
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

func (pr *proc) exitErr() error {
	err := pr.waitErr
	if err == nil {
		err = errors.New("exited")
	}
	return pr.wrap(err)
}

// wrap names the process (and its rank in a group) in err, with its last
// lines of output.
func (pr *proc) wrap(err error) error {
	who := fmt.Sprintf("worker pid %d", pr.pid())
	if pr.rank > 0 || pr.world > 1 {
		who = fmt.Sprintf("rank %d (pid %d)", pr.rank, pr.pid())
	}
	if t := pr.tail.String(); t != "" {
		return fmt.Errorf("%s: %w; its last output: %s", who, err, t)
	}
	return fmt.Errorf("%s: %w", who, err)
}

// group is the processes of one generation: one worker, or the ranks of
// a tensor-parallel group, which live and die together.
type group struct {
	gen     int
	ranks   []*proc
	dir     string // the rendezvous directory ("" for one worker)
	started time.Time
	down    chan struct{} // closed when the first rank has exited
	downErr error         // that rank's exit, set before down closes
	once    sync.Once
}

// kill ends every rank (idempotent).
func (g *group) kill() {
	for _, pr := range g.ranks {
		pr.kill()
	}
}

// wait waits until every rank has exited, then removes the rendezvous
// directory.
func (g *group) wait() {
	for _, pr := range g.ranks {
		<-pr.exited
	}
	if g.dir != "" {
		os.RemoveAll(g.dir)
	}
}

// stop closes the connections (workers exit on EOF), kills what has not
// exited after a while, and waits.
func (g *group) stop() {
	for _, pr := range g.ranks {
		pr.conn.Close()
	}
	grace := time.After(5 * time.Second)
	for _, pr := range g.ranks {
		select {
		case <-pr.exited:
		case <-grace:
			g.kill()
		}
	}
	g.wait()
}

func (g *group) pids() []int {
	out := make([]int, len(g.ranks))
	for i, pr := range g.ranks {
		out[i] = pr.pid()
	}
	return out
}

// each runs fn on every rank, concurrently when there are several (a
// rank of a group blocks in its collectives until all have their
// request), and returns the first failure in time; failed is called with
// it at once, so that the other ranks can be unblocked.
func (g *group) each(fn func(pr *proc) error, failed func(error)) error {
	if len(g.ranks) == 1 {
		err := fn(g.ranks[0])
		if err != nil {
			failed(err)
		}
		return err
	}
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for _, pr := range g.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fn(pr)
			if err == nil {
				return
			}
			mu.Lock()
			isFirst := first == nil
			if isFirst {
				first = err
			}
			mu.Unlock()
			if isFirst {
				failed(err)
			}
		}()
	}
	wg.Wait()
	return first
}

// spawnGroup starts generation gen: every rank's process, the
// handshakes (concurrently: the ranks of a group join each other while
// loading), each rank's pool allocated when pool (the rank's share) is
// set.
func (p *Proxy) spawnGroup(gen int, pool kernels.KVSpec) (*group, error) {
	g := &group{gen: gen, started: time.Now(), down: make(chan struct{})}
	world := p.world()
	if world > 1 {
		dir, err := os.MkdirTemp("", "pocketd-tp-") // 0700: only our uid reaches the ranks' rendezvous
		if err != nil {
			return nil, fmt.Errorf("tensor-parallel rendezvous: %w", err)
		}
		g.dir = dir
	}
	fail := func(err error) (*group, error) {
		g.kill()
		g.wait()
		return nil, fmt.Errorf("worker %s: %w", p.opts.Hello.Name, err)
	}
	for r := range world {
		pr, err := p.startRank(gen, r)
		if err != nil {
			return fail(err)
		}
		g.ranks = append(g.ranks, pr)
		go func() {
			<-pr.exited
			g.once.Do(func() {
				g.downErr = pr.exitErr()
				close(g.down)
			})
		}()
	}
	err := g.each(func(pr *proc) error {
		if err := p.handshake(pr, g.dir, pool); err != nil {
			// Its output explains more once it has exited (a refused
			// Hello exits by itself).
			select {
			case <-pr.exited:
			case <-time.After(time.Second):
				pr.kill()
				<-pr.exited
			}
			return pr.wrap(err)
		}
		return nil
	}, func(error) { g.kill() })
	if err != nil {
		return fail(err)
	}
	r0 := g.ranks[0].ready
	for _, pr := range g.ranks[1:] {
		if r := pr.ready; string(r.Config) != string(r0.Config) || r.KV != r0.KV || r.Recurrent != r0.Recurrent || r.StateLen != r0.StateLen {
			return fail(fmt.Errorf("rank %d loaded a different model than rank 0 (KV %+v vs %+v)", pr.rank, r.KV, r0.KV))
		}
	}
	p.log.Info("worker ready", "pids", g.pids(), "device", g.ranks[0].ready.Device, "generation", gen,
		"took", time.Since(g.started).Round(time.Millisecond))
	return g, nil
}

// startRank starts rank's process of generation gen and connects to it.
func (p *Proxy) startRank(gen, rank int) (*proc, error) {
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
	cmd := p.opts.Command(rank)
	cmd.ExtraFiles = []*os.File{child}
	var shm *os.File
	if size := p.sharedBytes(); size > 0 {
		if shm, err = newShared(fmt.Sprintf("pocketd-rank%d", rank), size); err != nil {
			p.log.Warn("no shared memory for the worker: bulk data travels in frames", "err", err)
		} else {
			cmd.ExtraFiles = append(cmd.ExtraFiles, shm)
		}
	}
	cmd.Stdout, cmd.Stderr = outW, outW
	// The worker also dies with the daemon (it exits on EOF as well). It
	// runs in a process group of its own: the daemon alone manages its
	// life, and in the daemon's group a stopped worker would be sent
	// SIGCONT (and SIGHUP) by the kernel whenever that group is orphaned
	// and a member exits (POSIX job control), un-stopping a hung worker
	// behind the supervisor's back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	err = startCmd(cmd) // (from a thread that never exits: spawn.go)
	// Only the worker holds its end now: its exit is our EOF.
	child.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		if shm != nil {
			shm.Close()
		}
		return nil, fmt.Errorf("start worker %s: %w", cmd.Path, err)
	}
	pr := &proc{gen: gen, rank: rank, world: p.world(), cmd: cmd, started: time.Now(), exited: make(chan struct{}), shm: shm}
	log := p.log.With("pid", cmd.Process.Pid)
	if pr.world > 1 {
		log = log.With("rank", rank)
	}
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
		if shm != nil {
			shm.Close() // a read in flight fails (os.File is safe to close concurrently)
		}
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
	return pr, nil
}

func (p *Proxy) handshake(pr *proc, dir string, pool kernels.KVSpec) error {
	h := p.opts.Hello
	h.Version, h.Pool = Version, pool
	h.Rank, h.World, h.Rendezvous = pr.rank, pr.world, dir
	h.JoinTimeout, h.CollTimeout = p.opts.StartTimeout, p.opts.CollectiveTimeout
	if pr.shm != nil {
		h.Shared = p.sharedBytes()
	}
	if pr.rank < len(p.opts.Devices) {
		h.Device = p.opts.Devices[pr.rank]
	}
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
	if p.cfg != nil && (r.KV != p.rankKV || string(r.Config) != string(p.ready.Config)) {
		return fmt.Errorf("handshake: the restarted worker loaded a different model")
	}
	pr.ready = r
	if r.Shared && pr.shm != nil {
		pr.shmSize = h.Shared
	}
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
