package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/daemon/worker"
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
	ignore := goleak.IgnoreCurrent()
	fdsBefore := openFDs(t)
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
		errStop := errors.New("enough")
		n := 0
		if _, err := c.Generate(ctx, f.ID, apitype.Generate{MaxTokens: intp(3000), Temperature: f64(0.8)}, func(apitype.Token) error {
			if n++; n == 2 {
				return errStop
			}
			return nil
		}); !errors.Is(err, errStop) {
			t.Fatalf("stopped stream: %v", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		k := 0
		_, err = c.Generate(cctx, s.ID, apitype.Generate{MaxTokens: intp(3000), Temperature: f64(0)}, func(apitype.Token) error {
			if k++; k == 2 {
				cancel()
			}
			return nil
		})
		cancel()
		if err == nil {
			t.Fatal("cancelled stream: no error")
		}
		for _, id := range []string{s.ID, f.ID} {
			waitSessionFree(t, c, id)
			if _, err := c.Truncate(ctx, id, 5); err != nil {
				t.Fatal(err)
			}
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
	baseG, baseFD := settleCount(runtime.NumGoroutine), openFDs(t)
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
	deadline := time.Now().Add(15 * time.Second)
	for (runtime.NumGoroutine() > baseG+2 || openFDs(t) > baseFD+2) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > baseG+2 {
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("%d goroutines after %d rounds, %d before:\n%s", g, rounds, baseG, b.String())
	}
	if fd := openFDs(t); fd > baseFD+2 {
		t.Fatalf("%d open descriptors after %d rounds and %d rank kills, %d before", fd, rounds, rounds/2, baseFD)
	}
	st := ts.srv.Sessions().Stats()
	// Every session of the churn was deleted and every gateway request's
	// sequence released: no KV block is still referenced.
	if st.Sessions != 0 || st.KVBlocksUsed != 0 {
		t.Fatalf("after the churn: %d sessions open, %d KV blocks referenced", st.Sessions, st.KVBlocksUsed)
	}
	if st.InFlight != 0 {
		t.Fatalf("%d requests in flight after the churn", st.InFlight)
	}
	gen := st.CompletionTokens - gen0
	if gen > rounds*2*400 {
		t.Fatalf("%d tokens generated in %d rounds: abandoned streams ran on", gen, rounds)
	}
	t.Logf("after %d rounds and %d rank kills: %d goroutines (warm %d), %d descriptors (warm %d), %d tokens generated",
		rounds, rounds/2, runtime.NumGoroutine(), baseG, openFDs(t), baseFD, gen)

	if err := ts.stop(); err != nil {
		t.Fatalf("server: %v", err)
	}
	goleak.VerifyNone(t, ignore,
		// fasthttp's idle-worker cleaner returns at its next wake-up after
		// the server stops (MaxIdleWorkerDuration, 10 s).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// The one goroutine that forks workers, locked to its thread for
		// the life of the process on purpose (daemon/worker/spawn.go).
		goleak.IgnoreAnyFunction("github.com/pocketllm/pocketllm/daemon/worker.startCmd.func1.1"))
	if fd := openFDs(t); fd > fdsBefore {
		t.Fatalf("%d open descriptors after the daemon stopped, %d before it started", fd, fdsBefore)
	}
}

// waitSessionFree waits until session id takes a request again (a
// generation the client abandoned holds it until the daemon notices).
func waitSessionFree(t *testing.T, c *client.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.AppendTokens(ctx, id, []int32{7})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s still busy: %v", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// settleCount returns f once it has given the same value twice 100 ms apart.
func settleCount(f func() int) int {
	v := f()
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		w := f()
		if w == v {
			return v
		}
		v = w
	}
	return v
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(es)
}
