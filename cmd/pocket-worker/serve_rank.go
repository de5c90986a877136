package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"

	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
)

// rankBackends make a rank's backend by name; serve_rank_cuda.go adds
// "cuda" when built with the tag.
var rankBackends = map[string]func(device, threads int) (kernels.Backend, error){
	"cpu": func(_, threads int) (kernels.Backend, error) { return cpu.New(threads), nil },
}

// runServeRank serves one rank for pocketd over the socket it inherited
// (fd 3): see package daemon/worker for the protocol. It exits when pocketd
// closes the connection, and with an error when the device state is lost
// (pocketd then starts a new worker).
func runServeRank(args []string) error {
	fs := flag.NewFlagSet("serve-rank", flag.ContinueOnError)
	backend := fs.String("backend", "cpu", "backend: cpu or cuda")
	device := fs.Int("device", 0, "GPU ordinal")
	fd := fs.Int("fd", 3, "file descriptor of the connection to pocketd")
	if err := fs.Parse(args); err != nil {
		return err
	}
	newBackend, ok := rankBackends[*backend]
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
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("rank", *device, "pid", os.Getpid())
	return worker.ServeRank(conn, worker.RankOptions{Backend: *backend, Device: *device, NewBackend: newBackend, Logger: log})
}
