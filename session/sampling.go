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
	// generation never takes a runner's plain argmax path, which would not
	// see the bias: its steps carry the bias to the runner's draw (Adjust).
	LogitBias map[int32]float32
}

// biased reports whether p changes the logits by LogitBias.
func (p SamplingParams) biased() bool { return len(p.LogitBias) > 0 }

// adjusts reports whether p changes the logits before the choice: by a
// penalty or by LogitBias.
func (p SamplingParams) adjusts() bool {
	return p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 ||
		p.PresencePenalty != 0 || p.FrequencyPenalty != 0 || p.biased()
}

// sampler holds the state one generation's sampling needs: the random
// stream and the token counts the penalties read.
type sampler struct {
	p      SamplingParams
	src    *rand.PCG // rng's source, copied to peek at the coming draws
	rng    *rand.Rand
	seen   map[int32]bool    // prompt and generated tokens (repetition penalty)
	counts map[int32]int     // generated tokens (presence, frequency)
	y      []float32         // scratch: adjusted logits, then probabilities
	idx    []int32           // scratch: candidate ids
	edge   []int32           // scratch: top-p's boundary bucket
	hist   *[1 << 12]float64 // scratch: top-p's histogram
	adj    *Adjust           // the next step's Adjust, once asked for (adjust.go)
}

func newSampler(p SamplingParams, prompt []int32) *sampler {
	seed := rand.Uint64()
	if p.Seed != nil {
		seed = *p.Seed
	}
	src := rand.NewPCG(seed, 0x9e3779b97f4a7c15)
	s := &sampler{p: p, src: src, rng: rand.New(src), seen: map[int32]bool{}, counts: map[int32]int{}}
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
	s.adjustObserved(id)
}

// Sampler draws tokens from logits as a generation draws them, its
// generated tokens counted for the penalties (no prompt: the repetition
// penalty sees only them). For tools that run a model themselves, e.g.
// `pocketd bench --temperature`.
type Sampler struct{ s *sampler }

// NewSampler returns a Sampler for p.
func NewSampler(p SamplingParams) *Sampler { return &Sampler{newSampler(p, nil)} }

// NewPromptSampler is NewSampler whose repetition penalty also covers
// prompt, as a generation's does.
func NewPromptSampler(p SamplingParams, prompt []int32) *Sampler {
	return &Sampler{newSampler(p, prompt)}
}

// Adjust is the next step's penalties and bias as a runner takes them
// (nil: none), valid until the next Observe or Sample.
func (s *Sampler) Adjust() *Adjust { return s.s.adjust() }

// Observe counts a token drawn elsewhere (a runner's draw with Adjust).
func (s *Sampler) Observe(id int32) { s.s.observe(id) }

// Sample draws the next token.
func (s *Sampler) Sample(logits []float32) int32 {
	id := s.s.sample(logits)
	s.s.observe(id)
	return id
}

// greedy reports whether p picks the argmax.
func (p SamplingParams) greedy() bool { return p.Temperature <= 0 || p.TopK == 1 }

// filtered reports whether p keeps only part of the distribution.
func (p SamplingParams) filtered() bool {
	return p.TopK > 0 || (p.TopP > 0 && p.TopP < 1) || p.MinP > 0
}

// sample picks the next token: the argmax, or a draw that walks the
// kept tokens in id order, their unnormalised probabilities summed, to
// u × their total (no id list or normalised copy of the vocabulary).
func (s *sampler) sample(logits []float32) int32 {
	if s.p.greedy() {
		return s.argmax(logits)
	}
	return s.draw(logits, s.rng.Float64())
}

// draw is sample's draw with the uniform variate u in [0, 1).
func (s *sampler) draw(logits []float32, u float64) int32 {
	y, k := s.kept(logits)
	u *= k.mass
	var acc float64
	if k.ids != nil {
		for _, t := range k.ids {
			if acc += float64(y[t]); u < acc {
				return t
			}
		}
		return k.ids[len(k.ids)-1]
	}
	last := int32(-1)
	for i, v := range y {
		if k.has(int32(i), v) {
			acc += float64(v)
			last = int32(i)
			if u < acc {
				return int32(i)
			}
		}
	}
	return max(last, 0) // rounding: the last kept token
}

