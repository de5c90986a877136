package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/safetensors"
)

const fixtures = "../../models/testdata/models"

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newInspectCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestInspectFixtures(t *testing.T) {
	for _, arch := range []string{"llama", "qwen3", "qwen3-fp8", "qwen3_moe"} {
		out, err := runCmd(t, filepath.Join(fixtures, arch))
		if err != nil || !strings.Contains(out, "valid: yes") {
			t.Errorf("%s: err=%v\n%s", arch, err, out)
		}
	}
}

// corrupt copies the qwen3 fixture with its tensors edited by edit.
func corrupt(t *testing.T, edit func([]safetensors.Tensor) []safetensors.Tensor) string {
	t.Helper()
	src := filepath.Join(fixtures, "qwen3")
	data, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		tt, _ := f.Tensor(n)
		ts = append(ts, *tt)
	}
	dir := t.TempDir()
	cfg, _ := os.ReadFile(filepath.Join(src, "config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	var b bytes.Buffer
	if err := safetensors.Write(&b, edit(ts), nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors"), b.Bytes(), 0o644)
	return dir
}

func TestInspectRejectsBrokenCheckpoints(t *testing.T) {
	missing := corrupt(t, func(ts []safetensors.Tensor) []safetensors.Tensor {
		var out []safetensors.Tensor
		for _, tt := range ts {
			if tt.Name != "model.layers.1.mlp.up_proj.weight" {
				out = append(out, tt)
			}
		}
		return out
	})
	wrongShape := corrupt(t, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i := range ts {
			if ts[i].Name == "model.layers.0.self_attn.q_proj.weight" {
				ts[i].Shape = []int{32, 128}
			}
		}
		return ts
	})
	truncated := t.TempDir()
	data, _ := os.ReadFile(filepath.Join(fixtures, "qwen3", "model.safetensors"))
	cfg, _ := os.ReadFile(filepath.Join(fixtures, "qwen3", "config.json"))
	os.WriteFile(filepath.Join(truncated, "config.json"), cfg, 0o644)
	os.WriteFile(filepath.Join(truncated, "model.safetensors"), data[:len(data)/2], 0o644)
	badHeader := t.TempDir()
	os.WriteFile(filepath.Join(badHeader, "config.json"), cfg, 0o644)
	bad := append([]byte(nil), data...)
	copy(bad[8:], "{{{{")
	os.WriteFile(filepath.Join(badHeader, "model.safetensors"), bad, 0o644)

	for name, c := range map[string]struct{ dir, want string }{
		"missing tensor": {missing, "model.layers.1.mlp.up_proj.weight"},
		"wrong shape":    {wrongShape, "model.layers.0.self_attn.q_proj.weight: wrong tensor shape"},
		"truncated":      {truncated, "outside"},
		"corrupt header": {badHeader, "header"},
	} {
		out, err := runCmd(t, c.dir)
		if err == nil {
			t.Errorf("%s: inspect succeeded:\n%s", name, out)
			continue
		}
		if msg := out + err.Error(); !strings.Contains(msg, c.want) {
			t.Errorf("%s: output does not name %q:\n%s\nerr: %v", name, c.want, out, err)
		}
	}
}
