package session

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// panicModel is the demo model whose Forward panics once, on its
// panicAt-th call (a bug in a model's step, in process).
type panicModel struct {
	*models.Model
	calls, panicAt atomic.Int64
}

func (p *panicModel) Forward(seq models.Seq, tokens []int32, want models.Logits) ([]float32, error) {
	if p.calls.Add(1) == p.panicAt.Load() {
		var s []int
		_ = s[len(tokens)] // an index out of range, as a bug would
	}
	return p.Model.Forward(seq, tokens, want)
}

// TestStepPanicFailsTheRequest: a panic in an in-process model's step
// fails that request with an error, not the process; the session keeps
// its tokens, its KV is rebuilt on its next use, and it generates what a
// manager that never failed generates.
func TestStepPanicFailsTheRequest(t *testing.T) {
	m, tok := loadDemo(t)
	pm := &panicModel{Model: m}
	clean := newManager(t, t.TempDir(), ModelConfig{Name: "demo", Model: m, Tokenizer: tok})
	flaky := newManager(t, t.TempDir(), ModelConfig{Name: "demo", Model: pm, Tokenizer: tok})
	ctx := context.Background()
	pr := prompt(23, 4)
	for i := range pr {
		pr[i] %= int32(m.Config.VocabSize)
	}
	open := func(mg *Manager) string {
		info, err := mg.Open(1, "demo")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mg.Append(ctx, 1, info.ID, AppendInput{Tokens: pr}); err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	a, b := open(clean), open(flaky)
	gp := GenerateParams{MaxTokens: 6}
	pm.panicAt.Store(pm.calls.Load() + 3) // the third decode step
	if _, err := flaky.Generate(ctx, 1, b, gp, nil); !errors.Is(err, errStepPanicked) {
		t.Fatalf("a step that panicked: %v", err)
	}
	info, err := flaky.Get(1, b)
	if err != nil || info.Tokens < len(pr) {
		t.Fatalf("the session after the panic: %+v, %v", info, err)
	}
	// Tokens generated before the panic may have been kept: the clean
	// session generates as many first (greedy: the same ones).
	if k := info.Tokens - len(pr); k > 0 {
		if _, err := clean.Generate(ctx, 1, a, GenerateParams{MaxTokens: k}, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := flaky.Generate(ctx, 1, b, gp, nil)
	if err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	ref, err := clean.Generate(ctx, 1, a, gp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.IDs, ref.IDs) {
		t.Fatalf("after the panic %v, a manager that never failed %v", got.IDs, ref.IDs)
	}
}
