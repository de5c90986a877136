package session

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// argmaxModel is a Runner with the greedy path, counting its steps.
type argmaxModel struct {
	*models.Model
	steps atomic.Int64
}

func (a *argmaxModel) ForwardArgmax(seq models.Seq, tokens []int32) (int32, error) {
	l, err := a.Forward(seq, tokens, models.LastLogits)
	if err != nil {
		return 0, err
	}
	a.steps.Add(1)
	return Argmax(l[len(l)-a.Config.VocabSize:]), nil
}

// TestArgmaxMatchesSampler: Argmax picks what greedy sampling picks,
// ties (the lowest index), infinities and NaNs included.
func TestArgmaxMatchesSampler(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, l := range [][]float32{
		{1, 3, 3, 2}, {5, 5, 5}, {-1, -1}, {0, inf, inf}, {nan, 1, 2}, {1, nan, 2}, {2, nan, 2},
		{float32(math.Inf(-1)), -3}, {0}, {float32(math.Copysign(0, -1)), 0},
	} {
		s := newSampler(SamplingParams{}, nil)
		if got, want := Argmax(l), s.sample(l); got != want {
			t.Errorf("%v: Argmax %d, sampler %d", l, got, want)
		}
	}
}

// TestArgmaxRule: the largest value wins, the lowest index on ties; a
// NaN never wins, also at index 0 (the CUDA argmax's rule); nothing but
// NaN gives 0.
func TestArgmaxRule(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		l    []float32
		want int32
	}{
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{nan, 1, 2}, 2},
		{[]float32{nan, nan, -inf, -inf}, 2},
		{[]float32{nan, nan}, 0},
		{[]float32{-inf, -3}, 1},
		{[]float32{2, nan, inf}, 2},
		{[]float32{float32(math.Copysign(0, -1)), 0}, 0},
		{nil, 0},
	} {
		if got := Argmax(c.l); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.l, got, c.want)
		}
	}
}

// TestModelIsNotGreedyRunner: an in-process model takes the logits path
// (models.Model.ForwardGreedy is named apart from GreedyRunner's method),
// so that wrappers overriding Forward keep their override on greedy steps.
func TestModelIsNotGreedyRunner(t *testing.T) {
	m, _ := loadDemo(t)
	if _, ok := any(m).(GreedyRunner); ok {
		t.Error("*models.Model implements GreedyRunner")
	}
}

// TestGreedyRunnerPath: greedy generations (stop strings too) over a
// GreedyRunner take its argmax path and give the full-logits tokens and
// text; logprobs and penalties keep the logits.
func TestGreedyRunnerPath(t *testing.T) {
	m, tok := loadDemo(t)
	am := &argmaxModel{Model: m}
	plain, fast, pr := runnerPair(t, m, am, tok)
	ctx := context.Background()
	for _, gp := range []GenerateParams{
		{MaxTokens: 12},
		{MaxTokens: 12, Stop: []string{"e", " t"}},
		{MaxTokens: 6, Sampling: SamplingParams{TopK: 1, Temperature: 2}},
	} {
		before := am.steps.Load()
		a, err := plain.Complete(ctx, 1, "demo", pr, gp, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := fast.Complete(ctx, 1, "demo", pr, gp, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.IDs, b.IDs) || a.Text != b.Text || a.FinishReason != b.FinishReason || a.Usage != b.Usage {
			t.Fatalf("%+v: full logits %v %q %s, argmax path %v %q %s", gp, a.IDs, a.Text, a.FinishReason, b.IDs, b.Text, b.FinishReason)
		}
		if n := am.steps.Load() - before; n != int64(len(b.IDs)) {
			t.Fatalf("%+v: %d argmax steps for %d tokens", gp, n, len(b.IDs))
		}
	}
	before := am.steps.Load()
	for _, gp := range []GenerateParams{
		{MaxTokens: 4, Logprobs: true},
		{MaxTokens: 4, Sampling: SamplingParams{FrequencyPenalty: 0.5}},
	} {
		if _, err := fast.Complete(ctx, 1, "demo", pr, gp, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := am.steps.Load() - before; n != 0 {
		t.Fatalf("%d argmax steps for generations that need logits", n)
	}
}

// drawModel is a Runner with both token paths; its first draw can fail
// as a lost worker's does (ErrKVLost), and it records every draw's
// variate.
type drawModel struct {
	argmaxModel
	dr       Drawer
	loseNext bool
	us       []float64
}

func (d *drawModel) ForwardSample(seq models.Seq, tokens []int32, dw Draw) (int32, error) {
	d.us = append(d.us, dw.U)
	if d.loseNext {
		d.loseNext = false
		return 0, fmt.Errorf("worker gone: %w", ErrKVLost)
	}
	l, err := d.Forward(seq, tokens, models.LastLogits)
	if err != nil {
		return 0, err
	}
	return d.dr.Token(l[len(l)-d.Config.VocabSize:], dw), nil
}

// TestSamplingRunnerPath: sampled generations over a SamplingRunner take
// its draw path and give the tokens of the session's own sampling for
// the same seed, and so do greedy ones with penalties or bias (top-k 1
// draws); a draw lost with the KV is asked again with the same variate
// (the variate is consumed only with the token), and the tokens stay the
// same.
func TestSamplingRunnerPath(t *testing.T) {
	m, tok := loadDemo(t)
	dm := &drawModel{argmaxModel: argmaxModel{Model: m}}
	plain, fast, pr := runnerPair(t, m, dm, tok)
	ctx := context.Background()
	seed := uint64(21)
	for _, sp := range []SamplingParams{
		{Temperature: 0.8}, {Temperature: 1.1, TopP: 0.9}, {Temperature: 0.6, TopK: 20, TopP: 0.95}, {Temperature: 1, MinP: 0.1},
		{RepetitionPenalty: 1.5}, {PresencePenalty: 2, LogitBias: map[int32]float32{3: 4}},
	} {
		sp.Seed = &seed
		gp := GenerateParams{MaxTokens: 10, Sampling: sp}
		a, err := plain.Complete(ctx, 1, "demo", pr, gp, nil)
		if err != nil {
			t.Fatal(err)
		}
		dm.us, dm.loseNext = nil, true
		b, err := fast.Complete(ctx, 1, "demo", pr, gp, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.IDs, b.IDs) || a.Usage.CompletionTokens != b.Usage.CompletionTokens {
			t.Fatalf("%+v: session's sampling %v, runner's draws %v", sp, a.IDs, b.IDs)
		}
		// Every token is drawn (the prompt's last pass too: an attention
		// model's), the lost first one twice with the same variate.
		if len(dm.us) != len(b.IDs)+1 || len(b.IDs) < 2 || dm.us[0] != dm.us[1] {
			t.Fatalf("%+v: variates %v for %d tokens", sp, dm.us, len(b.IDs))
		}
	}
}

// runnerPair is the demo model served plainly and as fast (a Runner with
// a shortcut path over it), and a prompt within its vocabulary.
func runnerPair(t *testing.T, m *models.Model, fast Runner, tok *tokenizer.Tokenizer) (plainM, fastM *Manager, pr []int32) {
	plainM = newManager(t, t.TempDir(), ModelConfig{Name: "demo", Model: m, Tokenizer: tok})
	fastM = newManager(t, t.TempDir(), ModelConfig{Name: "demo", Model: fast, Tokenizer: tok})
	pr = prompt(23, 4)
	for i := range pr {
		pr[i] %= int32(m.Config.VocabSize)
	}
	return plainM, fastM, pr
}
