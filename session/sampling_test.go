package session

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 } // float32 probabilities

// dist runs the sampler's distribution and returns it as id → probability.
func dist(p SamplingParams, logits []float32, prompt, generated []int32) map[int32]float64 {
	s := newSampler(p, prompt)
	for _, g := range generated {
		s.observe(g)
	}
	ids, probs := s.distribution(logits)
	out := map[int32]float64{}
	for i, id := range ids {
		out[id] = probs[i]
	}
	return out
}

func softmax(x ...float64) []float64 {
	var sum float64
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Exp(v)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func checkDist(t *testing.T, name string, got map[int32]float64, want map[int32]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", name, got, want)
	}
	for id, p := range want {
		if !near(got[id], p) {
			t.Fatalf("%s: got %v, want %v", name, got, want)
		}
	}
}

func TestDistributions(t *testing.T) {
	logits := []float32{1, 2, 3, 0, -1}
	// Greedy.
	checkDist(t, "greedy", dist(SamplingParams{}, logits, nil, nil), map[int32]float64{2: 1})
	// Temperature 2: softmax of logits/2.
	sm := softmax(0.5, 1, 1.5, 0, -0.5)
	checkDist(t, "temperature", dist(SamplingParams{Temperature: 2}, logits, nil, nil),
		map[int32]float64{0: sm[0], 1: sm[1], 2: sm[2], 3: sm[3], 4: sm[4]})
	// Top-k 2: the two largest, renormalised.
	s2 := softmax(2, 3)
	checkDist(t, "top-k", dist(SamplingParams{Temperature: 1, TopK: 2}, logits, nil, nil),
		map[int32]float64{1: s2[0], 2: s2[1]})
	// Top-p: probabilities at T=1 are ≈ .6364 .2341 .0861 .0317 .0117;
	// p=0.8 keeps {2,1} (.8705 ≥ .8), p=0.5 keeps {2}.
	checkDist(t, "top-p .8", dist(SamplingParams{Temperature: 1, TopP: 0.8}, logits, nil, nil),
		map[int32]float64{1: s2[0], 2: s2[1]})
	checkDist(t, "top-p .5", dist(SamplingParams{Temperature: 1, TopP: 0.5}, logits, nil, nil),
		map[int32]float64{2: 1})
	// Min-p 0.1: threshold .06364 keeps {2,1,0}.
	s3 := softmax(1, 2, 3)
	checkDist(t, "min-p", dist(SamplingParams{Temperature: 1, MinP: 0.1}, logits, nil, nil),
		map[int32]float64{0: s3[0], 1: s3[1], 2: s3[2]})
	// Top-k 4 then top-p .95 over the renormalised four: .6439 .2369 .0871 .0321
	// → cumulative .6439 .8808 .9679: keeps three.
	checkDist(t, "top-k+top-p", dist(SamplingParams{Temperature: 1, TopK: 4, TopP: 0.95}, logits, nil, nil),
		map[int32]float64{0: s3[0], 1: s3[1], 2: s3[2]})
}

func TestPenalties(t *testing.T) {
	logits := []float32{1, 2, 3, -1}
	// Repetition 2 on prompt token 2 (positive: halved) and generated token
	// 3 (negative: doubled).
	sm := softmax(1, 2, 1.5, -2)
	checkDist(t, "repetition", dist(SamplingParams{Temperature: 1, RepetitionPenalty: 2}, logits, []int32{2}, []int32{3}),
		map[int32]float64{0: sm[0], 1: sm[1], 2: sm[2], 3: sm[3]})
	// Frequency 0.5 and presence 0.25 on generated tokens only: token 1
	// twice (2 - 1 - .25), token 0 once (1 - .5 - .25); the prompt is exempt.
	sm = softmax(0.25, 0.75, 3, -1)
	checkDist(t, "frequency+presence",
		dist(SamplingParams{Temperature: 1, FrequencyPenalty: 0.5, PresencePenalty: 0.25}, logits, []int32{2}, []int32{1, 1, 0}),
		map[int32]float64{0: sm[0], 1: sm[1], 2: sm[2], 3: sm[3]})
	// Penalties change the greedy choice too.
	checkDist(t, "greedy with presence", dist(SamplingParams{PresencePenalty: 2}, logits, nil, []int32{2}),
		map[int32]float64{1: 1})
}

