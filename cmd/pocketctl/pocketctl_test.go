package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
)

var pocketd string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pocketctl-test")
	if err != nil {
		panic(err)
	}
	pocketd = filepath.Join(dir, "pocketd")
	if out, err := exec.Command("go", "build", "-o", pocketd, "../pocketd").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build pocketd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startPocketd runs the demo daemon with its socket and state in dir.
func startPocketd(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	sock := filepath.Join(dir, "pocketd.sock")
	cmd := exec.Command(pocketd, "serve", "--demo", "--socket", sock, "--listen", "off", "--state-dir", filepath.Join(dir, "state"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := (&client.Client{Socket: sock, StartWait: 30 * time.Second}).WaitReady(ctx); err != nil {
		t.Fatalf("pocketd not ready: %v\n%s", err, stderr.String())
	}
	return cmd
}

// ctl runs pocketctl in process with stdin in; it returns stdout+stderr.
func ctl(t *testing.T, sock, in string, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetArgs(append([]string{"--socket", sock}, args...))
	root.SetIn(strings.NewReader(in))
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.Execute()
	return out.String(), err
}

func mustCtl(t *testing.T, sock, in string, args ...string) string {
	t.Helper()
	out, err := ctl(t, sock, in, args...)
	if err != nil {
		t.Fatalf("pocketctl %v: %v\n%s", args, err, out)
	}
	return out
}

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "pocketd.sock")
	startPocketd(t, dir)
	if out := mustCtl(t, sock, "", "status"); !strings.Contains(out, "pocketd: ok") || !strings.Contains(out, "demo") {
		t.Fatalf("status: %s", out)
	}
	if out := mustCtl(t, sock, "", "models"); !strings.Contains(out, "Qwen3ForCausalLM") {
		t.Fatalf("models: %s", out)
	}
	id := strings.TrimSpace(mustCtl(t, sock, "", "sessions", "new", "--model", "demo"))
	if out := mustCtl(t, sock, "", "append", id, "Hello"); !strings.Contains(out, "tokens: 5") {
		t.Fatalf("append: %s", out)
	}
	mustCtl(t, sock, "", "append", id, "--tokens", "32,33")
	mustCtl(t, sock, "a message", "append", id, "--role", "user")
	out := mustCtl(t, sock, "", "generate", id, "-n", "7", "-t", "0")
	if !strings.Contains(out, "[length: 7 tokens") {
		t.Fatalf("generate: %s", out)
	}
	// Constrained replies: a schema of enums ends within the budget and
	// parses; a missing schema file is a clear error.
	schema := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":[1,2]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	js := strings.TrimSpace(mustCtl(t, sock, "", "sessions", "new", "--model", "demo"))
	mustCtl(t, sock, "", "append", js, "JSON: ")
	out = mustCtl(t, sock, "", "--json", "generate", js, "-n", "200", "--seed", "1", "--json-schema", schema)
	var gres struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	}
	var val struct{ OK *bool }
	if json.Unmarshal([]byte(out), &gres) != nil || gres.FinishReason != "stop" || json.Unmarshal([]byte(gres.Text), &val) != nil || val.OK == nil {
		t.Fatalf("generate --json-schema: %s", out)
	}
	mustCtl(t, sock, "", "generate", js, "-n", "4", "--json-object")
	if out, err := ctl(t, sock, "", "generate", js, "--json-schema", filepath.Join(dir, "nope.json")); err == nil || !strings.Contains(err.Error(), "json-schema") {
		t.Fatalf("missing schema file: %v %s", err, out)
	}
	// A bias of +100 on one token makes every sampled token that one; a
	// bias that is not a number is refused before any request.
	out = mustCtl(t, sock, "", "--json", "generate", js, "-n", "3", "-t", "1", "--logit-bias", "42=100")
	var ids struct{ IDs []int32 }
	if json.Unmarshal([]byte(out), &ids) != nil || len(ids.IDs) != 3 || ids.IDs[0] != 42 || ids.IDs[1] != 42 || ids.IDs[2] != 42 {
		t.Fatalf("generate --logit-bias 42=100: %s", out)
	}
	if out, err := ctl(t, sock, "", "generate", js, "--logit-bias", "42=lots"); err == nil || !strings.Contains(err.Error(), "logit-bias") {
		t.Fatalf("--logit-bias 42=lots: %v %s", err, out)
	}
	mustCtl(t, sock, "", "sessions", "rm", js)
	fork := strings.TrimSpace(mustCtl(t, sock, "", "fork", id, "--at", "5"))
	if out := mustCtl(t, sock, "", "sessions", "info", "--tokens", fork); !strings.Contains(out, "72,101,108,108,111") {
		t.Fatalf("fork info: %s", out)
	}
	if out := mustCtl(t, sock, "", "truncate", id, "3"); !strings.Contains(out, " 3 ") {
		t.Fatalf("truncate: %s", out)
	}
	if out := mustCtl(t, sock, "", "sessions", "ls"); !strings.Contains(out, id) || !strings.Contains(out, fork) {
		t.Fatalf("ls: %s", out)
	}
	mustCtl(t, sock, "", "sessions", "rm", id, fork)
	if _, err := ctl(t, sock, "", "sessions", "info", id); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("info after rm: %v", err)
	}
	if out := mustCtl(t, sock, "", "--json", "sessions", "ls"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("json ls: %s", out)
	}
}

