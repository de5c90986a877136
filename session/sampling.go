package session

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/pocketllm/pocketllm/internal/vmath"
)

// SamplingParams choose the next token from the logits. The zero value is
// greedy decoding. Penalties follow vLLM: the repetition penalty (HF
// style: positive logits divided by it, negative ones multiplied) covers
// the prompt and the generated tokens; presence and frequency penalties
// (OpenAI style: subtracted from the logit) cover generated tokens only.
// Then the temperature scales the logits, and top-k, top-p and min-p
// filter the softmax, in that order, each on the distribution the previous
// one left (renormalised).
type SamplingParams struct {
	// Temperature ≤ 0 means greedy (argmax after penalties).
	Temperature float64
	// TopP in (0,1) keeps the smallest set of most likely tokens whose
	// probability sums to at least TopP; 0 or ≥ 1 disables it.
	TopP float64
	// TopK > 0 keeps the TopK most likely tokens.
	TopK int
	// MinP in (0,1] drops tokens less likely than MinP × the top probability.
	MinP float64
	// Seed makes sampling reproducible: the same seed, params and logits
	// give the same tokens. nil draws a random seed.
	Seed *uint64
	// RepetitionPenalty: 0 or 1 disables it.
	RepetitionPenalty float64
	PresencePenalty   float64
	FrequencyPenalty  float64
	// LogitBias is added to the logits of its token ids after the
	// penalties, before temperature and greedy selection (OpenAI's
	// logit_bias; ids outside the vocabulary are ignored). A biased
	// generation always samples from the logits, never from a runner's
	// argmax path, which would not see the bias.
	LogitBias map[int32]float32
}

// biased reports whether p changes the logits by LogitBias.
func (p SamplingParams) biased() bool { return len(p.LogitBias) > 0 }

// sampler holds the state one generation's sampling needs: the random
// stream and the token counts the penalties read.
type sampler struct {
	p      SamplingParams
	rng    *rand.Rand
	seen   map[int32]bool // prompt and generated tokens (repetition penalty)
	counts map[int32]int  // generated tokens (presence, frequency)
	y      []float32      // scratch: adjusted logits, then probabilities
	idx    []int32        // scratch: candidate ids
}

func newSampler(p SamplingParams, prompt []int32) *sampler {
	seed := rand.Uint64()
	if p.Seed != nil {
		seed = *p.Seed
	}
	s := &sampler{p: p, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		seen: map[int32]bool{}, counts: map[int32]int{}}
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		for _, t := range prompt {
			s.seen[t] = true
		}
	}
	return s
}

// observe records a generated token for the penalties.
func (s *sampler) observe(id int32) {
	s.counts[id]++
	if s.p.RepetitionPenalty != 0 && s.p.RepetitionPenalty != 1 {
		s.seen[id] = true
	}
}

// greedy reports whether p picks the argmax.
func (p SamplingParams) greedy() bool { return p.Temperature <= 0 || p.TopK == 1 }

// filtered reports whether p keeps only part of the distribution.
func (p SamplingParams) filtered() bool {
	return p.TopK > 0 || (p.TopP > 0 && p.TopP < 1) || p.MinP > 0
}

// sample picks the next token. Sampling from the whole distribution (no
// filter) draws straight from the probabilities, without listing the
// vocabulary's ids.
func (s *sampler) sample(logits []float32) int32 {
	if !s.p.greedy() && !s.p.filtered() {
		y, total := s.probabilities(logits)
		u := s.rng.Float64() * total
		var acc float64
		last := int32(-1)
		for i, v := range y {
			if v > 0 {
				acc += float64(v)
				last = int32(i)
				if u < acc {
					return int32(i)
				}
			}
		}
		return max(last, 0) // rounding: the last token with a probability
	}
	ids, probs := s.distribution(logits)
	if len(ids) == 1 {
		return ids[0]
	}
	u := s.rng.Float64()
	var acc float64
	for i, p := range probs {
		acc += p
		if u < acc {
			return ids[i]
		}
	}
	return ids[len(ids)-1]
}

