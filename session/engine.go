package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pocketllm/pocketllm/cache"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// stepBudget bounds the tokens one scheduler step prefills, so that a
// long prompt is interleaved with other sessions' decode steps.
const stepBudget = 256

// engine is one model's runtime: its KV pool, its sequences' KV state and
// the scheduler goroutine that runs forward passes one at a time.
//
// Lock order: session.lock → engine.kvMu → cache.Pool's lock. Manager.mu
// and engine.qmu are leaves (nothing is taken while holding them).
type engine struct {
	name      string
	model     Runner
	tok       *tokenizer.Tokenizer
	eos       map[int32]bool
	pool      *cache.Pool
	bs        int
	ctxLen    int
	recurrent bool // Model.NewState() != nil: no KV shortcuts without snapshots
	limit     int

	// kvMu guards every seqState's fields and is held by the scheduler
	// while a job runs; control operations (fork, truncate, close) take it
	// directly.
	kvMu sync.Mutex
	seqs map[*seqState]struct{}
	tick int64

	qmu      sync.Mutex
	cond     *sync.Cond
	queue    []*job
	admitted int
	stopped  bool
	done     chan struct{}

	steps atomic.Int64
}

// seqState is the KV of one sequence (a session, or an ephemeral
// sequence of a stateless request). Its KV covers tokens [0, kvLen) of the
// sequence's token history; everything can be rebuilt from those tokens.
type seqState struct {
	owner  Owner
	seed   cache.Key
	table  []int32     // blocks; len == ceil(kvLen/bs) between steps
	keys   []cache.Key // chain keys of the kvLen/bs full blocks
	kvLen  int
	state  any       // recurrent state (nil for attention-only models)
	logits []float32 // logits at position kvLen-1, when known
	active int       // requests using the sequence now
	last   int64     // engine.tick of the last use (eviction order)
}

type job struct {
	ctx  context.Context
	fn   func() error
	done chan struct{}
	err  error
}

func newEngine(cfg ModelConfig, pool *cache.Pool, eos map[int32]bool) *engine {
	e := &engine{
		name: cfg.Name, model: cfg.Model, tok: cfg.Tokenizer, eos: eos, pool: pool,
		bs: cfg.BlockSize, ctxLen: cfg.Model.ModelConfig().MaxPositions, limit: cfg.QueueLimit,
		recurrent: cfg.Model.NewState() != nil,
		seqs:      map[*seqState]struct{}{},
		done:      make(chan struct{}),
	}
	if e.ctxLen <= 0 {
		e.ctxLen = 1 << 20
	}
	e.cond = sync.NewCond(&e.qmu)
	go e.run()
	return e
}

// run is the scheduler: one job (one forward step) at a time, in arrival
// order. Every request keeps at most one job queued and queues its next
// step only after the previous one finished, so FIFO order is round-robin
// across requests at token granularity.
func (e *engine) run() {
	defer close(e.done)
	for {
		e.qmu.Lock()
		for len(e.queue) == 0 && !e.stopped {
			e.cond.Wait()
		}
		if len(e.queue) == 0 {
			e.qmu.Unlock()
			return
		}
		j := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.qmu.Unlock()
		if err := j.ctx.Err(); err != nil {
			j.err = err
		} else {
			e.kvMu.Lock()
			j.err = j.fn()
			e.kvMu.Unlock()
			e.steps.Add(1)
		}
		close(j.done)
	}
}

// admit counts a request against the queue bound.
func (e *engine) admit() error {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	if e.stopped {
		return fmt.Errorf("model %s: %w", e.name, ErrClosed)
	}
	if e.admitted >= e.limit {
		return fmt.Errorf("model %s: %d requests in flight: %w", e.name, e.admitted, ErrQueueFull)
	}
	e.admitted++
	return nil
}

func (e *engine) leave() {
	e.qmu.Lock()
	e.admitted--
	e.qmu.Unlock()
}

// submit runs fn on the scheduler goroutine (with kvMu held) and waits for
// it. A job still queued when ctx ends is withdrawn at once; a running one
// is waited for (it is one step).
func (e *engine) submit(ctx context.Context, fn func() error) error {
	j := &job{ctx: ctx, fn: fn, done: make(chan struct{})}
	e.qmu.Lock()
	if e.stopped {
		e.qmu.Unlock()
		return fmt.Errorf("model %s: %w", e.name, ErrClosed)
	}
	e.queue = append(e.queue, j)
	e.cond.Signal()
	e.qmu.Unlock()
	select {
	case <-j.done:
		return j.err
	case <-ctx.Done():
	}
	e.qmu.Lock()
	for i, q := range e.queue {
		if q == j {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			e.qmu.Unlock()
			return ctx.Err()
		}
	}
	e.qmu.Unlock()
	<-j.done
	return j.err
}