// adjusted returns the logits after penalties and bias, in s's scratch.
func (s *sampler) adjusted(logits []float32) []float32 {
	p := s.p
	y := append(s.y[:0], logits...)
	s.y = y
	// (Adjust.Apply makes the same changes from a list: adjust.go.)
	if rp := p.RepetitionPenalty; rp != 0 && rp != 1 {
		for t := range s.seen {
			y[t] = repeatPenalty(y[t], rp)
		}
	}
	if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
		for t, c := range s.counts {
			y[t] = float32(float64(y[t]) - p.countPenalty(c))
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
// 1.5 ms a token over 152K ids as float64 math.Exp calls. ExpShifted runs
// a chunk of ids at a time and the chunks' sums add in float64: its
// float32 lanes over all 152K ids had been off by ~1e-5 (relative), which
// moved the draw's end and top-p's bound by as much (a float64 pass of
// its own cost as much as the exponentials).
func (s *sampler) probabilities(logits []float32) ([]float32, float64) {
	y := s.adjusted(logits)
	vmath.Scale(y, float32(1/s.p.Temperature))
	m := vmath.Max(y)
	const chunk = 1024
	var total float64
	for i := 0; i < len(y); i += chunk {
		total += float64(vmath.ExpShifted(y[i:min(len(y), i+chunk)], m))
	}
	return y, total
}

// argmax is greedy decoding's token after penalties and bias.
func (s *sampler) argmax(logits []float32) int32 {
	return Argmax(s.adjusted(logits))
}

// distribution returns the candidate ids (ascending) and their
// probabilities (summing to 1) after penalties, temperature and filters.
// Greedy decoding returns the single argmax.
func (s *sampler) distribution(logits []float32) ([]int32, []float64) {
	if s.p.greedy() {
		return []int32{s.argmax(logits)}, []float64{1}
	}
	y, k := s.kept(logits)
	ids := k.ids
	if ids == nil {
		for i, v := range y {
			if k.has(int32(i), v) {
				ids = append(ids, int32(i))
			}
		}
	}
	probs := make([]float64, len(ids))
	for i, t := range ids {
		probs[i] = float64(y[t]) / k.mass
	}
	return ids, probs
}

// keptSet is which tokens the filters keep: those with probability above
// lo, and those at lo with ids up to tie; mass is their total. Where
// they are known to be few (top-k, a peaked top-p) they are also listed
// (ids, ascending).
type keptSet struct {
	lo   float32
	tie  int32
	mass float64
	ids  []int32
}

// has reports whether the kept set holds token t of probability v.
func (k *keptSet) has(t int32, v float32) bool { return v > k.lo || (v == k.lo && t <= k.tie) }

// kept returns the unnormalised probabilities y at the temperature and
// the tokens the filters keep. The filters keep a prefix of the tokens
// ranked by probability (ties by id): top-k its first k, top-p the
// shortest prefix holding p of its mass, min-p those at least p × the
// first's. So the kept set is everything ranked at or before one token.
func (s *sampler) kept(logits []float32) ([]float32, keptSet) {
	p := s.p
	y, total := s.probabilities(logits)
	k := keptSet{lo: 0, tie: -1, mass: total} // every token of probability > 0
	if !p.filtered() {
		return y, k
	}
	last := int32(-1) // the last token kept by top-k and top-p; -1: all
	topP := p.TopP > 0 && p.TopP < 1
	var among []int32 // a few tokens the kept ones are among, if known
	switch {
	case p.TopK > 0:
		top := topN(y, min(p.TopK, len(y)))
		among = top
		if topP {
			var m float64
			for _, t := range top {
				m += float64(y[t])
			}
			top = prefixMass(y, top, m, p.TopP)
		}
		if len(top) < len(y) {
			last = top[len(top)-1]
		}
	case topP:
		last, among = s.nucleusEnd(y, total)
	}
	if last >= 0 {
		k.lo, k.tie = y[last], last
	}
	// Min-p's bound, p × the top probability (which is 1), where it
	// keeps fewer tokens.
	if cut := float32(p.MinP); p.MinP > 0 && (cut > k.lo || (cut == k.lo && last < 0)) {
		k.lo, k.tie = cut, math.MaxInt32
	}
	k.mass = 0
	if among != nil {
		for _, t := range among {
			if k.has(t, y[t]) {
				k.ids = append(k.ids, t)
				k.mass += float64(y[t])
			}
		}
		slices.Sort(k.ids)
		return y, k
	}
	k.mass = keptMass(y, &k)
	return y, k
}

// keptMass is the total of k's probabilities in y, in four interleaved
// sums (one running sum chained every add on the one before it).
func keptMass(y []float32, k *keptSet) float64 {
	var m [4]float64
	i := 0
	for ; i+4 <= len(y); i += 4 {
		for j := range 4 {
			if v := y[i+j]; k.has(int32(i+j), v) {
				m[j] += float64(v)
			}
		}
	}
	for ; i < len(y); i++ {
		if k.has(int32(i), y[i]) {
			m[0] += float64(y[i])
		}
	}
	return (m[0] + m[1]) + (m[2] + m[3])
}

// nucleusEnd is the last token of top-p's nucleus over the unnormalised
// probabilities y (summing to total, the largest 1), or -1 when it is
// every token. It is a radix select on the probabilities' bits, which
// order positive floats: a pass sums the probabilities (of the tokens
// within 1/64 of the top where those hold p of the mass, else of all)
// into a histogram by their top 12 bits; the buckets, taken from the top,
// find the one where the ranked sum reaches p. That bucket's tokens are
// bucketed again by the next 12 bits, then by the last 8, which leaves
// tokens of one value, ranked by id. So a flat distribution, whose
// nucleus is most of the vocabulary, costs a few passes and no sort (a
// random-weight model's, where most of the vocabulary shares a few
// exponents, had sorted ~10% of it: 4 ms a token). among is the tokens
// within 1/64 of the top where the nucleus is among them (else nil).
func (s *sampler) nucleusEnd(y []float32, total float64) (last int32, among []int32) {
	want := s.p.TopP * total
	if s.hist == nil {
		s.hist = new([1 << 12]float64)
	}
	sums := s.hist[:]
	clear(sums)
	// A peaked distribution's nucleus is among the few tokens within 1/64
	// of the top: then only they are bucketed (and listed for the draw).
	cand := s.idx[:0]
	var m float64
	for i, v := range y {
		if v >= 1.0/64 {
			if len(cand) == cap(cand) && len(cand) >= len(y)/16 {
				break // not peaked
			}
			cand = append(cand, int32(i))
			m += float64(v)
		}
	}
	s.idx = cand
	if m < want || len(cand) >= len(y)/16 {
		cand = nil // not peaked: every token, and no list
	}
	const shift = nucleusShift
	if cand != nil {
		for _, t := range cand {
			sums[math.Float32bits(y[t])>>shift] += float64(y[t])
		}
	} else {
		firstLevel(sums, y)
	}
	var acc float64
	b, ok := boundaryBucket(sums, &acc, want)
	if !ok {
		return -1, nil // rounding: the whole distribution
	}
	// The boundary bucket's tokens (ids ascending).
	edge := s.edge[:0]
	if cand != nil {
		for _, t := range cand {
			if int(math.Float32bits(y[t])>>shift) == b {
				edge = append(edge, t)
			}
		}
	} else {
		for i, v := range y {
			if int(math.Float32bits(v)>>shift) == b {
				edge = append(edge, int32(i))
			}
		}
	}
	s.edge = edge
	// The next 12 bits, then the last 8: each level keeps the boundary
	// bucket's tokens, in id order.
	for _, lv := range [...]struct{ shift, bits uint }{{8, 12}, {0, 8}} {
		if len(edge) <= 1 {
			break
		}
		mask := uint32(1)<<lv.bits - 1
		sub := sums[:1<<lv.bits]
		clear(sub)
		for _, t := range edge {
			sub[math.Float32bits(y[t])>>lv.shift&mask] += float64(y[t])
		}
		// Where the bucket's own sum, in this order, falls a rounding
		// short, the nucleus ends with the bucket: its lowest sub-bucket.
		sb, ok := boundaryBucket(sub, &acc, want)
		if !ok {
			for sb = 0; sub[sb] == 0 && sb < len(sub)-1; sb++ {
			}
		}
		kept := edge[:0]
		for _, t := range edge {
			if int(math.Float32bits(y[t])>>lv.shift&mask) == sb {
				kept = append(kept, t)
			}
		}
		edge = kept
	}
	// Tokens of one value, ranked by id.
	for _, t := range edge {
		acc += float64(y[t])
		if acc >= want {
			return t, cand
		}
	}
	return edge[len(edge)-1], cand
}

// firstLevel adds each probability of y into sums by its bits above
// shift. A flat distribution's probabilities share a few buckets, so one
// histogram would chain every add on the one before it (a load, an add
// and a store a token); four, each over a quarter of the tokens in
// turn, keep four chains in flight. They cover the bits of probabilities
// in [0, 1] only (the largest is 1).
func firstLevel(sums []float64, y []float32) {
	const shift = nucleusShift
	const n = 0x3F800000>>shift + 1 // through 1.0's bucket
	var part [4][n]float64
	i := 0
	for ; i+4 <= len(y); i += 4 {
		part[0][min(math.Float32bits(y[i])>>shift, n-1)] += float64(y[i])
		part[1][min(math.Float32bits(y[i+1])>>shift, n-1)] += float64(y[i+1])
		part[2][min(math.Float32bits(y[i+2])>>shift, n-1)] += float64(y[i+2])
		part[3][min(math.Float32bits(y[i+3])>>shift, n-1)] += float64(y[i+3])
	}
	for ; i < len(y); i++ {
		part[0][min(math.Float32bits(y[i])>>shift, n-1)] += float64(y[i])
	}
	for b := range n {
		sums[b] = part[0][b] + part[1][b] + part[2][b] + part[3][b]
	}
}

// nucleusShift leaves top-p's first level the probabilities' top 12 bits:
// sign, exponent and 3 of the mantissa.
const nucleusShift = 20

// boundaryBucket walks sums from the top, adding each bucket to *acc,
// and returns the bucket at which *acc would reach want (not added), or
// false (with every bucket added) where none does.
func boundaryBucket(sums []float64, acc *float64, want float64) (int, bool) {
	for b := len(sums) - 1; b >= 0; b-- {
		if *acc+sums[b] >= want {
			return b, true
		}
		*acc += sums[b]
	}
	return 0, false
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
