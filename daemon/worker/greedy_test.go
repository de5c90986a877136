package worker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/session"
)

// TestGreedyArgmaxOverWorker: greedy steps over a worker (and a group)
// take the argmax-only path (ForwardArgmax, counted), and give exactly
// the tokens of the in-process model's full logits and of a cold greedy
// decode; steps that need the logits (logprobs, penalties, sampling)
// still get them.
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
				{MaxTokens: 3, Sampling: session.SamplingParams{PresencePenalty: 0.5}},
				{MaxTokens: 3, Sampling: session.SamplingParams{Temperature: 0.8, Seed: &seed}},
			} {
				p.generate("a", gp)
			}
			if n := px.ArgmaxSteps() - before; n != 0 {
				t.Fatalf("%d argmax-only steps for generations that need logits", n)
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
