package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pocketllm/pocketllm/cache"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// stepBudget bounds the tokens one scheduler step prefills while other
// steps wait, so that a long prompt is interleaved with other sessions'
// decode steps. With nothing waiting a step may take up to idleStepTime
// of prefill (at the throughput the engine has measured; the model's
// limits.prefill_step_ms), up to maxStepBudget tokens: on a GPU a 256-token
// step leaves most of the device's throughput unused (an 8K cold prompt
// took 521 ms in 256-token steps on an H200, where one 8K pass takes
// 308 ms), and a request that arrives meanwhile waits for at most one such
// step. 200 ms, not the 50 of before: a 4096-token Qwen3.5-27B prompt
// (~9400 tok/s in long passes, ~6800 in 256-token ones) reached its first
// token in 691 ms at 50, 510–581 at 200 and 488–522 at 500 or more (one
// H200, snapshots inside the passes; docs/benchmarks.md).
const (
	stepBudget    = 256
	maxStepBudget = 4096
	idleStepTime  = 200 * time.Millisecond
)

// idleSpillBlocks is how many blocks an idle scheduler copies to the host
// tier before it looks at its queue again (see cache.Pool.Prespill).
const idleSpillBlocks = 4

// stepTokens is the prefill budget of the step now running (called by
// the scheduler's job, so queue holds the steps waiting behind it).
func (e *engine) stepTokens() int {
	e.qmu.Lock()
	waiting := len(e.queue)
	e.qmu.Unlock()
	rate := math.Float64frombits(e.prefillRate.Load())
	if waiting > 0 || rate <= 0 {
		return stepBudget
	}
	n := int(rate * e.idleStep.Seconds())
	return min(max(n/stepBudget*stepBudget, stepBudget), maxStepBudget)
}

