package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/internal/leakcheck"
)

// TestWorkerModelNoLeaks is the gateway package's churn test for a model
// served by pocket-worker processes (backend cpu-worker, the path every
// CUDA model takes), one rank or a tensor-parallel group of two: rounds of
// session requests over the socket, streams the client abandons among
// them, and a kill -9 of a rank every other round (the group is rebuilt).
// The daemon's goroutines and descriptors (the ranks' pipes and sockets
// included) must come back to where they stood, no request may stay in
// flight, and once the daemon stops nothing of it may be left (goleak
// names what is).
func TestWorkerModelNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("churn")
	}
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp%d", tp), func(t *testing.T) { workerChurn(t, tp) })
	}
}

func workerChurn(t *testing.T, tp int) {
	m := fixtureModel("qwen3")
	m.Name, m.Backend, m.Worker, m.TensorParallel, m.Threads = "qwen3w", "cpu-worker", slowWorker(t), tp, 1
	before := leakcheck.Start(t)
	ts := startServer(t, m)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ts.sock)
	}}
	c := &client.Client{HTTPClient: &http.Client{Transport: tr}}
	ctx := context.Background()

	round := func(i int) {
		t.Helper()
		s, err := c.NewSession(ctx, "qwen3w")
		if err != nil {
			t.Fatal(err)
		}
		prompt := make([]int32, 20+i)
		for k := range prompt {
			prompt[k] = int32(k*31+i) % 500
		}
		if _, err := c.AppendTokens(ctx, s.ID, prompt); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: intp(6), Temperature: f64(0)}, nil); err != nil {
			t.Fatal(err)
		}
		f, err := c.Fork(ctx, s.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		leakcheck.Abandon(t, c, f.ID, s.ID, 3000, 5)
		for _, id := range []string{s.ID, f.ID} {
			if err := c.DeleteSession(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Session(ctx, "no-such-session"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("missing session: %v", err)
		}
		if st := do(t, &http.Client{Transport: tr}, "POST", "http://pocketd/v0/sessions", `{"model":`, nil); st != 400 {
			t.Fatalf("malformed body: %d", st)
		}
	}

	round(0)
	tr.CloseIdleConnections()
	base := leakcheck.Take(t)
	gen0 := ts.srv.Sessions().Stats().CompletionTokens
	const rounds = 8
	for i := 1; i <= rounds; i++ {
		if i%2 == 0 {
			// A rank dies: the daemon rebuilds the group, and the old
			// processes' pipes, sockets and readers must go with it (four
			// rebuilds: one descriptor left a rebuild would show past the
			// slack).
			h := health(t, c)
			pids := ts.srv.workers[0].w.(*worker.Proxy).PIDs()
			if err := syscall.Kill(pids[i/2%len(pids)], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitRestarted(t, c, h.Workers[0].Restarts)
		}
		round(i)
	}
	tr.CloseIdleConnections()
	now := base.Check(t, fmt.Sprintf("%d rounds and %d rank kills", rounds, rounds/2), 2)
	// Two streams a round, each allowed 3000 tokens, were abandoned by
	// their clients after a token or two.
	gen := leakcheck.Idle(t, ts.srv.Sessions().Stats(), gen0, rounds*2*400)
	t.Logf("after %d rounds and %d rank kills: %d goroutines (warm %d), %d descriptors (warm %d), %d tokens generated",
		rounds, rounds/2, now.Goroutines, base.Goroutines, now.FDs, base.FDs, gen)

	if err := ts.stop(); err != nil {
		t.Fatalf("server: %v", err)
	}
	// The one goroutine that forks workers, locked to its thread for the
	// life of the process on purpose (daemon/worker/spawn.go).
	before.Stopped(t, goleak.IgnoreAnyFunction("github.com/pocketllm/pocketllm/daemon/worker.startCmd.func1.1"))
}

// waitRestarted waits until /health shows the model's workers back after
// one more restart than restarts.
func waitRestarted(t *testing.T, c *client.Client, restarts int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if h := health(t, c); h.Status == "ok" && h.Workers[0].Restarts > restarts {
			return
		}
	}
	t.Fatal("the workers did not come back")
}