func (e *engine) stop() {
	e.qmu.Lock()
	e.stopped = true
	e.cond.Broadcast()
	e.qmu.Unlock()
	<-e.done
}

func (e *engine) queueDepth() (queued, admitted int) {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	return len(e.queue), e.admitted
}

// newSeq registers a sequence with no KV (kvMu held).
func (e *engine) newSeq(owner Owner) *seqState {
	sq := &seqState{owner: owner, seed: cache.Seed(e.name, owner)}
	e.seqs[sq] = struct{}{}
	return sq
}

// dropSeq releases a sequence's KV and forgets it (kvMu held).
func (e *engine) dropSeq(sq *seqState) {
	e.dropKV(sq)
	delete(e.seqs, sq)
}

// dropKV releases all of a sequence's KV; it is rebuilt from the tokens
// on its next use. Its full blocks stay in the prefix index as cached
// blocks, so the rebuild is usually a lookup (kvMu held).
func (e *engine) dropKV(sq *seqState) {
	e.pool.ReleaseAll(sq.table)
	sq.table, sq.keys, sq.kvLen, sq.state, sq.logits = nil, nil, 0, nil, nil
}

// truncateKV keeps the KV of positions [0, n) and releases blocks past
// them (kvMu held). Recurrent state cannot be rewound, so such a sequence
// starts over.
func (e *engine) truncateKV(sq *seqState, n int) {
	if n > sq.kvLen {
		return
	}
	if e.recurrent && n < sq.kvLen {
		e.dropKV(sq)
		return
	}
	if nb := (n + e.bs - 1) / e.bs; nb < len(sq.table) {
		e.pool.ReleaseAll(sq.table[nb:])
		sq.table = sq.table[:nb]
	}
	sq.keys = sq.keys[:min(len(sq.keys), n/e.bs)]
	if n < sq.kvLen {
		sq.kvLen, sq.logits = n, nil
	}
}

// fork makes a sequence that shares src's KV of positions [0, at):
// whole blocks by reference, the partial last one copy-on-write (kvMu
// held). For recurrent models the state is known only at the end of the
// KV, so a fork there clones it and a fork anywhere else recomputes.
func (e *engine) fork(src *seqState, at int) *seqState {
	sq := e.newSeq(src.owner)
	if e.recurrent {
		// The state is only known at kvLen: share the KV and clone it there.
		st, ok := src.state.(models.RecurrentState)
		if !ok || at != src.kvLen || src.kvLen == 0 {
			return sq
		}
		sq.state = st.Clone()
	}
	n := min(src.kvLen, at)
	nb := (n + e.bs - 1) / e.bs
	for _, b := range src.table[:nb] {
		e.pool.Ref(b)
	}
	sq.table = append([]int32(nil), src.table[:nb]...)
	sq.keys = append([]cache.Key(nil), src.keys[:min(len(src.keys), n/e.bs)]...)
	sq.kvLen = n
	if n == src.kvLen {
		sq.logits = src.logits // read-only
	}
	return sq
}

// alloc takes a block for cur, freeing room when the pool is full: the
// pool first evicts unreferenced cached blocks (to the host tier); then
// the KV of other sequences is dropped, idle ones before busy ones, least
// recently used first. A sequence that does not fit in the pool on its own
// fails with ErrContextLength (kvMu held).
func (e *engine) alloc(cur *seqState) (int32, error) {
	for {
		b, err := e.pool.Alloc()
		if err == nil {
			return b, nil
		}
		var victim *seqState
		for sq := range e.seqs {
			if sq == cur || len(sq.table) == 0 {
				continue
			}
			if victim == nil || (sq.active == 0) != (victim.active == 0) && sq.active == 0 ||
				(sq.active == 0) == (victim.active == 0) && sq.last < victim.last {
				victim = sq
			}
		}
		if victim == nil {
			return -1, fmt.Errorf("%w: the KV pool (%d blocks of %d tokens) cannot hold the sequence",
				ErrContextLength, e.pool.Spec().Blocks, e.bs)
		}
		e.dropKV(victim)
	}
}

// progress is what one ensure step did.
type progress struct {
	reused, computed int
	logits           []float32 // at the last token, once done
	done             bool
}

