package cpu

import (
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// TestPoolClose: a closed pool's helpers are gone (goleak names any left),
// and jobs after Close still cover their whole range, on the caller.
func TestPoolClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	b := New(4)
	var sum atomic.Int64
	job := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sum.Add(int64(i))
		}
	}
	for range 100 {
		b.parallel(1000, 1, job)
	}
	if got, want := sum.Load(), int64(100*999*1000/2); got != want {
		t.Fatalf("sum %d, want %d", got, want)
	}
	b.Close()
	goleak.VerifyNone(t, ignore)
	sum.Store(0)
	b.parallel(1000, 1, job)
	if got, want := sum.Load(), int64(999*1000/2); got != want {
		t.Fatalf("after Close: sum %d, want %d", got, want)
	}
	b.Close() // twice is harmless
}
