package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"

	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
)

// rankBackend makes a rank's backend and, for a tensor-parallel group,
// joins the rank's collective.
type rankBackend struct {
	new  func(device, threads, world int) (kernels.Backend, error)
	join func(be kernels.Backend, g worker.Group) (kernels.Collective, io.Closer, error)
	// graphs records decode steps for replay; nil: eager steps only.
	graphs func(be kernels.Backend) worker.StepGrapher
}

// rankBackends are the backends by name; serve_rank_cuda.go adds "cuda"
// when built with the tag.
var rankBackends = map[string]rankBackend{
	"cpu": {
		new: func(_, threads, _ int) (kernels.Backend, error) { return cpu.New(threads), nil },
		// CPU ranks meet at rank 0's Unix socket in the daemon's
		// rendezvous directory (cpu.Group).
		join: func(be kernels.Backend, g worker.Group) (kernels.Collective, io.Closer, error) {
			c, err := cpu.JoinGroup(be, g.Dir, g.Rank, g.World, g.JoinTimeout, g.Timeout)
			if err != nil {
				return nil, nil, err
			}
			return c, c, nil
		},
	},
}

// runServeRank serves one rank for pocketd over the socket it inherited
// (fd 3): see package daemon/worker for the protocol. It exits when pocketd
// closes the connection, and with an error when the device state is lost
// (pocketd then starts a new worker).
func runServeRank(args []string) error {
	fs := flag.NewFlagSet("serve-rank", flag.ContinueOnError)
	backend := fs.String("backend", "cpu", "backend: cpu or cuda")
	device := fs.Int("device", 0, "GPU ordinal")
	rank := fs.Int("rank", 0, "tensor-parallel rank (for logs: the daemon's hello says which rank to be)")
	fd := fs.Int("fd", 3, "file descriptor of the connection to pocketd")
	shmFD := fs.Int("shm-fd", 4, "file descriptor of the shared-memory region pocketd passes (used only when its hello says so)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rb, ok := rankBackends[*backend]
	if !ok {
		var names []string
		for n := range rankBackends {
			names = append(names, n)
		}
		sort.Strings(names)
		return fmt.Errorf("serve-rank: backend %q is not built into this binary (have %v)", *backend, names)
	}
	f := os.NewFile(uintptr(*fd), "pocketd")
	if f == nil {
		return fmt.Errorf("serve-rank: fd %d is not open", *fd)
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("serve-rank: fd %d: %w", *fd, err)
	}
	defer conn.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("rank", *rank, "device", *device, "pid", os.Getpid())
	shm := os.NewFile(uintptr(*shmFD), "pocketd-shm")
	return worker.ServeRank(conn, worker.RankOptions{Backend: *backend, Device: *device, NewBackend: rb.new, Join: rb.join,
		Graphs: rb.graphs, Shared: shm, Logger: log, NoLookahead: noLookahead, HostDraw: hostDraw})
}

// hostDraw draws sampled steps' tokens on the host (POCKET_DEVICE_DRAW=0;
// see daemon/worker/rank_graph.go's graphDraw): an A/B switch read once
// here.
var hostDraw = os.Getenv("POCKET_DEVICE_DRAW") == "0"

// noLookahead turns the rank's lookahead off (POCKET_LOOKAHEAD=0; see
// daemon/worker/rank_ahead.go): an A/B switch for measuring, read once
// here as POCKET_GRAPHS is; pocketd's environment reaches the ranks.
var noLookahead = os.Getenv("POCKET_LOOKAHEAD") == "0"