// ensure advances sq's KV toward covering all of toks, and returns the
// logits at the last token once it does: first from the prefix index
// (whole blocks, never the last token, whose logits are needed), then by
// prefilling at most budget tokens (kvMu held).
func (e *engine) ensure(sq *seqState, toks []int32, budget int) (progress, error) {
	pr, err := e.ensureOnce(sq, toks, budget)
	if errors.Is(err, ErrKVLost) { // all KV was dropped: recompute from the tokens
		pr, err = e.ensureOnce(sq, toks, budget)
	}
	return pr, err
}

func (e *engine) ensureOnce(sq *seqState, toks []int32, budget int) (progress, error) {
	var pr progress
	n := len(toks)
	e.tick++
	sq.last = e.tick
	e.truncateKV(sq, min(sq.kvLen, n)) // also trims blocks past the KV
	if sq.kvLen == n && sq.logits != nil {
		pr.logits, pr.done = sq.logits, true
		return pr, nil
	}
	if sq.kvLen == n { // KV without logits: run the last token again
		e.truncateKV(sq, n-1)
	}
	if !e.recurrent {
		for sq.kvLen%e.bs == 0 && sq.kvLen+e.bs <= n-1 {
			bi := sq.kvLen / e.bs
			k := e.prevKey(sq, bi).Next(toks[bi*e.bs : (bi+1)*e.bs])
			b, ok := e.pool.Lookup(k)
			if !ok {
				break
			}
			sq.table = append(sq.table, b)
			sq.keys = append(sq.keys, k)
			sq.kvLen += e.bs
			pr.reused += e.bs
		}
	}
	end := min(n, sq.kvLen+max(budget, 1))
	want := models.NoLogits
	if end == n {
		want = models.LastLogits
	}
	start := sq.kvLen
	logits, err := e.forward(sq, toks, end, want)
	if err != nil {
		return pr, err
	}
	pr.computed = end - start
	if end == n {
		sq.logits = logits
		pr.logits, pr.done = logits, true
	}
	return pr, nil
}

func (e *engine) prevKey(sq *seqState, bi int) cache.Key {
	if bi == 0 {
		return sq.seed
	}
	return sq.keys[bi-1]
}

// forward computes the KV of toks[sq.kvLen:end] (kvMu held): it makes the
// partial last block writable, allocates the blocks the new positions
// need, runs the model and registers the blocks it completed in the prefix
// index.
func (e *engine) forward(sq *seqState, toks []int32, end int, want models.Logits) ([]float32, error) {
	start := sq.kvLen
	if start >= end {
		return nil, fmt.Errorf("forward: nothing to compute")
	}
	if end > e.ctxLen {
		return nil, fmt.Errorf("%w: %d tokens, model allows %d", ErrContextLength, end, e.ctxLen)
	}
	if start%e.bs != 0 {
		last := len(sq.table) - 1
		b, err := e.pool.Writable(sq.table[last], func() (int32, error) { return e.alloc(sq) })
		if err != nil {
			return nil, err
		}
		sq.table[last] = b
	}
	for len(sq.table)*e.bs < end {
		b, err := e.alloc(sq)
		if err != nil {
			e.truncateKV(sq, start) // release the blocks taken so far
			return nil, err
		}
		sq.table = append(sq.table, b)
	}
	if start == 0 && e.recurrent {
		sq.state = e.model.NewState()
	}
	seq := models.Seq{Pool: e.pool.KV(), Table: sq.table, Start: start, State: sq.state}
	logits, err := e.model.Forward(seq, toks[start:end], want)
	if err != nil {
		if errors.Is(err, ErrKVLost) {
			e.invalidateAll()
		} else if e.recurrent {
			e.dropKV(sq) // the state may be half advanced
		} else {
			e.truncateKV(sq, start) // release blocks allocated for nothing
		}
		return nil, fmt.Errorf("model %s: %w", e.name, err)
	}
	sq.kvLen = end
	if !e.recurrent {
		for bi := len(sq.keys); bi < end/e.bs; bi++ {
			k := e.prevKey(sq, bi).Next(toks[bi*e.bs : (bi+1)*e.bs])
			sq.keys = append(sq.keys, k)
			e.pool.Register(sq.table[bi], k)
		}
	}
	return logits, nil
}

// invalidateAll forgets every sequence's KV and the pool's cached blocks
// after the runner lost its KV memory (kvMu held); each sequence is
// recomputed from its tokens on its next use.
func (e *engine) invalidateAll() {
	for sq := range e.seqs {
		e.dropKV(sq)
	}
	e.pool.Invalidate()
}
