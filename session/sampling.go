package session

import (
	"math"
	"math/rand/v2"
	"slices"
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
	x      []float64      // scratch: adjusted logits, then probabilities
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

// sample picks the next token.
func (s *sampler) sample(logits []float32) int32 {
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

// distribution returns the candidate ids (ascending) and their
// probabilities (summing to 1) after penalties, temperature and filters.
// Greedy decoding returns the single argmax.
func (s *sampler) distribution(logits []float32) ([]int32, []float64) {
	p := s.p
	x := s.x[:0]
	for _, v := range logits {
		x = append(x, float64(v))
	}
	s.x = x
	if rp := p.RepetitionPenalty; rp != 0 && rp != 1 {
		for t := range s.seen {
			if x[t] > 0 {
				x[t] /= rp
			} else {
				x[t] *= rp
			}
		}
	}
	if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
		for t, c := range s.counts {
			x[t] -= p.FrequencyPenalty*float64(c) + p.PresencePenalty
		}
	}
	for t, b := range p.LogitBias {
		if t >= 0 && int(t) < len(x) {
			x[t] += float64(b)
		}
	}
	if p.Temperature <= 0 || p.TopK == 1 {
		best := 0
		for i, v := range x {
			if v > x[best] {
				best = i
			}
		}
		return []int32{int32(best)}, []float64{1}
	}
	// Softmax at the temperature, over every token (unnormalised).
	maxX := math.Inf(-1)
	for _, v := range x {
		maxX = max(maxX, v)
	}
	var total float64
	for i, v := range x {
		x[i] = math.Exp((v - maxX) / p.Temperature)
		total += x[i]
	}
	var ids []int32
	if p.TopK > 0 || (p.TopP > 0 && p.TopP < 1) {
		ids = s.nucleus(x, total)
	} else {
		ids = s.idx[:0]
		for i, v := range x {
			if v > 0 {
				ids = append(ids, int32(i))
			}
		}
		s.idx = ids
	}
	if p.MinP > 0 && len(ids) > 0 {
		top := 0.0
		for _, t := range ids {
			top = max(top, x[t])
		}
		cut := p.MinP * top
		ids = slices.DeleteFunc(ids, func(t int32) bool { return x[t] < cut })
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	probs := make([]float64, len(ids))
	total = 0
	for _, t := range ids {
		total += x[t]
	}
	for i, t := range ids {
		probs[i] = x[t] / total
	}
	return ids, probs
}

// nucleus applies top-k and top-p to the unnormalised probabilities x
// (summing to total). It only orders the head of the distribution: the
// top n tokens, n growing until the nucleus fits, so a large vocabulary is
// not sorted for every token.
func (s *sampler) nucleus(x []float64, total float64) []int32 {
	p := s.p
	n := 64
	if p.TopK > 0 {
		n = p.TopK
	}
	for {
		n = min(n, len(x))
		top := topN(x, n)
		mass := total
		if p.TopK > 0 {
			mass = 0
			for _, t := range top {
				mass += x[t]
			}
		}
		if !(p.TopP > 0 && p.TopP < 1) {
			return top
		}
		var acc float64
		for i, t := range top {
			acc += x[t] / mass
			if acc >= p.TopP {
				return top[:i+1]
			}
		}
		if p.TopK > 0 || n == len(x) {
			return top // rounding: the whole head is the nucleus
		}
		n *= 4
	}
}

// topN returns the ids of the n largest values of x, largest first (ties
// by smaller id), in O(len(x) log n).
func topN(x []float64, n int) []int32 {
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
	maxL := float32(math.Inf(-1))
	for _, v := range logits {
		maxL = max(maxL, v)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v - maxL))
	}
	lse := float64(maxL) + math.Log(sum)
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