// adjusted returns the logits after penalties and bias, in s's scratch.
func (s *sampler) adjusted(logits []float32) []float32 {
	p := s.p
	y := append(s.y[:0], logits...)
	s.y = y
	if rp := p.RepetitionPenalty; rp != 0 && rp != 1 {
		for t := range s.seen {
			if v := float64(y[t]); v > 0 {
				y[t] = float32(v / rp)
			} else {
				y[t] = float32(v * rp)
			}
		}
	}
	if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
		for t, c := range s.counts {
			y[t] = float32(float64(y[t]) - (p.FrequencyPenalty*float64(c) + p.PresencePenalty))
		}
	}
	for t, b := range p.LogitBias {
		if t >= 0 && int(t) < len(y) {
			y[t] += b
		}
	}
	return y
}

// probabilities returns the softmax at the temperature of the adjusted
// logits, unnormalised (the most likely token's is 1), and their sum: the
// vocabulary-wide passes in float32 vector loops (vmath), which took
// 1.5 ms a token over 152K ids as float64 math.Exp calls.
func (s *sampler) probabilities(logits []float32) ([]float32, float64) {
	y := s.adjusted(logits)
	vmath.Scale(y, float32(1/s.p.Temperature))
	return y, float64(vmath.ExpShifted(y, vmath.Max(y)))
}