// engine is one model's runtime: its KV pool, its sequences' KV state and
// the scheduler goroutine that runs forward passes one at a time.
//
// Lock order: session.lock → engine.kvMu → cache.Pool's lock. Manager.mu
// and engine.qmu are leaves (nothing is taken while holding them).
type engine struct {
	name      string
	log       *slog.Logger
	model     Runner
	tok       *tokenizer.Tokenizer
	eos       map[int32]bool
	pool      *cache.Pool
	bs        int
	ctxLen    int
	recurrent bool            // Model.NewState() != nil: KV shortcuts only through snapshots
	snapEvery cache.Intervals // where hybrid sequences' state is snapshotted
	hold      bool            // snapshots held by the runner where it can (ModelConfig.HostSnapshots off)
	// marking: snapshots are taken inside a pass (models.MarkingState)
	// rather than at the ends of passes split on the snapshot positions
	// (held by the runner, or read to the daemon after the pass with
	// hold off); cleared for good when the runner cannot mark at all.
	marking  bool
	limit    int
	idleStep time.Duration // stepTokens' step time with nothing waiting
	pooling  Pooling       // Embed's default

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
	// Device time of forward passes as the engine sees it (model call to
	// return), split into decode steps (one token) and prefill chunks:
	// /metrics shows where a request's time goes.
	decodeNs, prefillNs atomic.Int64
	// spillDue (qmu) asks the idle scheduler to look for cached blocks to
	// copy to the host tier ahead of their eviction (set when a request
	// leaves, cleared when a look finds nothing).
	spillDue bool
	spillGen uint64
	// prefillRate is the measured prefill throughput (tokens/s, a float64's
	// bits): a moving average over passes of 64 tokens or more.
	prefillRate atomic.Uint64
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
	state  any       // recurrent state at kvLen (nil for attention-only models)
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

func newEngine(cfg ModelConfig, pool *cache.Pool, eos map[int32]bool, log *slog.Logger) *engine {
	st := cfg.Model.NewState()
	e := &engine{
		name: cfg.Name, model: cfg.Model, tok: cfg.Tokenizer, eos: eos, pool: pool, log: log,
		bs: cfg.BlockSize, ctxLen: cfg.Model.ModelConfig().MaxPositions, limit: cfg.QueueLimit,
		recurrent: st != nil,
		seqs:      map[*seqState]struct{}{},
		done:      make(chan struct{}),
	}
	if e.recurrent && pool.SnapshotStats().Limit > 0 {
		e.snapEvery = cfg.SnapshotIntervals.Aligned(e.bs)
		e.hold = !cfg.HostSnapshots
		_, e.marking = st.(models.MarkingState)
	}
	freeState(st)
	if e.ctxLen <= 0 {
		e.ctxLen = 1 << 20
	}
	e.idleStep = cfg.IdleStepTime
	e.pooling = cfg.Pooling
	if e.idleStep <= 0 {
		e.idleStep = idleStepTime
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
			if e.spillDue {
				// Idle: copy cached blocks that the next allocations would
				// evict to the host tier now, a few at a time, so that a
				// step arriving meanwhile waits for at most a few copies.
				gen := e.spillGen
				e.qmu.Unlock()
				e.kvMu.Lock()
				more := e.pool.Prespill(idleSpillBlocks) > 0
				e.kvMu.Unlock()
				e.qmu.Lock()
				if !more && e.spillGen == gen { // nobody left meanwhile
					e.spillDue = false
				}
				continue
			}
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
	// The request may have released blocks into the cache (a stateless
	// request's sequence is dropped before it leaves): idle time may have
	// host-tier copies to make.
	e.spillDue = true
	e.spillGen++
	e.cond.Signal()
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
	freeState(sq.state)
	sq.table, sq.keys, sq.kvLen, sq.state, sq.logits = nil, nil, 0, nil, nil
}

// truncateKV keeps the KV of positions [0, n) and releases blocks past
// them (kvMu held). Recurrent state cannot be rewound: such a sequence
// goes back to the latest snapshot at or before n (and its KV with it),
// or starts over when there is none.
func (e *engine) truncateKV(sq *seqState, n int) {
	if n > sq.kvLen {
		return
	}
	var logits []float32
	if e.recurrent && n < sq.kvLen {
		st, _ := sq.state.(models.RecurrentState)
		q, snap := e.snapshotBefore(sq, n)
		if st == nil || snap == nil || restoreSnapshot(st, snap, q) != nil {
			e.dropKV(sq)
			return
		}
		n, logits = q, snap.Logits
	}
	if nb := (n + e.bs - 1) / e.bs; nb < len(sq.table) {
		e.pool.ReleaseAll(sq.table[nb:])
		sq.table = sq.table[:nb]
	}
	sq.keys = sq.keys[:min(len(sq.keys), n/e.bs)]
	if n < sq.kvLen {
		sq.kvLen, sq.logits = n, logits
	}
}

// snapshotBefore finds the latest snapshot of sq's state at a block
// boundary q ≤ n within its KV (kvMu held).
func (e *engine) snapshotBefore(sq *seqState, n int) (int, *cache.Snapshot) {
	if !e.snapEvery.Enabled() {
		return 0, nil
	}
	for bi := min(n/e.bs, len(sq.keys)); bi > 0; bi-- {
		if snap, ok := e.pool.Snapshot(sq.keys[bi-1]); ok && snap.Pos == bi*e.bs {
			return snap.Pos, snap
		}
	}
	return 0, nil
}

// fork makes a sequence that shares src's KV of positions [0, at):
// whole blocks by reference, the partial last one copy-on-write (kvMu
// held). For recurrent models the live state is known only at the end of
// the KV: a fork there (or past it) clones it; a fork inside starts from
// the latest snapshot at or before at, and recomputes when there is none.
func (e *engine) fork(src *seqState, at int) *seqState {
	sq := e.newSeq(src.owner)
	var logits []float32
	if e.recurrent {
		st, ok := src.state.(models.RecurrentState)
		if !ok || src.kvLen == 0 {
			return sq
		}
		if at >= src.kvLen {
			sq.state = st.Clone()
		} else {
			q, snap := e.snapshotBefore(src, at)
			fresh, _ := e.model.NewState().(models.RecurrentState)
			if snap == nil || fresh == nil || restoreSnapshot(fresh, snap, q) != nil {
				freeState(fresh)
				return sq
			}
			sq.state, at, logits = fresh, q, snap.Logits
		}
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
	} else if e.recurrent {
		sq.logits = logits // the snapshot's, read-only
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
	// argmax: the last step took the runner's greedy path (logits nil);
	// id is the argmax of the last token's logits.
	argmax bool
	id     int32
}

// next picks the token after a finished prefill: the runner's argmax
// when the step took the greedy path, else sampled from the logits.
func (pr progress) next(s *sampler) int32 {
	if pr.argmax {
		return pr.id
	}
	return s.sample(pr.logits)
}

// greedyRunner is the runner's argmax-only path when a generation with
// p may take it: the runner has one, and every step picks the plain
// argmax (greedy, as the sampler decides it, with no penalties or bias)
// and wants no logprobs. Stop strings read only the ids. Nil: steps return
// the logits.
func (e *engine) greedyRunner(p GenerateParams) GreedyRunner {
	g, ok := e.model.(GreedyRunner)
	s := p.Sampling
	switch {
	case !ok, p.Logprobs, p.TopLogprobs > 0, !s.greedy(), s.adjusts():
		return nil
	}
	return g
}

// sampledRunner is the runner's drawing path (SamplingRunner) for a
// generation with p, drawing with smp, where it may take it: a sampled
// generation, or a greedy one whose penalties or bias change the logits
// (its draw is top-k 1, the argmax after them), with no logprobs (and,
// checked by the caller, no constraint). Penalties and logit bias go with
// each step's Draw as its Adjust. Nil: steps return the logits.
func (e *engine) sampledRunner(p GenerateParams, smp *sampler) GreedyRunner {
	r, ok := e.model.(SamplingRunner)
	s := p.Sampling
	switch {
	case !ok, p.Logprobs, p.TopLogprobs > 0, s.greedy() && !s.adjusts():
		return nil
	}
	if peek := smp.peekDraw(); peek.Check() != nil {
		return nil // out-of-range filters: the session's own sampler copes
	}
	return sampledSteps{r, smp}
}

// ensure advances sq's KV toward covering all of toks, and returns the
// logits at the last token once it does: first from the prefix index
// (whole blocks, never the last token, whose logits are needed; for
// recurrent models only up to a block with a state snapshot), then by
// prefilling at most budget tokens (kvMu held). A recurrent sequence's
// prefill is split so that pieces end on the snapshot positions, where
// the state is stored.
//
// With g (see greedyRunner), a last step that computes the last token
// asks g for its argmax only (pr.argmax); logits known already are
// returned as they are.
func (e *engine) ensure(sq *seqState, toks []int32, budget int, g GreedyRunner) (progress, error) {
	pr, err := e.ensureOnce(sq, toks, budget, g)
	if errors.Is(err, ErrKVLost) { // all KV was dropped: recompute from the tokens
		pr, err = e.ensureOnce(sq, toks, budget, g)
	}
	return pr, err
}

func (e *engine) ensureOnce(sq *seqState, toks []int32, budget int, g GreedyRunner) (progress, error) {
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
	if e.recurrent {
		pr.reused += e.reuseSnapshot(sq, toks)
		if sq.kvLen == n && sq.logits != nil {
			pr.logits, pr.done = sq.logits, true
			return pr, nil
		}
	} else {
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
	budget = max(budget, 1)
	for pr.computed < budget {
		start := sq.kvLen
		end := min(n, start+budget-pr.computed)
		want := models.NoLogits
		var mk passMarks
		if next := e.snapEvery.Next(start); next < end {
			var ok bool
			if mk, ok = e.markSnapshots(sq, toks, start, end); !ok {
				end = next // the state exists only where a pass ends
			}
		}
		if end == n || e.snapEvery.At(end) {
			want = models.LastLogits // a snapshot keeps them
		}
		// The runner's token path. For a recurrent model only a decode
		// step (one token) that ends where no snapshot wants the logits:
		// a prefill's last pass keeps them, since forks and `n` choices
		// at a prompt's end read them and a state cannot step back a
		// token to recompute them.
		if end == n && g != nil && (!e.recurrent || end-start == 1 && len(mk.pos) == 0 && !e.snapEvery.At(end)) {
			id, err := e.forwardArgmax(sq, toks, end, g)
			if err != nil {
				return pr, err
			}
			pr.computed += end - start
			sq.logits = nil
			pr.argmax, pr.id, pr.done = true, id, true
			break
		}
		logits, err := e.forward(sq, toks, end, want, mk)
		if err != nil {
			e.forgetMarks(sq, mk)
			return pr, err
		}
		pr.computed += end - start
		if end == n {
			sq.logits = logits
			pr.logits, pr.done = logits, true
			break
		}
	}
	return pr, nil
}

// reuseSnapshot moves a recurrent sequence whose KV ends on a block
// boundary forward through the prefix index: to the furthest boundary
// q ≤ len(toks) whose blocks are all cached and which has a state
// snapshot (q < len(toks) unless the snapshot has the logits there). It
// takes the blocks (from the host tier too, dropping other sequences' KV
// for room as a prefill would), restores the state and returns the
// positions gained; when not every block can be had it settles for an
// earlier snapshot (kvMu held).
func (e *engine) reuseSnapshot(sq *seqState, toks []int32) int {
	n := len(toks)
	if !e.snapEvery.Enabled() || sq.kvLen%e.bs != 0 || sq.kvLen+e.bs > n {
		return 0
	}
	var (
		keys  []cache.Key
		snaps []*cache.Snapshot // snaps[i]: the usable snapshot after keys[i], or nil
		best  int
	)
	// The snapshots along the way are only looked at; the one resumed
	// from is marked used at the end.
	k := e.prevKey(sq, sq.kvLen/e.bs)
	for bi := sq.kvLen / e.bs; (bi+1)*e.bs <= n; bi++ {
		k = k.Next(toks[bi*e.bs : (bi+1)*e.bs])
		if !e.pool.Contains(k) {
			break
		}
		q := (bi + 1) * e.bs
		s, ok := e.pool.PeekSnapshot(k)
		if !ok || !e.snapEvery.At(q) || s.Pos != q || q == n && s.Logits == nil {
			s = nil
		}
		keys, snaps = append(keys, k), append(snaps, s)
		if s != nil {
			best = len(keys)
		}
	}
	if best == 0 {
		return 0
	}
	st, _ := sq.state.(models.RecurrentState)
	if sq.kvLen == 0 || st == nil {
		freeState(sq.state)
		sq.state = nil
		st, _ = e.model.NewState().(models.RecurrentState)
	}
	if st == nil {
		return 0
	}
	taken := make([]int32, 0, best)
	for _, k := range keys[:best] {
		b, ok := e.pool.Lookup(k)
		if !ok {
			// The pool may be full of other sequences' blocks: make room
			// once, as a prefill would, and try again.
			if r, err := e.alloc(sq); err == nil {
				e.pool.Release(r)
				b, ok = e.pool.Lookup(k)
			}
		}
		if !ok { // gone from the host tier, or no room: stop here
			break
		}
		taken = append(taken, b)
	}
	for best = len(taken); best > 0 && snaps[best-1] == nil; best-- {
	}
	snap := snaps[max(best, 1)-1]
	if best == 0 || restoreSnapshot(st, snap, snap.Pos) != nil {
		e.pool.ReleaseAll(taken)
		if st != sq.state {
			freeState(st)
		}
		return 0
	}
	e.pool.ReleaseAll(taken[best:])
	e.pool.Snapshot(keys[best-1])
	gained := snap.Pos - sq.kvLen
	sq.state = st
	sq.table = append(sq.table, taken[:best]...)
	sq.keys = append(sq.keys, keys[:best]...)
	sq.kvLen, sq.logits = snap.Pos, nil
	if snap.Pos == n {
		sq.logits = snap.Logits
	}
	return gained
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
func (e *engine) forward(sq *seqState, toks []int32, end int, want models.Logits, mk passMarks) ([]float32, error) {
	var logits []float32
	err := e.advance(sq, toks, end, mk, func(seq models.Seq, t []int32, marks int) (marked []float32, err error) {
		if marks == 0 {
			logits, err = e.model.Forward(seq, t, want)
			return nil, err
		}
		// The logits before each mark too, for its snapshot.
		all, err := e.model.Forward(seq, t, models.MarkedLogits)
		V := e.model.ModelConfig().VocabSize
		if err == nil && len(all) != (marks+1)*V {
			err = fmt.Errorf("forward: %d logits for %d marks", len(all), marks)
		}
		if err != nil {
			return nil, err
		}
		if want != models.NoLogits {
			logits = all[marks*V:]
		}
		return all[:marks*V], nil
	})
	if err != nil {
		return nil, err
	}
	if e.snapEvery.At(end) {
		e.snapshot(sq, logits, want)
	}
	return logits, nil
}

// forwardArgmax is forward with the runner's token path: the argmax of
// the last token's logits (or a token drawn from them) instead of the
// logits; ensureOnce takes it only where no snapshot wants the logits.
func (e *engine) forwardArgmax(sq *seqState, toks []int32, end int, g GreedyRunner) (int32, error) {
	var id int32
	err := e.advance(sq, toks, end, passMarks{}, func(seq models.Seq, t []int32, _ int) (_ []float32, err error) {
		id, err = g.ForwardArgmax(seq, t) // no marks: attention-only models
		return nil, err
	})
	return id, err
}

// advance is forward's work around the model call run, which is told how
// many positions the state was marked at (mk) and returns their logits.
func (e *engine) advance(sq *seqState, toks []int32, end int, mk passMarks, run func(models.Seq, []int32, int) ([]float32, error)) error {
	start := sq.kvLen
	if start >= end {
		return fmt.Errorf("forward: nothing to compute")
	}
	if end > e.ctxLen {
		return fmt.Errorf("%w: %d tokens, model allows %d", ErrContextLength, end, e.ctxLen)
	}
	if start%e.bs != 0 {
		last := len(sq.table) - 1
		b, err := e.pool.Writable(sq.table[last], func() (int32, error) { return e.alloc(sq) })
		if err != nil {
			return err
		}
		sq.table[last] = b
	}
	for len(sq.table)*e.bs < end {
		b, err := e.alloc(sq)
		if err != nil {
			e.truncateKV(sq, start) // release the blocks taken so far
			return err
		}
		sq.table = append(sq.table, b)
	}
	if start == 0 && e.recurrent && len(mk.pos) == 0 { // (markSnapshots made a marked one)
		e.newState(sq)
	}
	seq := models.Seq{Pool: e.pool.KV(), Table: sq.table, Start: start, State: sq.state}
	t0 := time.Now()
	markLogits, err := e.guarded(func() ([]float32, error) { return run(seq, toks[start:end], len(mk.pos)) })
	dt := time.Since(t0)
	if end-start == 1 {
		e.decodeNs.Add(int64(dt))
	} else {
		e.prefillNs.Add(int64(dt))
	}
	if end-start >= 64 && err == nil {
		r := float64(end-start) / max(dt.Seconds(), 1e-9)
		if old := math.Float64frombits(e.prefillRate.Load()); old > 0 {
			r = 0.7*old + 0.3*r
		}
		e.prefillRate.Store(math.Float64bits(r))
	}
	if err != nil {
		e.forgetMarks(sq, mk)
		if errors.Is(err, ErrKVLost) || errors.Is(err, errStepPanicked) {
			e.invalidateAll()
		} else if e.recurrent {
			e.dropKV(sq) // the state may be half advanced
		} else {
			e.truncateKV(sq, start) // release blocks allocated for nothing
		}
		return fmt.Errorf("model %s: %w", e.name, err)
	}
	sq.kvLen = end
	for bi := len(sq.keys); bi < end/e.bs; bi++ {
		k := e.prevKey(sq, bi).Next(toks[bi*e.bs : (bi+1)*e.bs])
		sq.keys = append(sq.keys, k)
		e.pool.Register(sq.table[bi], k)
	}
	e.keepMarked(sq, mk, markLogits)
	return nil
}

// errStepPanicked is a model call's error where the call panicked.
var errStepPanicked = errors.New("the model's step panicked")

// guarded runs a model call, a panic in it (a bug: a runner in a worker
// process recovers its own) becoming the call's error. The step's
// request fails and, as after lost KV, every sequence's KV and state is
// dropped and rebuilt from the tokens on its next use, since a step cut
// short may have left any of them half written; the daemon and the
// sessions go on.
func (e *engine) guarded(run func() ([]float32, error)) (logits []float32, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("model step panicked", "model", e.name, "panic", p, "stack", string(debug.Stack()))
			logits, err = nil, fmt.Errorf("%w: %v", errStepPanicked, p)
		}
	}()
	return run()
}

// passMarks are the snapshot positions inside a pass that its state was
// asked to hold copies at (markSnapshots), with the keys of the blocks
// they end.
type passMarks struct {
	pos  []int
	keys []cache.Key
}

// newState gives sq a new recurrent state (a pass from position 0).
func (e *engine) newState(sq *seqState) {
	freeState(sq.state)
	sq.state = e.model.NewState()
}

// markSnapshots asks sq's state to hold copies of itself at the snapshot
// positions strictly inside [start, end) that have no snapshot yet (kvMu
// held), making the state new first for a pass from 0. It reports false
// where the pass must end on the next snapshot position instead: the
// runner cannot mark (no models.MarkingState), or it declines now (too
// little device memory for the copies, as it would decline a HoldState;
// the state at a pass's end is snapshotted through the host then).
func (e *engine) markSnapshots(sq *seqState, toks []int32, start, end int) (passMarks, bool) {
	if !e.marking {
		return passMarks{}, false
	}
	if start == 0 {
		e.newState(sq)
	}
	ms, ok := sq.state.(models.MarkingState)
	if !ok {
		return passMarks{}, false
	}
	var mk passMarks
	k := e.prevKey(sq, len(sq.keys))
	for bi := len(sq.keys); (bi+1)*e.bs < end; bi++ {
		k = k.Next(toks[bi*e.bs : (bi+1)*e.bs])
		if p := (bi + 1) * e.bs; p > start && e.snapEvery.At(p) && !e.pool.HasSnapshot(k) {
			mk.pos, mk.keys = append(mk.pos, p), append(mk.keys, k)
		}
	}
	if len(mk.pos) == 0 {
		return mk, true
	}
	if err := ms.HoldAt(mk.pos); err != nil {
		if errors.Is(err, kernels.ErrUnsupported) {
			e.marking = false // for good
		}
		return passMarks{}, false
	}
	return mk, true
}

// forgetMarks withdraws a pass's marks that it did not fill (a failed or
// unrun pass; kvMu held).
func (e *engine) forgetMarks(sq *seqState, mk passMarks) {
	if ms, ok := sq.state.(models.MarkingState); ok && len(mk.pos) > 0 {
		for _, h := range ms.TakeHeld() {
			h.Release()
		}
	}
}

// keepMarked stores the copies a marked pass left as held snapshots, each
// with the logits before its position, as a pass ending there leaves
// them (kvMu held).
func (e *engine) keepMarked(sq *seqState, mk passMarks, logits []float32) {
	pos, keys := mk.pos, mk.keys
	if len(pos) == 0 {
		return
	}
	V := e.model.ModelConfig().VocabSize
	held := sq.state.(models.MarkingState).TakeHeld()
	for i, h := range held {
		if i >= len(pos) || h.Pos() != pos[i] || e.pool.HasSnapshot(keys[i]) || len(logits) < (i+1)*V {
			h.Release()
			continue
		}
		snap := &cache.Snapshot{Pos: pos[i], Held: h, Logits: slices.Clone(logits[i*V : (i+1)*V])}
		if local, ok := h.(interface{ Data() []float32 }); ok {
			// A runner in this process: its copy is daemon memory,
			// stored as any snapshot of its states is.
			snap.State, snap.Held = local.Data(), nil
			h.Release()
		} else if !e.hold {
			// Snapshots kept by the daemon (ModelConfig.HostSnapshots):
			// the runner's copy comes over, and goes.
			r, ok := h.(interface{ Snapshot() []float32 })
			var data []float32
			if ok {
				data = r.Snapshot()
			}
			h.Release()
			if len(data) != sq.state.(models.RecurrentState).Len() {
				continue // the runner could not read it (a worker lost)
			}
			snap.State, snap.Held = data, nil
		}
		e.pool.PutSnapshot(keys[i], snap)
	}
}

// snapshot stores sq's recurrent state at kvLen, a snapshot position,
// with the logits there when the pass computed them (kvMu held).
func (e *engine) snapshot(sq *seqState, logits []float32, want models.Logits) {
	st, ok := sq.state.(models.RecurrentState)
	if !ok || st.Pos() != sq.kvLen || sq.kvLen%e.bs != 0 {
		return
	}
	k := sq.keys[sq.kvLen/e.bs-1]
	if e.pool.HasSnapshot(k) {
		return
	}
	snap := &cache.Snapshot{Pos: sq.kvLen}
	if hs, ok := st.(models.HoldingState); ok && e.hold {
		if h, err := hs.Hold(); err == nil {
			snap.Held = h
		}
	}
	if snap.Held == nil { // through the host
		data := st.Snapshot()
		if len(data) != st.Len() { // the runner could not read it (a worker lost)
			return
		}
		snap.State = data
	}
	if V := e.model.ModelConfig().VocabSize; (want == models.LastLogits || want == models.AllLogits) && len(logits) >= V {
		snap.Logits = slices.Clone(logits[len(logits)-V:])
	}
	e.pool.PutSnapshot(k, snap)
}

// restoreSnapshot makes st the state of snap, which is at pos: from the
// runner's held copy where it has one, else from the host copy.
func restoreSnapshot(st models.RecurrentState, snap *cache.Snapshot, pos int) error {
	if snap.Held == nil {
		return st.Restore(snap.State, pos)
	}
	h, ok := snap.Held.(models.HeldState)
	hs, ok2 := st.(models.HoldingState)
	if !ok || !ok2 {
		return fmt.Errorf("%w: a held snapshot %T for a %T", models.ErrState, snap.Held, st)
	}
	if h.Pos() != pos {
		return fmt.Errorf("%w: a held snapshot at %d restored at %d", models.ErrState, h.Pos(), pos)
	}
	return hs.RestoreHeld(h)
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

// freeState releases a recurrent state the engine drops, for runners that
// hold it outside this process (a worker's states implement Free); states
// in this process are garbage collected.
func freeState(st any) {
	if f, ok := st.(interface{ Free() }); ok {
		f.Free()
	}
}
