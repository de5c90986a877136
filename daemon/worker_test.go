package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
)

var (
	workerOnce sync.Once
	workerPath string
	workerErr  error
)

// slowWorker builds ../cmd/pocket-worker once and returns a wrapper that
// starts it half a second late, and not while the file holdRestart()
// names exists: a test that makes it before killing a worker holds the
// restart until it has seen /health degraded (a window of half a second
// alone was once missed on a loaded CI machine).
func slowWorker(t *testing.T) string {
	t.Helper()
	workerOnce.Do(func() {
		bin := filepath.Join(binDir, "pocket-worker")
		out, err := exec.Command("go", "build", "-o", bin, "../cmd/pocket-worker").CombinedOutput()
		if err != nil {
			workerErr = fmt.Errorf("build pocket-worker: %v\n%s", err, out)
			return
		}
		workerPath = filepath.Join(binDir, "slow-worker")
		workerErr = os.WriteFile(workerPath, []byte("#!/bin/sh\nsleep 0.5\nwhile [ -e "+holdRestart()+" ]; do sleep 0.05; done\nexec "+
			bin+" \"$@\"\n"), 0o755)
	})
	if workerErr != nil {
		t.Fatal(workerErr)
	}
	return workerPath
}

// holdRestart is the file whose presence holds slowWorker's start.
func holdRestart() string { return filepath.Join(binDir, "hold-restart") }

func health(t *testing.T, c *client.Client) *apitype.Health {
	h, err := c.Health(context.Background())
	if h == nil || h.Status == "" {
		t.Fatalf("health: %+v %v", h, err)
	}
	return h
}

// TestWorkerModelSurvivesKill: a model served by a pocket-worker process
// (backend cpu-worker) answers through the daemon's socket like an
// in-process one; kill -9 of the worker leaves the daemon serving,
// /health reports the model degraded until the worker is back, and the
// session continues with exactly the tokens a cold session gives.
func TestWorkerModelSurvivesKill(t *testing.T) {
	m := fixtureModel("qwen3")
	m.Name, m.Backend, m.Worker = "qwen3w", "cpu-worker", slowWorker(t)
	ref := fixtureModel("qwen3")
	ts := startServer(t, m, ref)
	c := ts.client()
	ctx := context.Background()

	h := health(t, c)
	if h.Status != "ok" || len(h.Workers) != 1 || h.Workers[0].PID == 0 || h.Workers[0].Model != "qwen3w" {
		t.Fatalf("health with a worker model: %+v", h)
	}
	toks := make([]int32, 45)
	for i := range toks {
		toks[i] = int32(i*37+5) % 500
	}
	zero := 0.0
	run := func(model string, cut bool) []int32 {
		s, err := c.NewSession(ctx, model)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AppendTokens(ctx, s.ID, toks); err != nil {
			t.Fatal(err)
		}
		var out []int32
		four := 4
		g, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: &four, Temperature: &zero}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, g.IDs...)
		if cut {
			pid := h.Workers[0].PID
			// The restart waits until /health has been seen degraded.
			if err := os.WriteFile(holdRestart(), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(holdRestart()) })
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			degraded := false
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				h := health(t, c)
				if h.Status == "degraded" && !degraded {
					degraded = true
					os.Remove(holdRestart())
				}
				if h.Status == "ok" && h.Workers[0].Restarts == 1 && h.Workers[0].PID != pid {
					break
				}
			}
			if !degraded {
				t.Error("/health never showed the worker restart")
			}
		}
		six := 6
		g, err = c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: &six, Temperature: &zero}, nil)
		if err != nil {
			t.Fatalf("generate after the worker was killed: %v", err)
		}
		return append(out, g.IDs...)
	}
	got := run("qwen3w", true)
	if want := run("qwen3", false); !slices.Equal(got, want) {
		t.Fatalf("after kill -9 of the worker: %v, in-process cold run %v", got, want)
	}
	if h := health(t, c); h.Status != "ok" || h.Workers[0].Restarts != 1 {
		t.Fatalf("health after recovery: %+v", h)
	}
}

// TestNoModels: with nothing configured the daemon starts, and /health
// says why it serves nothing (a fresh package install must not
// crash-loop).
func TestNoModels(t *testing.T) {
	ts := startServer(t)
	h, err := ts.client().Health(context.Background())
	if err != nil || h.Status != "no_models" || h.Message != NoModelsMessage {
		t.Fatalf("health without models: %+v %v", h, err)
	}
}
