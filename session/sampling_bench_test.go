package session

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSample: one sampled token over a Qwen3-sized vocabulary, the
// host's share of every non-greedy decode step.
func BenchmarkSample(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	peaked := make([]float32, len(logits)) // a language model's: a few likely tokens
	for i := range peaked {
		peaked[i] = float32(r.NormFloat64() * 2)
	}
	for i := range 20 {
		peaked[r.IntN(len(peaked))] = 12 + float32(i)*0.3
	}
	// A random-weight model's: nearly uniform, so top-p's nucleus is
	// most of the vocabulary and most of it shares a few exponents.
	uniform := make([]float32, len(logits))
	for i := range uniform {
		uniform[i] = float32(r.NormFloat64() * 0.3)
	}
	seed := uint64(1)
	for _, c := range []struct {
		name string
		p    SamplingParams
	}{
		{"t1", SamplingParams{Temperature: 1}},
		{"t0.7-p0.9", SamplingParams{Temperature: 0.7, TopP: 0.9}},
		{"t0.6-k20-p0.95", SamplingParams{Temperature: 0.6, TopK: 20, TopP: 0.95}},
		{"t0.7-minp0.05", SamplingParams{Temperature: 0.7, MinP: 0.05}},
	} {
		for _, in := range []struct {
			name   string
			logits []float32
		}{{"flat", logits}, {"peaked", peaked}, {"uniform", uniform}} {
			b.Run(c.name+"/"+in.name, func(b *testing.B) {
				c.p.Seed = &seed
				s := newSampler(c.p, nil)
				for b.Loop() {
					s.sample(in.logits)
				}
			})
		}
	}
}

// BenchmarkLogSoftmax: a token's logprob and top 5 over a Qwen3-sized
// vocabulary (each streamed token when logprobs are asked for).
func BenchmarkLogSoftmax(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	for b.Loop() {
		logSoftmax(logits, 7, 5)
	}
}
