package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestNodeOpenAI runs testdata/npm/test.mjs, which drives the gateway with
// the official `openai` npm client. `npm install` brings node_modules to
// the locked version (a no-op when it is there, quick when the npm cache
// has it). It is skipped only when node or npm is not installed.
func TestNodeOpenAI(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping the openai npm client test")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: skipping the openai npm client test")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "npm"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefer-offline")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	d := sharedDaemon(t)
	cmd := exec.CommandContext(ctx, node, "test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "POCKETD_BASE_URL="+d.base)
	out, err := cmd.CombinedOutput()
	t.Logf("node test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node test.mjs: %v", err)
	}
}