func TestSeededSampling(t *testing.T) {
	logits := make([]float32, 50)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	draw := func(seed uint64) []int32 {
		s := newSampler(SamplingParams{Temperature: 1, Seed: &seed}, nil)
		var out []int32
		for range 40 {
			out = append(out, s.sample(logits))
		}
		return out
	}
	a, b, c := draw(7), draw(7), draw(8)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different tokens: %v vs %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("different seeds, same tokens: %v", a)
	}
	// The empirical distribution follows the probabilities.
	seed := uint64(1)
	s := newSampler(SamplingParams{Temperature: 1, TopK: 2, Seed: &seed}, nil)
	count := 0
	const n = 20000
	two := []float32{0, 1, -5}
	for range n {
		if s.sample(two) == 1 {
			count++
		}
	}
	if p := softmax(0, 1)[1]; math.Abs(float64(count)/n-p) > 0.02 {
		t.Errorf("sampled token 1 %d/%d times, want ≈ %.3f", count, n, p)
	}
}

func TestLogSoftmax(t *testing.T) {
	logits := []float32{1, 3, 2, 3}
	lp, top := logSoftmax(logits, 2, 3)
	lse := math.Log(math.Exp(1) + 2*math.Exp(3) + math.Exp(2))
	if math.Abs(float64(lp)-(2-lse)) > 1e-6 {
		t.Errorf("logprob %v, want %v", lp, 2-lse)
	}
	if len(top) != 3 || top[0].ID != 1 || top[1].ID != 3 || top[2].ID != 2 {
		t.Fatalf("top %+v", top)
	}
	if math.Abs(float64(top[0].Logprob)-(3-lse)) > 1e-6 {
		t.Errorf("top logprob %v", top[0].Logprob)
	}
}

func TestTopN(t *testing.T) {
	x := []float32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3}
	got := topN(x, 4)
	if !slices.Equal(got, []int32{5, 7, 4, 8}) {
		t.Fatalf("topN %v", got)
	}
	// A wide nucleus grows past the first 64 candidates.
	flat := make([]float32, 1000)
	seed := uint64(1)
	ids, _ := newSampler(SamplingParams{Temperature: 1, TopP: 0.5, Seed: &seed}, nil).distribution(flat)
	if len(ids) != 500 {
		t.Fatalf("flat nucleus of %d tokens, want 500", len(ids))
	}
}

