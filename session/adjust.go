package session

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Adjust is what a penalised or biased generation does to a step's
// logits before its draw (SamplingParams' repetition, presence and
// frequency penalties and logit bias), as a list a runner can apply
// itself: the token ids whose logits change, each with the changes that
// apply to it. A runner that draws on its device (SamplingRunner) then
// ships a token per step for these generations too, not the
// vocabulary's logits. Apply gives bit for bit what the session's
// sampler computes (sampler.adjusted), so the draw is the same.
type Adjust struct {
	// Repetition is the repetition penalty's factor (for entries with
	// AdjustRepeat): a positive logit is divided by it, any other
	// multiplied.
	Repetition float64
	// Entries are in ascending order of ID, each ID once.
	Entries []AdjustEntry
}

// AdjustEntry is one token id's changes, applied in the order of the
// flags: repetition, then Sub subtracted, then Bias added.
type AdjustEntry struct {
	ID    int32
	Flags uint8 // AdjustRepeat | AdjustSub | AdjustBias
	// Sub is frequency × count + presence (AdjustSub): the float64 the
	// logit is lowered by, then rounded to float32.
	Sub float64
	// Bias is added to the float32 logit (AdjustBias).
	Bias float32
}

// Entry flags.
const (
	AdjustRepeat = 1 << iota
	AdjustSub
	AdjustBias
	adjustFlags = AdjustRepeat | AdjustSub | AdjustBias
)

// Apply changes the logits in y (ids beyond y are ignored, as the
// sampler ignores logit_bias ids outside the vocabulary).
func (a *Adjust) Apply(y []float32) {
	for _, e := range a.Entries {
		if e.ID < 0 || int(e.ID) >= len(y) {
			continue
		}
		y[e.ID] = e.apply(y[e.ID], a.Repetition)
	}
}

func (e AdjustEntry) apply(v float32, rep float64) float32 {
	if e.Flags&AdjustRepeat != 0 {
		v = repeatPenalty(v, rep)
	}
	if e.Flags&AdjustSub != 0 {
		v = float32(float64(v) - e.Sub)
	}
	if e.Flags&AdjustBias != 0 {
		v += e.Bias
	}
	return v
}

// repeatPenalty is the repetition penalty on one logit (HF style).
func repeatPenalty(v float32, rp float64) float32 {
	x := float64(v)
	if x > 0 {
		return float32(x / rp)
	}
	return float32(x * rp)
}

// countPenalty is what the presence and frequency penalties take from the
// logit of a token generated c times. The product is rounded before the
// sum (the explicit conversion), so that no platform fuses them into one
// rounding and the sampler and a device computing from Sub agree.
func (p SamplingParams) countPenalty(c int) float64 {
	return float64(p.FrequencyPenalty*float64(c)) + p.PresencePenalty
}

// Check reports an Adjust no session would make (a runner's request
// decoder calls it on what arrives from the wire).
func (a *Adjust) Check() error {
	if a.usesRepetition() && !(a.Repetition > 0 && !math.IsInf(a.Repetition, 0)) {
		return fmt.Errorf("adjust: repetition penalty %v", a.Repetition)
	}
	for i, e := range a.Entries {
		switch {
		case e.ID < 0:
			return fmt.Errorf("adjust: token id %d", e.ID)
		case i > 0 && e.ID <= a.Entries[i-1].ID:
			return fmt.Errorf("adjust: token ids not ascending (%d after %d)", e.ID, a.Entries[i-1].ID)
		case e.Flags&^adjustFlags != 0 || e.Flags == 0:
			return fmt.Errorf("adjust: token %d: flags %#x", e.ID, e.Flags)
		case math.IsNaN(e.Sub) || math.IsInf(e.Sub, 0):
			return fmt.Errorf("adjust: token %d: penalty %v", e.ID, e.Sub)
		case math.IsNaN(float64(e.Bias)):
			return fmt.Errorf("adjust: token %d: bias NaN", e.ID)
		}
	}
	return nil
}

func (a *Adjust) usesRepetition() bool {
	for _, e := range a.Entries {
		if e.Flags&AdjustRepeat != 0 {
			return true
		}
	}
	return false
}

// adjust is the Adjust of s's next step (nil where its params change no
// logit): the same changes adjusted makes, as a list. It is made once and
// then kept up to date by observe (a new id is one insertion into the
// sorted entries, where making it anew took 2 ms a step after a
// 16K-token prompt), so it is valid until the next observe.
func (s *sampler) adjust() *Adjust {
	if s.adj == nil {
		s.adj = &Adjust{}
		if p := s.p; p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
			s.adj.Repetition = p.RepetitionPenalty
		}
		ids := make([]int32, 0, len(s.seen)+len(s.counts)+len(s.p.LogitBias))
		for t := range s.seen {
			ids = append(ids, t)
		}
		for t := range s.counts {
			ids = append(ids, t)
		}
		for t := range s.p.LogitBias {
			ids = append(ids, t)
		}
		slices.Sort(ids)
		for _, t := range slices.Compact(ids) {
			if e, ok := s.adjustEntry(t); ok {
				s.adj.Entries = append(s.adj.Entries, e)
			}
		}
	}
	if len(s.adj.Entries) == 0 {
		return nil
	}
	return s.adj
}

// adjustEntry is token t's entry in s's Adjust, if its logit changes.
func (s *sampler) adjustEntry(t int32) (AdjustEntry, bool) {
	p := s.p
	e := AdjustEntry{ID: t}
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 && s.seen[t] {
		e.Flags |= AdjustRepeat
	}
	if c := s.counts[t]; c > 0 && (p.PresencePenalty != 0 || p.FrequencyPenalty != 0) {
		e.Flags |= AdjustSub
		e.Sub = p.countPenalty(c)
	}
	if b, ok := p.LogitBias[t]; ok && t >= 0 {
		e.Flags |= AdjustBias
		e.Bias = b
	}
	return e, e.Flags != 0
}

// adjustObserved brings s's Adjust, once made, up to date with token t
// just counted (observe).
func (s *sampler) adjustObserved(t int32) {
	if s.adj == nil {
		return
	}
	e, ok := s.adjustEntry(t)
	if !ok {
		return
	}
	es := s.adj.Entries
	i, found := slices.BinarySearchFunc(es, t, func(x AdjustEntry, t int32) int { return cmp.Compare(x.ID, t) })
	if found {
		es[i] = e
	} else {
		s.adj.Entries = slices.Insert(es, i, e)
	}
}

// MaxLogitBias bounds a logit_bias value, as OpenAI's API does.
const MaxLogitBias = 100

// ParseLogitBias reads a logit_bias object as the APIs take it (token
// ids as decimal strings, biases in [-MaxLogitBias, MaxLogitBias]) into
// SamplingParams.LogitBias; nil for none.
func ParseLogitBias(m map[string]float64) (map[int32]float32, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[int32]float32, len(m))
	for k, v := range m {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("logit_bias: key %q is not a token id", k)
		}
		if math.IsNaN(v) || v < -MaxLogitBias || v > MaxLogitBias {
			return nil, fmt.Errorf("logit_bias: bias %v of token %d is outside [-%d, %d]", v, id, MaxLogitBias, MaxLogitBias)
		}
		out[int32(id)] = float32(v)
	}
	return out, nil
}