var resumeRE = regexp.MustCompile(`resuming session ([0-9a-f]+) \(demo, (\d+) tokens\)`)

// TestChatSurvivesRestart: chat remembers its session; after pocketd is
// killed and restarted, chat resumes it with the whole history.
func TestChatSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "xdg"))
	sock := filepath.Join(dir, "pocketd.sock")
	d := startPocketd(t, dir)
	out := mustCtl(t, sock, "hello\nhow are you?\n", "chat", "-n", "8")
	m := regexp.MustCompile(`new session ([0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("chat: %s", out)
	}
	id := m[1]
	c := &client.Client{Socket: sock}
	info, err := c.Session(context.Background(), id)
	if err != nil || info.Tokens < 20 {
		t.Fatalf("session after chat: %+v %v", info, err)
	}

	d.Process.Signal(syscall.SIGKILL)
	d.Wait()
	startPocketd(t, dir)
	out = mustCtl(t, sock, "and again\n", "chat", "-n", "8")
	r := resumeRE.FindStringSubmatch(out)
	if r == nil || r[1] != id || r[2] != fmt.Sprint(info.Tokens) {
		t.Fatalf("chat after restart: %s (want session %s with %d tokens)", out, id, info.Tokens)
	}
	after, _ := c.Session(context.Background(), id)
	if after.Tokens <= info.Tokens {
		t.Fatalf("chat after restart added nothing: %d", after.Tokens)
	}
	out = mustCtl(t, sock, "fresh\n", "chat", "--new", "-n", "4")
	if !strings.Contains(out, "new session") || strings.Contains(out, id) {
		t.Fatalf("chat --new: %s", out)
	}
}

func TestNoDaemonMessage(t *testing.T) {
	_, err := ctl(t, filepath.Join(t.TempDir(), "none.sock"), "", "models")
	if err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("err %v", err)
	}
}

func TestGenMan(t *testing.T) {
	dir := t.TempDir()
	mustCtl(t, "", "", "gen-man", dir)
	b, err := os.ReadFile(filepath.Join(dir, "pocketctl-chat.1"))
	if err != nil || !strings.Contains(string(b), ".SH OPTIONS") {
		t.Fatalf("man page: %v %s", err, b)
	}
}

// TestStatusWorkers checks that status lists every rank of a worker group,
// against a stand-in daemon that serves a /health with a TP2 model.
func TestStatusWorkers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pocketd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1 := 0, 1
	health := apitype.Health{Status: "ok", Models: []string{"big"}, Workers: []apitype.WorkerHealth{{
		Model: "big", PID: 4242, Restarts: 1, Ranks: []apitype.RankHealth{
			{Rank: 0, PID: 4242, GPU: &gpu0, Device: "H200", Restarts: 1},
			{Rank: 1, PID: 4343, GPU: &gpu1, Device: "H200", Restarts: 1},
		}}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v0/health", func(w http.ResponseWriter, _ *http.Request) { json.NewEncoder(w).Encode(health) })
	mux.HandleFunc("GET /v0/sessions", func(w http.ResponseWriter, _ *http.Request) { json.NewEncoder(w).Encode(apitype.Sessions{}) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	out := mustCtl(t, sock, "", "status")
	t.Logf("status:\n%s", out)
	for _, re := range []string{`(?m)^\s+big\s+0\s+4242\s+0\s+H200\s+1$`, `(?m)^\s+big\s+1\s+4343\s+1\s+H200\s+1$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status does not match %s:\n%s", re, out)
		}
	}
	var js struct{ Workers []apitype.WorkerHealth }
	if err := json.Unmarshal([]byte(mustCtl(t, sock, "", "--json", "status")), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Workers) != 1 || len(js.Workers[0].Ranks) != 2 || js.Workers[0].Ranks[1].PID != 4343 {
		t.Fatalf("status --json workers: %+v", js.Workers)
	}
}
