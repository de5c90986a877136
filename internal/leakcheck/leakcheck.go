// Package leakcheck is the shared part of the daemon's churn tests
// (daemon and daemon/gateway): a process's goroutines and open
// descriptors counted once they have settled, a check that they came back
// after a churn (with every goroutine's stack when they did not), the
// session manager's state after it (Idle), and the churn's streams that
// the client abandons (Abandon), and what is left once a daemon has
// stopped (Start, then Stopped: goleak and the descriptor count).
package leakcheck

import (
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/session"
)

// Before is what the process held before a daemon started: its goroutines
// (for goleak) and its open descriptors.
type Before struct {
	ignore goleak.Option
	fds    int
}

// Start records what the process holds before the test starts a daemon.
func Start(t testing.TB) Before {
	t.Helper()
	return Before{ignore: goleak.IgnoreCurrent(), fds: OpenFDs(t)}
}

// Stopped fails the test if anything the daemon started outlived it: a
// goroutine (goleak names each by its stack, and retries while they wind
// down, which a count cannot tell from a leak) beyond those of b and the
// more it names, or a descriptor. fasthttp's idle-worker cleaner is always
// ignored: it returns at its next wake-up after the server stops
// (MaxIdleWorkerDuration, 10 s).
func (b Before) Stopped(t testing.TB, more ...goleak.Option) {
	t.Helper()
	opts := append([]goleak.Option{b.ignore,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2")}, more...)
	goleak.VerifyNone(t, opts...)
	if fd := OpenFDs(t); fd > b.fds {
		t.Fatalf("%d open descriptors after the daemon stopped, %d before it started", fd, b.fds)
	}
}

// Baseline is what a process holds between requests.
type Baseline struct {
	Goroutines, FDs int
}

// Take waits until the goroutine count is the same twice 100 ms apart
// (pools, idle connections and timers wind down), then counts.
func Take(t testing.TB) Baseline {
	t.Helper()
	g := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == g {
			break
		}
		g = n
	}
	return Baseline{Goroutines: g, FDs: OpenFDs(t)}
}

// Check waits up to 15 s (abandoned streams end once the daemon sees the
// disconnect) for the goroutines and descriptors to come back within
// slack of b, and fails the test with every goroutine's stack if they do
// not. It returns what it counted.
func (b Baseline) Check(t testing.TB, after string, slack int) Baseline {
	t.Helper()
	var now Baseline
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		now = Baseline{Goroutines: runtime.NumGoroutine(), FDs: OpenFDs(t)}
		if now.Goroutines <= b.Goroutines+slack && now.FDs <= b.FDs+slack || time.Now().After(deadline) {
			break
		}
	}
	if now.Goroutines > b.Goroutines+slack {
		var s strings.Builder
		pprof.Lookup("goroutine").WriteTo(&s, 1)
		t.Fatalf("%d goroutines after %s, %d before:\n%s", now.Goroutines, after, b.Goroutines, s.String())
	}
	if now.FDs > b.FDs+slack {
		t.Fatalf("%d open descriptors after %s, %d before", now.FDs, after, b.FDs)
	}
	return now
}

// OpenFDs counts the process's open file descriptors (the test is skipped
// where /proc/self/fd is missing).
func OpenFDs(t testing.TB) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(es)
}

// Idle fails the test unless the session manager is idle after a churn:
// no request in flight, no session open, no KV block referenced, and at
// most maxGen tokens generated since gen0 (the completion count when the
// churn began), which bounds how long the streams its client abandoned
// ran on. It returns the tokens generated.
func Idle(t testing.TB, st session.Stats, gen0, maxGen int64) int64 {
	t.Helper()
	if st.InFlight != 0 {
		t.Fatalf("%d requests still in flight after the churn", st.InFlight)
	}
	if st.Sessions != 0 || st.KVBlocksUsed != 0 {
		t.Fatalf("after the churn: %d sessions open, %d KV blocks referenced", st.Sessions, st.KVBlocksUsed)
	}
	gen := st.CompletionTokens - gen0
	if gen > maxGen {
		t.Fatalf("%d tokens generated in the churn (at most %d): abandoned streams ran on", gen, maxGen)
	}
	return gen
}

// Abandon runs two generations of up to maxTokens over c and leaves each
// after two tokens: on session stop the client's callback returns an
// error, on session cancel it cancels the request's context. It then
// waits until both sessions take a request again (a Truncate to keep
// tokens), which they do once the daemon has seen the client go.
func Abandon(t testing.TB, c *client.Client, stop, cancel string, maxTokens, keep int) {
	t.Helper()
	ctx := context.Background()
	errStop := errors.New("enough")
	n := 0
	// Seeded: unseeded, one run in a dozen or so sampled the random
	// fixture's end-of-sequence token within two tokens, and the stream
	// ended before the client could leave it.
	seed := uint64(7)
	if _, err := c.Generate(ctx, stop, apitype.Generate{MaxTokens: &maxTokens, Temperature: new(0.8), Seed: &seed}, func(apitype.Token) error {
		if n++; n == 2 {
			return errStop
		}
		return nil
	}); !errors.Is(err, errStop) {
		t.Fatalf("stopped stream: %v", err)
	}
	cctx, cancelReq := context.WithCancel(ctx)
	defer cancelReq()
	k := 0
	if _, err := c.Generate(cctx, cancel, apitype.Generate{MaxTokens: &maxTokens, Temperature: new(0.0)}, func(apitype.Token) error {
		if k++; k == 2 {
			cancelReq()
		}
		return nil
	}); err == nil {
		t.Fatal("cancelled stream: no error")
	}
	for _, id := range []string{stop, cancel} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			tctx, done := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.Truncate(tctx, id, keep)
			done()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s still busy: %v", id, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
