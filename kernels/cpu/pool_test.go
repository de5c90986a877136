package cpu

import (
	"strings"
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

// TestPoolPanics: a kernel that panics in a helper's part (or the
// caller's) raises the panic on the caller, once every part has finished,
// where a recover can take it; the pool then runs the next job whole.
func TestPoolPanics(t *testing.T) {
	b := New(4)
	defer b.Close()
	for _, bad := range []int{0, 999} { // the caller's part, the last helper's
		var done atomic.Int64
		caught := func() (p any) {
			defer func() { p = recover() }()
			b.parallel(1000, 1, func(lo, hi int) {
				defer done.Add(int64(hi - lo))
				if lo <= bad && bad < hi {
					panic("a kernel bug")
				}
			})
			return nil
		}()
		if s, ok := caught.(string); !ok || !strings.Contains(s, "a kernel bug") {
			t.Fatalf("part %d: recovered %v", bad, caught)
		}
		if done.Load() != 1000 {
			t.Fatalf("part %d: the job left with %d of 1000 done", bad, done.Load())
		}
		var sum atomic.Int64
		b.parallel(1000, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				sum.Add(int64(i))
			}
		})
		if got, want := sum.Load(), int64(999*1000/2); got != want {
			t.Fatalf("after a panic: sum %d, want %d", got, want)
		}
	}
}
