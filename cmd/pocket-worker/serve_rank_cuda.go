//go:build cuda

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
)

func init() {
	rankBackends["cuda"] = rankBackend{new: newCUDARank, join: joinNCCL, graphs: cudaGraphs}
}

// newCUDARank is a rank's CUDA backend: a private context for a whole
// model, the device's primary context for a rank of a group (NCCL keeps
// its streams and buffers there; see cuda.NewRank).
func newCUDARank(device, _, world int) (kernels.Backend, error) {
	if world <= 1 {
		return cuda.New(device)
	}
	for k, v := range multicastOff {
		os.Setenv(k, v)
	}
	return cuda.NewRank(device)
}

// ncclIDFile is where rank 0 publishes the group's NCCL unique id inside
// the daemon's rendezvous directory.
const ncclIDFile = "nccl-id"

// joinNCCL joins the rank's NCCL communicator. The daemon (pure Go, no
// NCCL) cannot make the unique id, so rank 0 makes it and publishes it in
// the group's private rendezvous directory (write, then rename), and the
// other ranks wait for the file, as `pocket-worker tp` does; then every
// rank calls ncclCommInitRank, which returns once all have joined.
func joinNCCL(be kernels.Backend, g worker.Group) (kernels.Collective, io.Closer, error) {
	b, ok := be.(*cuda.Backend)
	if !ok {
		return nil, nil, fmt.Errorf("nccl: backend %T is not cuda", be)
	}
	path := filepath.Join(g.Dir, ncclIDFile)
	var id cuda.UniqueID
	if g.Rank == 0 {
		var err error
		if id, err = cuda.NewUniqueID(); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(path+".tmp", id[:], 0o600); err != nil {
			return nil, nil, err
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return nil, nil, err
		}
	} else {
		deadline := time.Now().Add(g.JoinTimeout)
		for {
			bs, err := os.ReadFile(path)
			if err == nil && len(bs) == len(id) {
				copy(id[:], bs)
				break
			}
			if time.Now().After(deadline) {
				return nil, nil, fmt.Errorf("nccl: no unique id in %s after %v", path, g.JoinTimeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	c, err := b.NewComm(id, g.Rank, g.World)
	if err != nil {
		return nil, nil, err
	}
	// The small (decode) all-reduces take the peer-memory kernel when
	// every rank's GPU reaches the others' (POCKET_P2P=0: NCCL for all);
	// its in-kernel waits give up after the collective timeout.
	w := &ncclRank{Collective: c, comm: c, stop: make(chan struct{})}
	p, err := b.NewP2P(c, g.Dir, g.JoinTimeout, g.Timeout)
	switch {
	case err == nil:
		// Both peer kernels once, with known sums, before a model uses
		// them: a broken exchange fails the join, not a session.
		for _, n := range []int{4099, 4096} {
			if err := p.CheckAllReduce(n); err != nil {
				p.Abort()
				return nil, nil, err
			}
		}
		w.Collective, w.comm = p, p
	case errors.Is(err, cuda.ErrP2PUnsupported):
		fmt.Fprintf(os.Stderr, "pocket-worker serve-rank: rank %d: NCCL for every all-reduce: %v\n", g.Rank, err)
	default:
		c.Abort()
		return nil, nil, err
	}
	go w.watch()
	return w, w, nil
}

// ncclRank is a rank's collective (the peer-memory all-reduce with NCCL
// for the large ones, or NCCL alone) with a watchdog: NCCL reports a peer
// that died or a network failure asynchronously, and a collective waiting
// on such a peer would never return; the peer-memory kernel gives up
// waiting after the collective timeout and raises a flag that AsyncError
// reports. The watchdog then aborts the communicator (the pending
// collectives fail) and exits the process with status 3, so the daemon
// rebuilds the group. A collective that hangs without an error (a peer
// stopped) is caught by the daemon's request deadline, which kills every
// rank of the group.
type ncclRank struct {
	kernels.Collective // comm
	comm               interface {
		Rank() int
		AsyncError() error // *cuda.P2P's includes its kernels' peer timeouts
		Abort() error
	}
	stop chan struct{}
}

func (w *ncclRank) watch() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if err := w.comm.AsyncError(); err != nil {
			fmt.Fprintf(os.Stderr, "pocket-worker serve-rank: rank %d: %v: aborting the communicator\n", w.comm.Rank(), err)
			w.comm.Abort()
			os.Exit(3)
		}
	}
}

// Close stops the watchdog and aborts the communicator: the rank is
// exiting (the daemon closed its connection, or the group broke), and
// ncclCommDestroy could wait on peers that are already gone.
func (w *ncclRank) Close() error {
	close(w.stop)
	return w.comm.Abort()
}
