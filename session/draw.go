package session

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pocketllm/pocketllm/models"
)

// Draw is one sampled step as a runner can take it itself
// (SamplingRunner): the generation's temperature and filters, and the
// uniform variates its sampler draws for this step (U) and the next
// (Next, so that a runner may run the next step ahead and draw its token
// too). Generations with a JSON constraint or logprobs do not step this
// way; penalties and logit bias come along as Adjust. What is left is a
// function of the logits, Adjust and U, which Drawer computes exactly as
// the session would.
type Draw struct {
	Temperature float64
	TopK        int
	TopP, MinP  float64
	U, Next     float64
	// Adjust is the step's penalties and bias (nil: none). It changes
	// with every token drawn, so Next serves no step run ahead of time
	// when it is set.
	Adjust *Adjust
}

// Check reports a Draw no session would make (a runner's request
// decoder calls it on what arrives from the wire).
func (d Draw) Check() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(d.Temperature) || d.Temperature <= 0 || !finite(float64(float32(1/d.Temperature))):
		// (1/T must be a float32: the logits are scaled by it.)
		return fmt.Errorf("draw: temperature %v", d.Temperature)
	case d.TopK < 0:
		return fmt.Errorf("draw: top-k %d", d.TopK)
	case !finite(d.TopP) || d.TopP < 0 || d.TopP > 1:
		return fmt.Errorf("draw: top-p %v", d.TopP)
	case !finite(d.MinP) || d.MinP < 0 || d.MinP > 1:
		return fmt.Errorf("draw: min-p %v", d.MinP)
	case !(d.U >= 0 && d.U < 1) || !(d.Next >= 0 && d.Next < 1):
		return fmt.Errorf("draw: uniform variates %v, %v outside [0, 1)", d.U, d.Next)
	case d.Adjust != nil:
		return d.Adjust.Check()
	}
	return nil
}

// SameRule reports whether d and e draw alike given the same variate:
// the same temperature and filters, and the same Adjust (the one
// pointer, or none).
func (d Draw) SameRule(e Draw) bool {
	d.U, d.Next, e.U, e.Next = 0, 0, 0, 0
	return d == e
}

func (d Draw) params() SamplingParams {
	return SamplingParams{Temperature: d.Temperature, TopK: d.TopK, TopP: d.TopP, MinP: d.MinP}
}

// Drawer picks Draws' tokens from logits, with the sampler's rule and
// scratch (a runner keeps one; not safe for concurrent use).
type Drawer struct {
	s   sampler
	adj []float32 // scratch: logits after d.Adjust
}

// Token is d's token from logits: the sampler's draw with U, after
// d.Adjust (logits are left as they are).
func (dr *Drawer) Token(logits []float32, d Draw) int32 {
	dr.s.p = d.params()
	logits = dr.adjusted(logits, d)
	if dr.s.p.greedy() { // top-k 1
		return dr.s.argmax(logits)
	}
	return dr.s.draw(logits, d.U)
}

// Kept is the tokens d's filters keep from logits (after d.Adjust),
// ascending, and their probabilities (for checking another
// implementation of the rule, such as the CUDA backend's).
func (dr *Drawer) Kept(logits []float32, d Draw) ([]int32, []float64) {
	dr.s.p = d.params()
	return dr.s.distribution(dr.adjusted(logits, d))
}

func (dr *Drawer) adjusted(logits []float32, d Draw) []float32 {
	if d.Adjust == nil {
		return logits
	}
	dr.adj = append(dr.adj[:0], logits...)
	d.Adjust.Apply(dr.adj)
	return dr.adj
}

// SamplingRunner is a Runner that can draw the last token's successor
// itself, so that a worker process ships a token per step instead of the
// vocabulary's logits (and may run the next step ahead, as for
// GreedyRunner).
type SamplingRunner interface {
	Runner
	// ForwardSample is Forward(seq, tokens, models.LastLogits) followed
	// by a Drawer's Token of the logits.
	ForwardSample(seq models.Seq, tokens []int32, d Draw) (int32, error)
}

// peekDraw is the Draw of s's next sampled token, without drawing it
// (the step may fail and be asked again).
// A greedy generation's Draw is top-k 1 at temperature 1 with its Adjust
// (Drawer.Token's argmax after the penalties and bias): no variate.
func (s *sampler) peekDraw() Draw {
	if s.p.greedy() {
		return Draw{Temperature: 1, TopK: 1, Adjust: s.adjust()}
	}
	src := *s.src
	r := rand.New(&src)
	u := r.Float64()
	return Draw{Temperature: s.p.Temperature, TopK: s.p.TopK, TopP: s.p.TopP, MinP: s.p.MinP, U: u, Next: r.Float64(),
		Adjust: s.adjust()}
}

// sampledSteps is a SamplingRunner seen as a GreedyRunner, so that the
// engine's argmax path (ensure, forwardArgmax) carries sampled steps:
// its "argmax" is the token drawn with smp's next draw, which the
// generation then consumes (drawTaken).
type sampledSteps struct {
	SamplingRunner
	smp *sampler
}

func (a sampledSteps) ForwardArgmax(seq models.Seq, tokens []int32) (int32, error) {
	return a.ForwardSample(seq, tokens, a.smp.peekDraw())
}

// drawTaken advances s past the draw a runner took for it (peekDraw's U;
// a greedy draw took none, as sample's argmax takes none).
func (s *sampler) drawTaken() {
	if !s.p.greedy() {
		s.rng.Float64()
	}
}
