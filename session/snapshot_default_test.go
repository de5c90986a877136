package session

import (
	"testing"

	"github.com/pocketllm/pocketllm/cache"
)

// TestDefaultSnapshotBytes: two 4K contexts' dense snapshots under the
// default intervals, never below 1 GiB or above 8 GiB.
func TestDefaultSnapshotBytes(t *testing.T) {
	iv := cache.DefaultIntervals.Aligned(16)
	const gib = int64(1) << 30
	for _, c := range []struct {
		state, want int64
	}{
		{0, gib},                      // a state that does not say its size
		{1 << 20, gib},                // a fixture's: the floor
		{151 << 20, 32 * (151 << 20)}, // Qwen3.5-27B's, 4.7 GiB
		{1 << 30, 8 * gib},            // the ceiling
		{1 << 62, 8 * gib},            // no overflow
	} {
		if got := defaultSnapshotBytes(c.state, iv); got != c.want {
			t.Errorf("state %d: %d, want %d", c.state, got, c.want)
		}
	}
	if got := defaultSnapshotBytes(100<<20, cache.Intervals{}); got != gib {
		t.Errorf("no intervals: %d, want the floor", got)
	}
}
