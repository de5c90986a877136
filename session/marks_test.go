package session

import (
	"errors"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// passCounter is a hybrid runner that counts its prefill passes, and with
// decline set gives states that decline every HoldAt, as a worker short
// of device memory does.
type passCounter struct {
	*models.Model
	decline bool
	passes  int // Forward calls of more than one row
}

type decliningState struct{ *models.DeltaState }

func (decliningState) HoldAt([]int) error { return errors.New("no room for the copies") }

func (c *passCounter) NewState() any {
	st := c.Model.NewState()
	if c.decline {
		return decliningState{st.(*models.DeltaState)}
	}
	return st
}

func (c *passCounter) Forward(seq models.Seq, toks []int32, want models.Logits) ([]float32, error) {
	if s, ok := seq.State.(decliningState); ok {
		seq.State = s.DeltaState
	}
	if len(toks) > 1 {
		c.passes++
	}
	return c.Model.Forward(seq, toks, want)
}

// TestMarksDeclined: a runner that marks prefills a prompt in one pass
// with its snapshots inside; one that declines the marks gets the pieces
// of before (a pass ends on each snapshot position, snapshotted through
// the host). Either way there are the same snapshots and the sessions
// stay exact.
func TestMarksDeclined(t *testing.T) {
	model := loadFixture(t, "qwen3_5")
	p := prompt(60, 3)
	for _, decline := range []bool{false, true} {
		r := &passCounter{Model: model, decline: decline}
		m := newManager(t, "", ModelConfig{Name: "q", Model: r, BlockSize: archBlock, SnapshotIntervals: testSnapshots})
		id := mustOpen(t, m, "q")
		mustAppend(t, m, id, p)
		// testSnapshots inside 60 tokens: 8, 16, 24, 40, 56.
		if want := map[bool]int{false: 1, true: 6}[decline]; r.passes != want {
			t.Errorf("decline %v: %d prefill passes, want %d", decline, r.passes, want)
		}
		if info := m.Models()[0]; info.Snapshots != 5 || info.HeldSnapshots != 0 {
			t.Errorf("decline %v: %d snapshots (%d held), want 5 in the daemon", decline, info.Snapshots, info.HeldSnapshots)
		}
		g := mustGenerate(t, m, id, 4)
		full := slices.Concat(p, g.IDs)
		equalIDs(t, "generate", g.IDs, greedy(t, model, p, 4))
		for _, k := range []int{16, 40, 45} {
			f, err := m.Fork(1, id, k)
			if err != nil {
				t.Fatal(err)
			}
			equalIDs(t, "fork", mustGenerate(t, m, f.ID, 3).IDs, greedy(t, model, full[:k], 3))
		}
	}
}

// TestPromptLogprobsHybrid: the prompt's logprobs of a hybrid (passes of
// 16 rows with every row's logits, snapshot positions inside them) are
// the model's own, marks or not.
func TestPromptLogprobsHybrid(t *testing.T) {
	model := loadFixture(t, "qwen3_5")
	m := newManager(t, "", ModelConfig{Name: "q", Model: model, BlockSize: archBlock, SnapshotIntervals: testSnapshots})
	p := prompt(40, 5)
	evs, err := m.PromptLogprobs(t.Context(), 1, "q", p, 3)
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := model.Backend.NewKVPool(model.KVSpec(3, 16))
	logits, err := model.Forward(models.Seq{Pool: pool, Table: []int32{0, 1, 2}, State: model.NewState()}, p, models.AllLogits)
	if err != nil {
		t.Fatal(err)
	}
	V := model.Config.VocabSize
	for i := 1; i < len(p); i++ {
		want, _ := logSoftmax(logits[(i-1)*V:i*V], p[i], 3)
		if d := evs[i].Logprob - want; evs[i].ID != p[i] || d > 1e-4 || d < -1e-4 {
			t.Fatalf("token %d: %+v, want logprob %v", i, evs[i], want)
		}
	}
}
