package session

import (
	"math"
	"testing"
)

// FuzzSample: any parameters a request can carry and any logits a model
// can produce (NaN and infinities included) give a token of the
// vocabulary, never a panic.
func FuzzSample(f *testing.F) {
	f.Add(0.7, 0.9, 0, 0.0, uint64(1), []byte{1, 2, 3, 200, 255, 0, 7})
	f.Add(1.0, 0.0, 3, 0.5, uint64(2), []byte{9, 9, 9, 9})
	f.Add(2.0, 0.5, 100, 0.0, uint64(3), []byte{0})
	f.Add(0.0, 1.0, 1, 1.0, uint64(4), []byte{255, 254, 253})
	f.Fuzz(func(t *testing.T, temp, topP float64, topK int, minP float64, seed uint64, raw []byte) {
		if len(raw) == 0 {
			return
		}
		logits := make([]float32, len(raw))
		for i, b := range raw {
			switch b {
			case 255:
				logits[i] = float32(math.NaN())
			case 254:
				logits[i] = float32(math.Inf(1))
			case 253:
				logits[i] = float32(math.Inf(-1))
			default:
				logits[i] = float32(b)/8 - 16
			}
		}
		p := SamplingParams{Temperature: temp, TopP: topP, TopK: topK, MinP: minP, Seed: &seed,
			RepetitionPenalty: 1.3, PresencePenalty: 0.5}
		s := newSampler(p, []int32{0})
		for range 3 {
			id := s.sample(logits)
			if id < 0 || int(id) >= len(logits) {
				t.Fatalf("token %d outside a vocabulary of %d (%+v)", id, len(logits), p)
			}
			s.observe(id)
			s.distribution(logits)
		}
	})
}
