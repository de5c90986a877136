package session

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// failingRunner is a Runner whose Forward fails while fail is set.
type failingRunner struct {
	Runner
	fail atomic.Bool
}

var errInjected = errors.New("injected forward failure")

func (f *failingRunner) Forward(seq models.Seq, tokens []int32, want models.Logits) ([]float32, error) {
	if f.fail.Load() {
		return nil, errInjected
	}
	return f.Runner.Forward(seq, tokens, want)
}

// TestAppendFailureLeavesHistory checks the append whose history write
// overlaps its prefill: when the prefill fails, the session keeps its old
// history in memory and on disk (a reopened manager), and a later append
// and generation match a cold run.
func TestAppendFailureLeavesHistory(t *testing.T) {
	dir := t.TempDir()
	model := loadFixture(t, "qwen3")
	r := &failingRunner{Runner: model}
	m := newManager(t, dir, ModelConfig{Name: "q", Model: r})
	id := mustOpen(t, m, "q")
	first := prompt(20, 1)
	mustAppend(t, m, id, first)
	r.fail.Store(true)
	if _, err := m.Append(context.Background(), 1, id, AppendInput{Tokens: prompt(7, 2)}); !errors.Is(err, errInjected) {
		t.Fatalf("append with a failing forward: %v, want the injected error", err)
	}
	r.fail.Store(false)
	if got, _ := m.Tokens(1, id); !slices.Equal(got, first) {
		t.Fatalf("after the failed append the session holds %d tokens, want the %d before it", len(got), len(first))
	}
	m.Shutdown(context.Background())

	m2 := newManager(t, dir, ModelConfig{Name: "q", Model: model})
	if got, err := m2.Tokens(1, id); err != nil || !slices.Equal(got, first) {
		t.Fatalf("reopened: %d tokens (%v), want the %d before the failed append", len(got), err, len(first))
	}
	more := prompt(9, 3)
	mustAppend(t, m2, id, more)
	got := mustGenerate(t, m2, id, 6).IDs
	if want := greedy(t, model, append(slices.Clone(first), more...), 6); !slices.Equal(got, want) {
		t.Fatalf("generation after the failed append: %v, cold run %v", got, want)
	}
}
