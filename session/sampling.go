package session

import (
	"cmp"
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
}

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
	if p.Temperature <= 0 || p.TopK == 1 {
		best := 0
		for i, v := range x {
			if v > x[best] {
				best = i
			}
		}
		return []int32{int32(best)}, []float64{1}
	}
	// Softmax at the temperature, over every token.
	maxX := math.Inf(-1)
	for _, v := range x {
		maxX = max(maxX, v)
	}
	idx := s.idx[:0]
	for i, v := range x {
		x[i] = math.Exp((v - maxX) / p.Temperature)
		if x[i] > 0 {
			idx = append(idx, int32(i))
		}
	}
	s.idx = idx
	// Candidates by decreasing probability, ties by id.
	slices.SortFunc(idx, func(a, b int32) int {
		if c := cmp.Compare(x[b], x[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if p.TopK > 0 && p.TopK < len(idx) {
		idx = idx[:p.TopK]
	}
	if p.TopP > 0 && p.TopP < 1 {
		var total float64
		for _, t := range idx {
			total += x[t]
		}
		var acc float64
		for i, t := range idx {
			acc += x[t] / total
			if acc >= p.TopP {
				idx = idx[:i+1]
				break
			}
		}
	}
	if p.MinP > 0 && len(idx) > 0 {
		cut := p.MinP * x[idx[0]]
		n := 1
		for n < len(idx) && x[idx[n]] >= cut {
			n++
		}
		idx = idx[:n]
	}
	ids := slices.Clone(idx)
	slices.Sort(ids)
	probs := make([]float64, len(ids))
	var total float64
	for _, t := range ids {
		total += x[t]
	}
	for i, t := range ids {
		probs[i] = x[t] / total
	}
	return ids, probs
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