// refDistribution is the sampler's distribution computed plainly in
// float64 over a sorted vocabulary (no penalties): the reference for the
// float32 vector passes and the thresholded nucleus.
func refDistribution(p SamplingParams, logits []float32) map[int32]float64 {
	maxL := math.Inf(-1)
	for _, v := range logits {
		maxL = max(maxL, float64(v))
	}
	x := make([]float64, len(logits))
	var total float64
	for i, v := range logits {
		x[i] = math.Exp((float64(v) - maxL) / p.Temperature)
		total += x[i]
	}
	order := make([]int32, len(x))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if x[a] != x[b] {
			if x[a] > x[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	keep := order
	if p.TopK > 0 {
		keep = keep[:p.TopK]
		total = 0
		for _, t := range keep {
			total += x[t]
		}
	}
	if p.TopP > 0 && p.TopP < 1 {
		var acc float64
		for i, t := range keep {
			acc += x[t] / total
			if acc >= p.TopP {
				keep = keep[:i+1]
				break
			}
		}
	}
	if p.MinP > 0 {
		keep = slices.DeleteFunc(slices.Clone(keep), func(t int32) bool { return x[t] < p.MinP })
	}
	var mass float64
	for _, t := range keep {
		mass += x[t]
	}
	out := map[int32]float64{}
	for _, t := range keep {
		out[t] = x[t] / mass
	}
	return out
}

// TestSamplerLargeVocab: over a 50K vocabulary, every filter's
// distribution against the float64 reference, and the unfiltered draw
// (which never lists the ids) against a draw from the reference with
// the same random stream.
func TestSamplerLargeVocab(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 50000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	logits[777] = 14 // a peak, as language models have
	logits[4242] = 13
	for _, p := range []SamplingParams{
		{Temperature: 0.7, TopP: 0.9}, {Temperature: 1, TopP: 0.5}, {Temperature: 1.3, TopP: 0.95},
		{Temperature: 0.6, TopK: 20, TopP: 0.95}, {Temperature: 1, TopK: 50},
		{Temperature: 0.7, MinP: 0.05}, {Temperature: 1, TopP: 0.9, MinP: 0.1},
	} {
		got, want := dist(p, logits, nil, nil), refDistribution(p, logits)
		checkDist(t, fmt.Sprintf("%+v", p), got, want)
	}
	seed := uint64(9)
	p := SamplingParams{Temperature: 1.5, Seed: &seed}
	s := newSampler(p, nil)
	ref := refDistribution(p, logits)
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	cum := make([]float64, len(logits)+1) // the reference's cumulative probabilities
	for i := range logits {
		cum[i+1] = cum[i] + ref[int32(i)]
	}
	for range 300 {
		// The token the same uniform draw falls on, to the float32
		// probabilities' rounding (a cumulative sum within 1e-6).
		u := rng.Float64()
		g := s.sample(logits)
		if u < cum[g]-1e-6 || u >= cum[g+1]+1e-6 {
			t.Fatalf("drew %d (cumulative %v..%v) for u %v", g, cum[g], cum[g+1], u)
		}
	}
}

// TestNucleusFlat: top-p over near-uniform probabilities (a random-weight
// model's), whose nucleus is most of a 152K vocabulary and whose
// boundary is found by three levels of histograms, and over logits of few
// distinct values (ties ranked by id): the nucleus ends where the ranked
// sum of the sampler's own float32 probabilities first reaches p of their
// total.
func TestNucleusFlat(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	uniform := make([]float32, 151936)
	ties := make([]float32, len(uniform))
	for i := range uniform {
		uniform[i] = float32(r.NormFloat64() * 0.3)
		ties[i] = float32(r.IntN(9)) * 0.25
	}
	for _, c := range []struct {
		name   string
		logits []float32
		p      SamplingParams
	}{
		{"uniform", uniform, SamplingParams{Temperature: 0.7, TopP: 0.9}},
		{"uniform p0.3", uniform, SamplingParams{Temperature: 1, TopP: 0.3}},
		{"ties", ties, SamplingParams{Temperature: 1, TopP: 0.6}},
		{"ties p0.999", ties, SamplingParams{Temperature: 0.5, TopP: 0.999}},
	} {
		s := newSampler(c.p, nil)
		y, total := s.probabilities(c.logits)
		y = slices.Clone(y)
		last, among := s.nucleusEnd(y, total)
		order := make([]int32, len(y))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(y[b], y[a]) })
		var acc float64
		want := int32(-1)
		for _, id := range order {
			if acc += float64(y[id]); acc >= c.p.TopP*total {
				want = id
				break
			}
		}
		// The histogram's sums take another order than the ranked one, so
		// a rounding at the boundary could move the end by a rank; these
		// inputs have none (the same bits on every vector path).
		if last != want {
			rank := func(id int32) int { return slices.Index(order, id) }
			t.Fatalf("%s: the nucleus ends at token %d (rank %d), want %d (rank %d)", c.name, last, rank(last), want, rank(want))
		}
		if among != nil {
			t.Errorf("%s: a flat distribution's tokens listed (%d)", c.name, len(among))
		}
	}
}

// TestProbabilitiesTotal: the probabilities' total over a Qwen3-sized
// vocabulary is their float64 sum to within 1e-7 (relative): the
// draw scales its variate by it and top-p's bound is a share of it
// (ExpShifted's float32 lanes alone had been off by 8.9e-6 here).
func TestProbabilitiesTotal(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	for _, sigma := range []float64{0.3, 3} {
		logits := make([]float32, 151936)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * sigma)
		}
		s := newSampler(SamplingParams{Temperature: 0.7}, nil)
		y, total := s.probabilities(logits)
		var want float64
		for _, v := range y {
			want += float64(v)
		}
		if e := math.Abs(total-want) / want; e > 1e-7 {
			t.Errorf("σ %v: total %v, float64 sum %v (relative %.2g)", sigma, total, want, e)
		}
	}
}
