package session

import (
	"math"
	"testing"
)

// The prefill step budget grows with the measured throughput only while
// no other step waits.
func TestStepTokens(t *testing.T) {
	e := &engine{idleStep: idleStepTime}
	if got := e.stepTokens(); got != stepBudget {
		t.Fatalf("no measurement yet: %d, want %d", got, stepBudget)
	}
	for _, c := range []struct {
		rate float64
		want int
	}{{1000, stepBudget}, {10000, 1792}, {1e7, maxStepBudget}} {
		e.prefillRate.Store(math.Float64bits(c.rate))
		if got := e.stepTokens(); got != c.want {
			t.Errorf("idle at %.0f tok/s: %d, want %d", c.rate, got, c.want)
		}
	}
	// A shorter idle step (limits.prefill_step_ms) takes less at once.
	e.prefillRate.Store(math.Float64bits(40000))
	e.idleStep = idleStepTime / 4
	if got := e.stepTokens(); got != 1792 {
		t.Errorf("idle at 10000 tok/s, steps of %v: %d, want 1792", e.idleStep, got)
	}
	e.queue = append(e.queue, &job{})
	if got := e.stepTokens(); got != stepBudget {
		t.Errorf("a step waiting: %d, want %d", got, stepBudget)
	}
}
