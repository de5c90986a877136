package worker

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// TestGreedyArgmaxOverWorker: greedy steps over a worker (and a group)
// take the argmax-only path (ForwardArgmax, counted), and give exactly
// the tokens of the in-process model's full logits and of a cold greedy
// decode; steps that need the logits (logprobs) still get them, and
// penalised or biased greedy steps are the runner's draws
// (TestSampledOverWorker).
func TestGreedyArgmaxOverWorker(t *testing.T) {
	for _, world := range worlds() {
		t.Run(fmt.Sprintf("tp%d", world), func(t *testing.T) {
			p := newPair(t, "qwen3", world, 0)
			px := p.workerPx
			p.open("a")
			toks := prompt(30, 5)
			p.append("a", toks)
			before := px.ArgmaxSteps()
			got := p.generate("a", session.GenerateParams{MaxTokens: 8}) // equal to the in-process tokens
			// The first token's logits were kept by the append; the 7
			// steps after it are argmax-only.
			if n := px.ArgmaxSteps() - before; n != 7 {
				t.Fatalf("%d argmax-only steps, want 7", n)
			}
			if want := greedy(t, p.inproc, toks, 8); !slices.Equal(got, want) {
				t.Fatalf("greedy over the worker %v, cold %v", got, want)
			}
			// Top-k 1 at a temperature is greedy too.
			before = px.ArgmaxSteps()
			p.generate("a", session.GenerateParams{MaxTokens: 3, Sampling: session.SamplingParams{Temperature: 0.7, TopK: 1}})
			if n := px.ArgmaxSteps() - before; n != 3 {
				t.Fatalf("top-k 1: %d argmax-only steps, want 3", n)
			}
			// Steps that read the logits get them.
			before = px.ArgmaxSteps()
			seed := uint64(3)
			for _, gp := range []session.GenerateParams{
				{MaxTokens: 3, Logprobs: true},
				{MaxTokens: 3, TopLogprobs: 2},
				{MaxTokens: 3, Sampling: session.SamplingParams{RepetitionPenalty: 1.3}},
				{MaxTokens: 3, Sampling: session.SamplingParams{LogitBias: map[int32]float32{4: 3}}},
				{MaxTokens: 3, Sampling: session.SamplingParams{Temperature: 0.8, Seed: &seed}},
			} {
				p.generate("a", gp)
			}
			if n := px.ArgmaxSteps() - before; n != 0 {
				t.Fatalf("%d argmax-only steps for generations that need logits or adjust them", n)
			}
			// A stateless completion: the prompt's prefill itself ends
			// with an argmax-only step.
			before = px.ArgmaxSteps()
			pr := prompt(21, 6)
			a, err := p.local.Complete(bg, 1, "qwen3", pr, session.GenerateParams{MaxTokens: 5}, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := p.remote.Complete(bg, 1, "qwen3", pr, session.GenerateParams{MaxTokens: 5}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.IDs, b.IDs) || a.Usage != b.Usage {
				t.Fatalf("complete: in process %v %+v, worker %v %+v", a.IDs, a.Usage, b.IDs, b.Usage)
			}
			if n := px.ArgmaxSteps() - before; n != 5 {
				t.Fatalf("complete: %d argmax-only steps, want 5", n)
			}
		})
	}
}

// TestMalformedTokenReplies: a Token reply that does not decode, or names
// no token of the vocabulary, loses the worker; a good one is the id.
func TestMalformedTokenReplies(t *testing.T) {
	tokenPayload := func(v int) []byte {
		var e enc
		e.i32(v)
		return e.b
	}
	for name, raw := range map[string][]byte{
		"short":          rawFrame(msgToken, 1, []byte{1, 0}),
		"trailing bytes": rawFrame(msgToken, 1, append(tokenPayload(1), 0)),
		"negative":       rawFrame(msgToken, 1, tokenPayload(-1)),
		"past the vocab": rawFrame(msgToken, 1, tokenPayload(8)),
		"logits reply":   rawFrame(msgLogits, 1, logitsPayload(8)),
	} {
		t.Run(name, func(t *testing.T) {
			p, kp, peer := fakeProxy(t)
			go answer(peer, raw)
			_, err := p.ForwardArgmax(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1})
			if !errors.Is(err, ErrWorkerLost) || !errors.Is(err, session.ErrKVLost) {
				t.Fatalf("want a lost worker, got %v", err)
			}
			if p.ArgmaxSteps() != 0 {
				t.Fatal("a failed step counted")
			}
		})
	}
	p, kp, peer := fakeProxy(t)
	go answer(peer, rawFrame(msgToken, 1, tokenPayload(7)))
	if id, err := p.ForwardArgmax(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1}); err != nil || id != 7 || p.ArgmaxSteps() != 1 {
		t.Fatalf("good reply: %d %v (%d steps)", id, err, p.ArgmaxSteps())
	}
}

// TestLookaheadDropped: after each greedy generation the rank runs the
// step a continuing generation would ask for next (rank_ahead.go). Every
// way a session can go on instead — an append, another generation of
// another session, a fork before the end, a truncation, a sampled step —
// must give exactly the in-process tokens, in a worker and in a group.
func TestLookaheadDropped(t *testing.T) {
	for _, world := range worlds() {
		t.Run(fmt.Sprintf("tp%d", world), func(t *testing.T) {
			p := newPair(t, "qwen3", world, 0)
			p.open("a")
			p.open("b")
			p.append("a", prompt(29, 7)) // the guesses fall inside a block and at its end
			p.append("b", prompt(13, 8))
			seed := uint64(5)
			for i := range 3 {
				p.generate("a", session.GenerateParams{MaxTokens: 6 + i}) // its next step is guessed
				p.append("a", prompt(3, int32(9+i)))                      // a different step instead
				p.generate("a", session.GenerateParams{MaxTokens: 5})
				p.generate("b", session.GenerateParams{MaxTokens: 4}) // another session's step
				p.generate("a", session.GenerateParams{MaxTokens: 3})
				p.fork("a", fmt.Sprintf("f%d", i), 20+i) // a fork before the guessed position
				p.generate(fmt.Sprintf("f%d", i), session.GenerateParams{MaxTokens: 7})
				p.generate("a", session.GenerateParams{MaxTokens: 2})
				p.truncate("a", 31+i) // cut back below it
				p.generate("a", session.GenerateParams{MaxTokens: 3, Sampling: session.SamplingParams{Temperature: 0.9, Seed: &seed}})
				p.generate("a", session.GenerateParams{MaxTokens: 4})
			}
		})
	}
}
