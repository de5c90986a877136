package session

import (
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
	if x := float64(v); x > 0 {
		return float32(x / rp)
	}
	return float32(float64(v) * rp)
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
// logit): the same changes adjusted makes, as a list.
func (s *sampler) adjust() *Adjust {
	p := s.p
	rep := p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1
	counted := p.PresencePenalty != 0 || p.FrequencyPenalty != 0
	byID := map[int32]AdjustEntry{}
	add := func(t int32, f func(*AdjustEntry)) {
		e := byID[t]
		e.ID = t
		f(&e)
		byID[t] = e
	}
	if rep {
		for t := range s.seen {
			add(t, func(e *AdjustEntry) { e.Flags |= AdjustRepeat })
		}
	}
	if counted {
		for t, c := range s.counts {
			add(t, func(e *AdjustEntry) { e.Flags |= AdjustSub; e.Sub = p.countPenalty(c) })
		}
	}
	for t, b := range p.LogitBias {
		if t >= 0 {
			add(t, func(e *AdjustEntry) { e.Flags |= AdjustBias; e.Bias = b })
		}
	}
	if len(byID) == 0 {
		return nil
	}
	a := &Adjust{Entries: make([]AdjustEntry, 0, len(byID))}
	if rep {
		a.Repetition = p.RepetitionPenalty
	}
	for _, e := range byID {
		a.Entries = append(a.Entries, e)
	}
	slices.SortFunc(a.Entries, func(x, y AdjustEntry) int { return int(x.ID) - int(y.ID) })
	return a
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
