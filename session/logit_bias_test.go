package session

import (
	"context"
	"testing"
)

// TestLogitBiasGreedy: a +100 bias makes greedy decoding of the real
// qwen3 fixture pick the biased token every step, a -100 bias bans the
// token greedy decoding picks unbiased, and biased generations sample from
// the logits rather than a runner's argmax path (which cannot see it).
func TestLogitBiasGreedy(t *testing.T) {
	model := loadFixture(t, "qwen3")
	am := &argmaxModel{Model: model}
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: am})
	ctx := context.Background()
	pr := prompt(9, 3)
	V := int32(model.Config.VocabSize)
	for i := range pr {
		pr[i] %= V
	}
	plain, err := m.Complete(ctx, 1, "qwen3", pr, GenerateParams{MaxTokens: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if am.steps.Load() == 0 {
		t.Fatal("unbiased greedy generation did not take the argmax path")
	}
	want := (plain.IDs[0] + 7) % V
	before := am.steps.Load()
	res, err := m.Complete(ctx, 1, "qwen3", pr, GenerateParams{MaxTokens: 4,
		Sampling: SamplingParams{LogitBias: map[int32]float32{want: 100, V + 5: 100, -1: 100}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range res.IDs {
		if id != want {
			t.Fatalf("token %d is %d, want the biased %d (all %v)", i, id, want, res.IDs)
		}
	}
	if n := am.steps.Load() - before; n != 0 {
		t.Fatalf("%d argmax steps in a biased generation", n)
	}
	banned, err := m.Complete(ctx, 1, "qwen3", pr, GenerateParams{MaxTokens: 1,
		Sampling: SamplingParams{LogitBias: map[int32]float32{plain.IDs[0]: -100}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if banned.IDs[0] == plain.IDs[0] {
		t.Fatalf("-100 bias: still picked %d", banned.IDs[0])
	}
}
