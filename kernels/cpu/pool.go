package cpu

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long an idle helper keeps polling for the next job before
// it parks. A decode step is a few hundred short GEMVs back to back; waking
// a parked goroutine costs tens of microseconds each time, which on a small
// model is a large share of the step, so helpers stay hot between ops.
const spinFor = 200 * time.Microsecond

// pool runs a job's chunks on the caller plus helpers-1 resident helper
// goroutines. One job runs at a time (run serialises callers).
type pool struct {
	helpers int
	run     sync.Mutex // one job at a time

	gen     atomic.Uint64 // bumped to publish a job
	pending atomic.Int32  // helpers still working on the current job
	stop    atomic.Bool   // set (with a gen bump) by close: helpers return
	parts   int
	n       int
	chunk   int
	fn      func(lo, hi int)
	// fault is the first panic of the job's parts, raised on the caller
	// once every part has finished (runPart).
	fault atomic.Pointer[partPanic]

	mu   sync.Mutex // guards parking
	cond *sync.Cond
}

func newPool(threads int) *pool {
	p := &pool{helpers: threads - 1}
	p.cond = sync.NewCond(&p.mu)
	for i := 1; i <= p.helpers; i++ {
		go p.helper(i)
	}
	return p
}

// helper is resident until close: a backend is made once per loaded model
// and closed when the model is.
func (p *pool) helper(part int) {
	var seen uint64
	for {
		deadline := time.Now().Add(spinFor)
		for spins := 0; p.gen.Load() == seen; spins++ {
			if spins&1023 == 1023 {
				if time.Now().After(deadline) {
					p.mu.Lock()
					for p.gen.Load() == seen {
						p.cond.Wait()
					}
					p.mu.Unlock()
					break
				}
				runtime.Gosched()
			}
		}
		seen = p.gen.Load()
		if p.stop.Load() {
			return
		}
		if part < p.parts {
			lo := part * p.chunk
			if lo < p.n {
				p.runPart(p.fn, lo, min(lo+p.chunk, p.n))
			}
		}
		p.pending.Add(-1)
	}
}

// close ends the helpers once the job in flight, if any, is done. Jobs
// after it run on the caller alone.
func (p *pool) close() {
	p.run.Lock()
	defer p.run.Unlock()
	p.mu.Lock()
	p.stop.Store(true)
	p.gen.Add(1)
	p.cond.Broadcast()
	p.mu.Unlock()
}

// do runs fn over [0,n) in parts contiguous chunks (parts ≤ helpers+1).
func (p *pool) do(n, parts int, fn func(lo, hi int)) {
	p.run.Lock()
	defer p.run.Unlock()
	if p.stop.Load() {
		fn(0, n)
		return
	}
	p.n, p.parts, p.fn = n, parts, fn
	p.chunk = (n + parts - 1) / parts
	p.pending.Store(int32(p.helpers))
	p.mu.Lock()
	p.gen.Add(1)
	p.cond.Broadcast()
	p.mu.Unlock()
	p.runPart(fn, 0, min(p.chunk, n))
	for spins := 0; p.pending.Load() != 0; spins++ {
		if spins&255 == 255 {
			runtime.Gosched()
		}
	}
	p.fn = nil
	if f := p.fault.Swap(nil); f != nil {
		panic(fmt.Sprintf("cpu backend: a kernel panicked: %v\n%s", f.value, f.stack))
	}
}

// partPanic is a part's panic and the stack it was raised on.
type partPanic struct {
	value any
	stack []byte
}

// runPart runs fn over [lo, hi), a panic in it recorded rather than
// raised: a helper's panic would end the process (no caller's recover
// reaches its goroutine), and the caller's own must not leave do while
// helpers still run its job. do raises the first one on the caller once
// every part is done, where the session engine's recover turns it into
// the request's error.
func (p *pool) runPart(fn func(lo, hi int), lo, hi int) {
	defer func() {
		if v := recover(); v != nil {
			p.fault.CompareAndSwap(nil, &partPanic{v, debug.Stack()})
		}
	}()
	fn(lo, hi)
}
