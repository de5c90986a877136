package session

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdjustMatchesSampler: the Adjust a sampler makes for its next step
// (made at once, or earlier and kept up to date token by token), applied
// to the logits, gives bit for bit the logits its own adjusted makes, for every mix of penalties and bias (repetition above and below
// 1, negative count penalties, bias ids outside the vocabulary, logits of
// both signs and zero); Check accepts it.
func TestAdjustMatchesSampler(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const vocab = 500
	for trial := range 300 {
		p := SamplingParams{Temperature: 1}
		if r.IntN(2) == 0 {
			p.RepetitionPenalty = []float64{1.3, 0.7, 1.05, 2}[r.IntN(4)]
		}
		if r.IntN(2) == 0 {
			p.PresencePenalty = r.NormFloat64()
		}
		if r.IntN(2) == 0 {
			p.FrequencyPenalty = r.NormFloat64() / 3
		}
		if r.IntN(2) == 0 {
			p.LogitBias = map[int32]float32{}
			for range r.IntN(20) {
				p.LogitBias[int32(r.IntN(vocab+50))-10] = float32(r.NormFloat64() * 10)
			}
		}
		prompt := make([]int32, r.IntN(40))
		for i := range prompt {
			prompt[i] = int32(r.IntN(vocab))
		}
		s := newSampler(p, prompt)
		for range r.IntN(60) {
			s.observe(int32(r.IntN(vocab)))
		}
		if r.IntN(2) == 0 {
			// Made now and kept up to date by the tokens that follow.
			s.adjust()
			for range r.IntN(60) {
				s.observe(int32(r.IntN(vocab)))
			}
		}
		logits := make([]float32, vocab)
		for i := range logits {
			switch r.IntN(10) {
			case 0:
				logits[i] = 0
			default:
				logits[i] = float32(r.NormFloat64() * 4)
			}
		}
		want := append([]float32(nil), s.adjusted(logits)...)
		a := s.adjust()
		got := append([]float32(nil), logits...)
		if a != nil {
			if err := a.Check(); err != nil {
				t.Fatalf("trial %d: the sampler's own Adjust: %v", trial, err)
			}
			a.Apply(got)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("trial %d (%+v): logit %d: Adjust %v, sampler %v", trial, p, i, got[i], want[i])
			}
		}
	}
}

// TestAdjustCheck: what no session makes is refused.
func TestAdjustCheck(t *testing.T) {
	ok := AdjustEntry{ID: 3, Flags: AdjustRepeat}
	for _, a := range []Adjust{
		{Repetition: 0, Entries: []AdjustEntry{ok}},
		{Repetition: math.Inf(1), Entries: []AdjustEntry{ok}},
		{Repetition: math.NaN(), Entries: []AdjustEntry{ok}},
		{Repetition: 1.1, Entries: []AdjustEntry{{ID: -1, Flags: AdjustRepeat}}},
		{Repetition: 1.1, Entries: []AdjustEntry{ok, ok}},
		{Repetition: 1.1, Entries: []AdjustEntry{{ID: 5, Flags: AdjustRepeat}, ok}},
		{Entries: []AdjustEntry{{ID: 1, Flags: 0}}},
		{Entries: []AdjustEntry{{ID: 1, Flags: 8}}},
		{Entries: []AdjustEntry{{ID: 1, Flags: AdjustSub, Sub: math.NaN()}}},
		{Entries: []AdjustEntry{{ID: 1, Flags: AdjustSub, Sub: math.Inf(-1)}}},
		{Entries: []AdjustEntry{{ID: 1, Flags: AdjustBias, Bias: float32(math.NaN())}}},
	} {
		if a.Check() == nil {
			t.Errorf("%+v accepted", a)
		}
	}
	good := Adjust{Entries: []AdjustEntry{{ID: 1, Flags: AdjustSub, Sub: 0.5}, {ID: 9, Flags: AdjustBias, Bias: -100}}}
	if err := good.Check(); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
}
