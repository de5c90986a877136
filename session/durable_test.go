package session

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRestart: after Shutdown and a new Manager on the same state dir,
// sessions list the same tokens and continue exactly.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	model := loadFixture(t, "qwen3")
	m, err := NewManager(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddModel(ModelConfig{Name: "qwen3", Model: model}); err != nil {
		t.Fatal(err)
	}
	id := mustOpen(t, m, "qwen3")
	p := prompt(30, 8)
	mustAppend(t, m, id, p)
	g := mustGenerate(t, m, id, 5)
	f, err := m.Fork(1, id, 20)
	if err != nil {
		t.Fatal(err)
	}
	gone := mustOpen(t, m, "qwen3")
	if err := m.Close(1, gone); err != nil {
		t.Fatal(err)
	}
	before := m.List(1)
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Open(1, "qwen3"); err == nil {
		t.Fatal("open after shutdown succeeded")
	}

	m2 := newManager(t, dir) // sessions load before their model is added
	if got := m2.List(1); len(got) != 2 || got[0].ID != before[0].ID || got[1].Tokens != before[1].Tokens {
		t.Fatalf("after restart: %+v, want %+v", got, before)
	}
	if err := m2.AddModel(ModelConfig{Name: "qwen3", Model: model}); err != nil {
		t.Fatal(err)
	}
	toks, err := m2.Tokens(1, id)
	if err != nil {
		t.Fatal(err)
	}
	full := slices.Concat(p, g.IDs)
	equalIDs(t, "restored history", toks, full)
	g2 := mustGenerate(t, m2, id, 4)
	equalIDs(t, "continued", g2.IDs, greedy(t, model, full, 4))
	equalIDs(t, "fork continued", mustGenerate(t, m2, f.ID, 3).IDs, greedy(t, model, full[:20], 3))
	if _, err := m2.Get(1, gone); err == nil {
		t.Error("closed session came back")
	}
}

const crashEnv = "POCKETLLM_SESSION_CRASH_DIR"

// TestCrashChild is the child of TestKill9: it appends, prints "ok" once
// the call has returned, and waits to be killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("run by TestKill9")
	}
	m, err := NewManager(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddModel(ModelConfig{Name: "qwen3", Model: loadFixture(t, "qwen3")}); err != nil {
		t.Fatal(err)
	}
	info, err := m.Open(1, "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(context.Background(), 1, info.ID, AppendInput{Tokens: prompt(25, 10)}); err != nil {
		t.Fatal(err)
	}
	g, err := m.Generate(context.Background(), 1, info.ID, GenerateParams{MaxTokens: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ok %s %v\n", info.ID, g.IDs)
	time.Sleep(time.Minute)
}

// TestKill9: a process that answered a call is SIGKILLed; a new Manager on
// its state dir has the session with every token.
func TestKill9(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var line string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "ok ") {
			line = sc.Text()
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if line == "" {
		t.Fatal("child did not answer")
	}
	var id string
	fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(line))
	id = fields[1]
	var gen []int32
	for _, f := range fields[2:] {
		var v int32
		fmt.Sscan(f, &v)
		gen = append(gen, v)
	}
	model := loadFixture(t, "qwen3")
	m := newManager(t, dir, ModelConfig{Name: "qwen3", Model: model})
	toks, err := m.Tokens(1, id)
	if err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "after kill -9", toks, slices.Concat(prompt(25, 10), gen))
	equalIDs(t, "continued", mustGenerate(t, m, id, 3).IDs, greedy(t, model, toks, 3))
}
