package session

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/internal/kvseq"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// loadFixture opens a fixture checkpoint on the CPU backend.
func loadFixture(t testing.TB, arch string) *models.Model {
	t.Helper()
	ck, err := checkpoint.Open(filepath.Join("..", "models", "testdata", "models", arch))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	m, err := ck.Model(cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func loadDemo(t testing.TB) (*models.Model, *tokenizer.Tokenizer) {
	t.Helper()
	ck, err := demo.Open()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ck.Model(cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := demo.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// newManager makes a Manager with one model under the fixture's name.
func newManager(t testing.TB, dir string, cfgs ...ModelConfig) *Manager {
	t.Helper()
	m, err := NewManager(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfgs {
		if err := m.AddModel(c); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// prompt is a deterministic token sequence within a fixture's vocabulary.
func prompt(n int, salt int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = (int32(i)*37 + salt*11 + 5) % 500
	}
	return out
}

// greedy decodes n tokens after toks with the model directly (a private
// pool, no session machinery): the reference every session path must match.
func greedy(t testing.TB, m *models.Model, toks []int32, n int) []int32 {
	t.Helper()
	out, err := kvseq.Greedy(m, toks, n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustOpen(t testing.TB, m *Manager, model string) string {
	t.Helper()
	info, err := m.Open(1, model)
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

func mustAppend(t testing.TB, m *Manager, id string, toks []int32) AppendResult {
	t.Helper()
	r, err := m.Append(context.Background(), 1, id, AppendInput{Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustGenerate(t testing.TB, m *Manager, id string, n int) GenerateResult {
	t.Helper()
	r, err := m.Generate(context.Background(), 1, id, GenerateParams{MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func equalIDs(t testing.TB, what string, got, want []int32) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
