package session

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// TestRecurrentModel: for a hybrid model (recurrent state per sequence)
// sessions stay exact with the default snapshot policy, which takes no
// snapshot in these short sequences: no prefix reuse, fork and truncate
// recompute unless the state is known at the fork point. arch_test.go
// runs the same operations with snapshots.
func TestRecurrentModel(t *testing.T) {
	model := loadFixture(t, "qwen3_5")
	if model.NewState() == nil {
		t.Fatal("qwen3_5 has no recurrent state")
	}
	m := newManager(t, "", ModelConfig{Name: "q", Model: model})
	id := mustOpen(t, m, "q")
	p1, p2 := prompt(35, 1), prompt(6, 2)
	mustAppend(t, m, id, p1)
	g1 := mustGenerate(t, m, id, 4)
	equalIDs(t, "first", g1.IDs, greedy(t, model, p1, 4))
	r := mustAppend(t, m, id, p2)
	if r.Prefilled != len(p2)+1 {
		t.Errorf("append prefilled %d, want %d", r.Prefilled, len(p2)+1)
	}
	all := slices.Concat(p1, g1.IDs, p2)
	equalIDs(t, "second", mustGenerate(t, m, id, 4).IDs, greedy(t, model, all, 4))
	// No prefix reuse across sessions without state snapshots (the first
	// is due at 256 tokens).
	b := mustOpen(t, m, "q")
	if r := mustAppend(t, m, b, p1); r.Reused != 0 {
		t.Errorf("recurrent model reused %d tokens", r.Reused)
	}
	// Fork at the end (state cloned) and in the middle (recomputed).
	f, _ := m.Fork(1, b, -1)
	equalIDs(t, "fork at end", mustGenerate(t, m, f.ID, 3).IDs, greedy(t, model, p1, 3))
	f2, _ := m.Fork(1, b, 20)
	equalIDs(t, "fork inside", mustGenerate(t, m, f2.ID, 3).IDs, greedy(t, model, p1[:20], 3))
	if _, err := m.Truncate(1, b, 17); err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "truncated", mustGenerate(t, m, b, 3).IDs, greedy(t, model, p1[:17], 3))
	// The original is intact after its fork ran.
	equalIDs(t, "original after fork", mustGenerate(t, m, f.ID, 2).IDs, greedy(t, model, p1, 5)[3:])
}

// TestPromptLogprobs compares with the model's own logits over the prompt.
func TestPromptLogprobs(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model})
	p := prompt(40, 5)
	evs, err := m.PromptLogprobs(context.Background(), 1, "qwen3", p, 3)
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := model.Backend.NewKVPool(model.KVSpec(3, 16))
	logits, err := model.Forward(models.Seq{Pool: pool, Table: []int32{0, 1, 2}}, p, models.AllLogits)
	if err != nil {
		t.Fatal(err)
	}
	V := model.Config.VocabSize
	if len(evs) != len(p) || evs[0].Logprob != 0 || evs[0].Top != nil {
		t.Fatalf("first event %+v of %d", evs[0], len(evs))
	}
	for i := 1; i < len(p); i++ {
		row := logits[(i-1)*V : i*V]
		want, top := logSoftmax(row, p[i], 3)
		if evs[i].ID != p[i] || math.Abs(float64(evs[i].Logprob-want)) > 1e-5 || len(evs[i].Top) != 3 || evs[i].Top[0].ID != top[0].ID {
			t.Fatalf("token %d: %+v, want %v %+v", i, evs[i], want, top)
		}
	}
}
