package cpu

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// joinAll joins world ranks in goroutines (real Unix sockets in a temp
// directory) and returns them in rank order.
func joinAll(t *testing.T, world int, timeout time.Duration) []*Group {
	t.Helper()
	dir := t.TempDir()
	gs := make([]*Group, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[r], errs[r] = JoinGroup(New(1), dir, r, world, 5*time.Second, timeout)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// TestGroupAllReduce: every rank gets the rank-ordered sum, bit for bit,
// over several all-reduces of different sizes.
func TestGroupAllReduce(t *testing.T) {
	for _, world := range []int{2, 3, 4} {
		gs := joinAll(t, world, 5*time.Second)
		for step, n := range []int{1, 7, 4096, 100000} {
			want := make([]float32, n)
			out := make([][]float32, world)
			var wg sync.WaitGroup
			errs := make([]error, world)
			for r, g := range gs {
				part := make([]float32, n+3) // n of them are reduced
				for i := range part {
					part[i] = float32(i%97)*0.1 + float32(r)*1.37 + float32(step)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := &Buf{D: part}
					errs[r] = g.AllReduceSum(buf, n)
					out[r] = buf.D
				}()
			}
			wg.Wait()
			for r := range world {
				for i := range n {
					want[i] += float32(i%97)*0.1 + float32(r)*1.37 + float32(step)
				}
			}
			for r := range world {
				if errs[r] != nil {
					t.Fatalf("world %d rank %d: %v", world, r, errs[r])
				}
				for i := range n {
					if out[r][i] != want[i] {
						t.Fatalf("world %d n %d rank %d [%d]: %v, want %v", world, n, r, i, out[r][i], want[i])
					}
				}
				if out[r][n] != float32(n%97)*0.1+float32(r)*1.37+float32(step) {
					t.Fatalf("world %d rank %d: element past n was changed", world, r)
				}
			}
		}
	}
}

// TestGroupTimeout: a rank that never joins an all-reduce makes the
// others fail by the deadline with ErrGroupBroken, and the group stays
// broken.
func TestGroupTimeout(t *testing.T) {
	for _, absent := range []int{0, 1} {
		gs := joinAll(t, 3, 200*time.Millisecond)
		var wg sync.WaitGroup
		errs := make([]error, 3)
		start := time.Now()
		for r, g := range gs {
			if r == absent {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = g.AllReduceSum(&Buf{D: make([]float32, 8)}, 8)
			}()
		}
		wg.Wait()
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("absent rank %d: took %v", absent, d)
		}
		for r, err := range errs {
			if r != absent && !errors.Is(err, ErrGroupBroken) {
				t.Fatalf("absent rank %d: rank %d got %v, want ErrGroupBroken", absent, r, err)
			}
		}
		// The absent rank finds the group broken too (its peers closed
		// their sockets), well before its own deadline would pass.
		if err := gs[absent].AllReduceSum(&Buf{D: make([]float32, 8)}, 8); !errors.Is(err, ErrGroupBroken) {
			t.Fatalf("absent rank %d afterwards: %v", absent, err)
		}
	}
}

// TestGroupDisagree: ranks that call all-reduces of different sizes
// break the group rather than mixing data.
func TestGroupDisagree(t *testing.T) {
	gs := joinAll(t, 2, 2*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = g.AllReduceSum(&Buf{D: make([]float32, 16)}, 8+r)
		}()
	}
	wg.Wait()
	if !errors.Is(errs[0], ErrGroupBroken) || !errors.Is(errs[1], ErrGroupBroken) {
		t.Fatalf("disagreeing sizes: %v / %v", errs[0], errs[1])
	}
}

// TestGroupJoinTimeout: a group whose other ranks never come fails to
// join by the deadline.
func TestGroupJoinTimeout(t *testing.T) {
	if _, err := JoinGroup(New(1), t.TempDir(), 0, 2, 100*time.Millisecond, time.Second); err == nil {
		t.Fatal("rank 0 joined alone")
	}
	if _, err := JoinGroup(New(1), t.TempDir(), 1, 2, 100*time.Millisecond, time.Second); err == nil {
		t.Fatal("rank 1 joined without rank 0")
	}
}