// distribution returns the candidate ids (ascending) and their
// probabilities (summing to 1) after penalties, temperature and filters.
// Greedy decoding returns the single argmax.
func (s *sampler) distribution(logits []float32) ([]int32, []float64) {
	p := s.p
	if p.greedy() {
		y := s.adjusted(logits)
		best := 0
		for i, v := range y {
			if v > y[best] {
				best = i
			}
		}
		return []int32{int32(best)}, []float64{1}
	}
	y, total := s.probabilities(logits)
	var ids []int32
	if p.TopK > 0 || (p.TopP > 0 && p.TopP < 1) {
		ids = s.nucleus(y, total)
		if p.MinP > 0 {
			cut := float32(p.MinP) // × the top probability, which is 1
			ids = slices.DeleteFunc(ids, func(t int32) bool { return y[t] < cut })
		}
	} else {
		// Min-p alone (the unfiltered case never lists the ids).
		ids = s.idx[:0]
		cut := max(float32(p.MinP), math.SmallestNonzeroFloat32)
		for i, v := range y {
			if v >= cut {
				ids = append(ids, int32(i))
			}
		}
		s.idx = ids
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	probs := make([]float64, len(ids))
	total = 0
	for _, t := range ids {
		total += float64(y[t])
	}
	for i, t := range ids {
		probs[i] = float64(y[t]) / total
	}
	return ids, probs
}

// nucleus applies top-k and top-p to the unnormalised probabilities y
// (summing to total, the largest 1). It orders only the head of the
// distribution: with top-k the top k tokens; with top-p alone the tokens
// above a threshold that falls 16× a round until they hold the nucleus's
// mass, so a large vocabulary is not sorted for every token.
func (s *sampler) nucleus(y []float32, total float64) []int32 {
	p := s.p
	topP := p.TopP > 0 && p.TopP < 1
	if p.TopK > 0 {
		top := topN(y, min(p.TopK, len(y)))
		if !topP {
			return top
		}
		var mass float64
		for _, t := range top {
			mass += float64(y[t])
		}
		return prefixMass(y, top, mass, p.TopP)
	}
	// Top-p alone: the tokens of y ≥ cut are a prefix of the order by
	// probability; once they hold p of the mass, the nucleus is in them.
	cand := s.idx[:0]
	for cut := float32(1.0 / 64); ; cut /= 16 {
		cand = cand[:0]
		var mass float64
		for i, v := range y {
			if v >= cut {
				cand = append(cand, int32(i))
				mass += float64(v)
			}
		}
		if mass >= p.TopP*total || cut < 1e-30 {
			break
		}
	}
	s.idx = cand
	slices.SortFunc(cand, func(a, b int32) int { // most likely first, ties by id
		if y[a] != y[b] {
			if y[a] > y[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	return prefixMass(y, cand, total, p.TopP)
}

// prefixMass is the shortest prefix of ids (most likely first) whose
// probabilities, out of mass, sum to at least topP; all of ids where
// rounding keeps the sum short of it.
func prefixMass(y []float32, ids []int32, mass, topP float64) []int32 {
	var acc float64
	for i, t := range ids {
		acc += float64(y[t]) / mass
		if acc >= topP {
			return ids[:i+1]
		}
	}
	return ids
}

// topN returns the ids of the n largest values of x, largest first (ties
// by smaller id), in O(len(x) log n).
func topN(x []float32, n int) []int32 {
	less := func(a, b int32) bool { // a ranks below b
		if x[a] != x[b] {
			return x[a] < x[b]
		}
		return a > b
	}
	h := make([]int32, 0, n) // min-heap by rank
	down := func(i int) {
		for {
			l, m := 2*i+1, i
			if l < len(h) && less(h[l], h[m]) {
				m = l
			}
			if r := l + 1; r < len(h) && less(h[r], h[m]) {
				m = r
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := range x {
		t := int32(i)
		if len(h) < n {
			h = append(h, t)
			for j := len(h) - 1; j > 0; {
				parent := (j - 1) / 2
				if !less(h[j], h[parent]) {
					break
				}
				h[j], h[parent] = h[parent], h[j]
				j = parent
			}
			continue
		}
		// Most values are below the heap's least: one comparison each
		// (a tie with it goes on to less, which orders by id).
		if x[i] < x[h[0]] {
			continue
		}
		if less(h[0], t) {
			h[0] = t
			down(0)
		}
	}
	slices.SortFunc(h, func(a, b int32) int {
		if less(b, a) {
			return -1
		}
		if less(a, b) {
			return 1
		}
		return 0
	})
	return h
}

// logSoftmax returns the log-probability of id under the raw logits and
// the top n alternatives (most likely first, ties by id).
func logSoftmax(logits []float32, id int32, n int) (float32, []TopLogprob) {
	lse := logSumExp(logits)
	lp := float32(float64(logits[id]) - lse)
	if n <= 0 {
		return lp, nil
	}
	n = min(n, len(logits))
	top := make([]int32, 0, n+1)
	for i := range logits {
		t := int32(i)
		// Insertion into a short sorted list: n is small (≤ 20).
		pos := len(top)
		for pos > 0 && logits[top[pos-1]] < logits[t] {
			pos--
		}
		if pos >= n {
			continue
		}
		top = slices.Insert(top, pos, t)
		if len(top) > n {
			top = top[:n]
		}
	}
	out := make([]TopLogprob, len(top))
	for i, t := range top {
		out[i] = TopLogprob{ID: t, Logprob: float32(float64(logits[t]) - lse)}
	}
	return lp, out
}

// expScratch holds the vocabulary-sized buffers logSumExp exponentiates
// in, as a generation's tokens each need one and then let it go.
var expScratch = sync.Pool{New: func() any { return new([]float32) }}

// logSumExp is log Σ e^v over the logits, the exponentials in vmath's
// float32 loops (a float64 math.Exp a logit was ~1 ms a token).
func logSumExp(logits []float32) float64 {
	buf := expScratch.Get().(*[]float32)
	y := append((*buf)[:0], logits...)
	m := vmath.Max(y)
	sum := vmath.ExpShifted(y, m)
	*buf = y
	expScratch.Put(buf)
	return float64(m) + math.Log(float64(sum))
}
