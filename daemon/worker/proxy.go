package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// ErrWorkerLost is wrapped by the errors of calls that a worker did not
// answer: it exited, hung past the request timeout or sent a frame that
// does not decode. The supervisor restarts it.
var ErrWorkerLost = errors.New("worker lost")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("worker proxy closed")

// Options configure a worker Proxy.
type Options struct {
	// Command starts a worker process (one per rank); its ExtraFiles[0]
	// (fd 3) must be the worker's end of the socketpair (see Start). Nil:
	// the default pocket-worker command line.
	Command Commander
	// Hello is what every (re)started worker is asked to load; Version,
	// Pool and the group fields are filled in by the Proxy.
	Hello Hello
	// World is the number of tensor-parallel ranks (0 or 1: one worker
	// holds the whole model). Rank r runs on Devices[r] when Devices is
	// set (else on Hello.Device).
	World   int
	Devices []int
	// Timeout bounds one request (default 5 minutes); a worker that does
	// not answer in time is killed and restarted (with its whole group).
	Timeout time.Duration
	// CollectiveTimeout bounds one collective inside a rank of a group
	// (default: Timeout): a rank that waits longer for its peers fails,
	// and the group is rebuilt.
	CollectiveTimeout time.Duration
	// StartTimeout bounds a start: process launch, model load and
	// handshake (default 15 minutes).
	StartTimeout time.Duration
	// MaxBackoff bounds the wait between failed restarts (default 5s).
	MaxBackoff time.Duration
	// SharedBytes is the size of each rank's shared-memory region (a
	// memfd the worker maps), through which KV blocks and logits that fit
	// travel instead of in frames (0: DefaultSharedBytes; negative: none,
	// everything in frames). At most MaxSharedBytes.
	SharedBytes int64
	Logger      *slog.Logger
}

// Proxy is a model held by a worker process, or by the rank processes of
// a tensor-parallel group. It implements session.Runner (and kernels.KVOps
// for the cache) by sending each call to the worker (every rank: the same
// request; rank 0's logits are the answer), one at a time, and supervises
// the processes: a lost worker, or any lost rank, is replaced with the
// same model and pool (a group is rebuilt whole).
//
// A group's KV pool, as the cache sees it, holds every rank's KV heads: a
// block is the ranks' blocks one after the other (rank 0's first), which
// is what ReadKVBlock returns and WriteKVBlock takes. A hybrid's
// recurrent state is laid out alike (state.go).
type Proxy struct {
	opts   Options
	log    *slog.Logger
	ready  Ready // the group's: KV counts every rank's heads
	rankKV kernels.KVSpec
	cfg    *models.Config

	req sync.Mutex // one request at a time; guards kvGen and nextID
	// kvGen is the worker generation whose KV memory the scheduler's
	// blocks describe; -1 once a loss was reported (session.ErrKVLost),
	// when the next generation is taken as is.
	kvGen  int
	nextID uint32

	states stateBook // recurrent states (state.go)

	argmaxSteps  atomic.Int64
	sampledSteps atomic.Int64
	// shared counts the transfers that went through shared memory.
	shared struct{ logits, reads, writes atomic.Int64 }

	mu       sync.Mutex
	cur      *group
	changed  chan struct{} // closed and replaced when cur changes
	gen      int
	lastErr  error
	restarts int
	closed   bool
	pool     *kvPool // nil before NewKVPool
	stop     chan struct{}
	done     chan struct{}
}

var (
	_ session.GreedyRunner   = (*Proxy)(nil)
	_ session.SamplingRunner = (*Proxy)(nil)
	_ kernels.KVOps          = (*Proxy)(nil)
)

// Start launches the worker, waits for its handshake and starts
// supervising it. A model the first worker cannot load is an error here;
// later losses are restarted.
func Start(opts Options) (*Proxy, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 15 * time.Minute
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.CollectiveTimeout <= 0 {
		opts.CollectiveTimeout = opts.Timeout
	}
	opts.World = max(opts.World, 1)
	if len(opts.Devices) > 0 && len(opts.Devices) < opts.World {
		return nil, fmt.Errorf("worker %s: %d devices for %d tensor-parallel ranks", opts.Hello.Name, len(opts.Devices), opts.World)
	}
	if opts.Command == nil {
		devs := opts.Devices
		if len(devs) == 0 {
			devs = []int{opts.Hello.Device}
		}
		opts.Command = DefaultCommand("", opts.Hello.Backend, devs...)
	}
	p := &Proxy{opts: opts, log: opts.Logger, changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), kvGen: -1}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("model", opts.Hello.Name, "backend", opts.Hello.Backend)
	if opts.World > 1 {
		p.log = p.log.With("tp", opts.World)
	}
	g, err := p.spawnGroup(1, kernels.KVSpec{})
	if err != nil {
		return nil, err
	}
	r0 := g.ranks[0].ready
	var cfg models.Config
	if err := json.Unmarshal(r0.Config, &cfg); err != nil {
		g.kill()
		g.wait()
		return nil, fmt.Errorf("model %s: worker's config: %w", opts.Hello.Name, err)
	}
	p.ready, p.rankKV, p.cfg = groupReady(g), r0.KV, &cfg
	p.gen, p.cur = 1, g
	go p.supervise(g)
	return p, nil
}

// sharedBytes is each rank's shared-memory region size (0: none).
func (p *Proxy) sharedBytes() int64 {
	switch n := p.opts.SharedBytes; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultSharedBytes
	default:
		return min(n+(-n&4095), MaxSharedBytes) // whole pages
	}
}

// world is the number of ranks.
func (p *Proxy) world() int { return max(p.opts.World, 1) }

// groupReady is the group's view of its ranks' Ready: KV holds every
// rank's heads, a recurrent state every rank's share (state.go), weight
// bytes add up.
func groupReady(g *group) Ready {
	r := g.ranks[0].ready
	r.KV.KVHeads *= len(g.ranks)
	r.StateLen *= int64(len(g.ranks))
	if len(g.ranks) > 1 {
		devs := make([]string, len(g.ranks))
		r.WeightBytes = 0
		for i, pr := range g.ranks {
			devs[i] = pr.ready.Device
			r.WeightBytes += pr.ready.WeightBytes
		}
		r.Device = fmt.Sprintf("%d ranks: %s", len(g.ranks), strings.Join(devs, ", "))
		for _, pr := range g.ranks {
			r.FreeBytes = min(r.FreeBytes, pr.ready.FreeBytes) // the fullest device bounds the pool
		}
	}
	return r
}

// PoolRoom is how many blocks of blockSize tokens a KV pool of element
// type half (kernels.KVSpec.Half) may take on the group's devices, leaving
// reserve bytes (or an eighth of the free memory, whichever is more) free
// on each for activations, recordings and decode copies; ok is false
// where the ranks have no device memory of their own (CPU workers), or
// did not say how much is free.
func (p *Proxy) PoolRoom(blockSize int, half bool, reserve int64) (blocks int, ok bool) {
	free := p.ready.FreeBytes
	if free <= 0 || blockSize <= 0 {
		return 0, false
	}
	s := p.ready.KV
	s.BlockSize, s.KVHeads, s.Half = blockSize, s.KVHeads/p.world(), half
	per := s.BytesPerBlock() // float32, as the host tier counts it
	if s.HalfRows() {        // as the backends decide
		per /= 2
	}
	room := free - max(reserve, free/8)
	if per <= 0 || room < per {
		return 0, true
	}
	return int(min(room/per, int64(math.MaxInt32))), true
}

// ModelConfig implements session.Runner.
func (p *Proxy) ModelConfig() *models.Config { return p.cfg }

// KVSpec implements session.Runner.
func (p *Proxy) KVSpec(blocks, blockSize int) kernels.KVSpec {
	s := p.ready.KV
	s.Blocks, s.BlockSize = blocks, blockSize
	return s
}

// KVOps implements session.Runner: the proxy itself.
func (p *Proxy) KVOps() kernels.KVOps { return p }

// EOS is the checkpoint's end-of-sequence ids, as the worker read them.
func (p *Proxy) EOS() []int32 { return p.ready.EOS }

// WeightBytes is the model's weight bytes read per token (all ranks').
func (p *Proxy) WeightBytes() int64 { return p.ready.WeightBytes }

// Device describes the worker's device (each rank's, for a group).
func (p *Proxy) Device() string { return p.ready.Device }

// World is the number of tensor-parallel ranks (1: one worker).
func (p *Proxy) World() int { return p.world() }

// Health is nil while a worker serves, and says why not otherwise (a
// restart in progress).
func (p *Proxy) Health() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return ErrClosed
	case p.cur == nil && p.world() > 1:
		return fmt.Errorf("tensor-parallel group of %d ranks rebuilding (rebuild %d) after: %v", p.world(), p.restarts, p.lastErr)
	case p.cur == nil:
		return fmt.Errorf("worker restarting (restart %d) after: %v", p.restarts, p.lastErr)
	}
	return nil
}

// Restarts counts the worker restarts (group rebuilds) so far.
func (p *Proxy) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// PID is the current worker's process id (rank 0's for a group; 0
// while none runs).
func (p *Proxy) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.ranks[0].pid()
}

// PIDs are the current ranks' process ids, in rank order (nil while
// none runs).
func (p *Proxy) PIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return nil
	}
	return p.cur.pids()
}

// RankStatus is one rank process of a model's worker group (the one
// worker, rank 0, when the model is not tensor-parallel).
type RankStatus struct {
	Rank int
	// PID is the rank's process id (0 while the group is rebuilt).
	PID int
	// GPU is the rank's GPU ordinal (-1: none, a CPU rank).
	GPU int
	// Device is the device as the rank described it ("" while the group
	// is rebuilt).
	Device string
	// Restarts counts the group's rebuilds: a group lives and dies
	// whole, so every rank has been restarted as often as the group.
	Restarts int
}

// Ranks describes every rank of the group, in rank order.
func (p *Proxy) Ranks() []RankStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]RankStatus, p.world())
	for r := range out {
		out[r] = RankStatus{Rank: r, GPU: -1, Restarts: p.restarts}
		if r < len(p.opts.Devices) {
			out[r].GPU = p.opts.Devices[r]
		}
		if p.cur != nil && r < len(p.cur.ranks) {
			pr := p.cur.ranks[r]
			out[r].PID, out[r].Device = pr.pid(), pr.ready.Device
		}
	}
	return out
}

// Close stops the worker (it exits when its connection closes) and the
// supervision.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	p.notifyLocked()
	p.mu.Unlock()
	<-p.done
	return nil
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// supervise replaces the worker (the whole group) whenever it is lost,
// until Close.
func (p *Proxy) supervise(g *group) {
	defer close(p.done)
	backoff := time.Duration(0)
	for {
		select {
		case <-g.down:
		case <-p.stop:
			g.stop()
			return
		}
		p.lose(g, g.downErr)
		// Every rank must be gone (its device free, its peers' sockets
		// closed) before the next generation starts.
		g.wait()
		if time.Since(g.started) > 30*time.Second {
			backoff = 0
		}
		for {
			select {
			case <-time.After(backoff):
			case <-p.stop:
				return
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), p.opts.MaxBackoff)
			p.mu.Lock()
			gen := p.gen + 1
			var spec kernels.KVSpec
			if p.pool != nil {
				spec = p.pool.rank
			}
			p.mu.Unlock()
			ng, err := p.spawnGroup(gen, spec)
			if err != nil {
				p.log.Error("worker restart failed", "err", err, "retry_in", backoff)
				p.mu.Lock()
				p.lastErr = err
				p.mu.Unlock()
				continue
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				ng.stop()
				return
			}
			p.gen, p.cur = gen, ng
			p.notifyLocked()
			g = ng
			p.mu.Unlock()
			p.log.Info("worker restarted", "pids", ng.pids(), "generation", gen)
			break
		}
	}
}

// lose marks g as gone (idempotent) and kills all its ranks: calls wait
// for the next generation.
func (p *Proxy) lose(g *group, err error) {
	g.kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != g {
		return
	}
	p.cur = nil
	p.lastErr = err
	p.restarts++
	p.notifyLocked()
	p.log.Warn("worker lost", "pids", g.pids(), "err", err)
}

// worker waits (up to the request timeout) for a serving worker.
func (p *Proxy) worker() (*group, error) {
	timer := time.NewTimer(p.opts.Timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		pr, ch, closed, last := p.cur, p.changed, p.closed, p.lastErr
		p.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if pr != nil {
			return pr, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil, fmt.Errorf("%w: no worker after %v: %v", ErrWorkerLost, p.opts.Timeout, last)
		}
	}
}

// rankReq is one rank's request payload (of type typ, 0: the call's);
// limit bounds its reply.
type rankReq struct {
	typ            msgType
	payload, extra []byte
	limit          int
}

// call sends one request to every rank and reads their replies (p.req
// held); the replies' payloads come back in rank order. Transport
// failures lose the worker (the whole group) and wrap ErrWorkerLost; an
// Error frame becomes *RemoteError when every rank sent the same one (a
// fatal one, or ranks that disagree, lose the group too).
func (p *Proxy) call(g *group, typ msgType, req func(pr *proc) rankReq, want ...msgType) ([]frame, error) {
	p.nextID++
	id := p.nextID
	out := make([]frame, len(g.ranks))
	remote := make([]*RemoteError, len(g.ranks))
	err := g.each(func(pr *proc) error {
		rq := req(pr)
		if rq.typ == 0 {
			rq.typ = typ
		}
		pr.conn.SetDeadline(time.Now().Add(p.opts.Timeout))
		err := writeFrame(pr.conn, rq.typ, id, rq.payload, rq.extra)
		var f frame
		if err == nil {
			f, err = readFrame(pr.r, max(rq.limit, 1<<16))
		}
		if err == nil && f.id != id {
			err = fmt.Errorf("%w: reply id %d to request %d", ErrBadFrame, f.id, id)
		}
		if err == nil && f.typ == msgError {
			re, derr := decodeError(f.payload)
			if derr != nil {
				err = derr
			} else if re.Code == codeFatal {
				err = re
			} else {
				remote[pr.rank] = re
				return nil
			}
		}
		if err == nil && !slices.Contains(want, f.typ) {
			err = fmt.Errorf("%w: %s reply to %s", ErrBadFrame, f.typ, typ)
		}
		if err != nil {
			if len(g.ranks) > 1 {
				err = fmt.Errorf("rank %d (pid %d): %w", pr.rank, pr.pid(), err)
			}
			return err
		}
		out[pr.rank] = f
		return nil
	}, func(err error) { p.lose(g, err) })
	if err == nil && remote[0] != nil {
		for r, re := range remote {
			if re == nil || re.Code != remote[0].Code {
				err = fmt.Errorf("ranks disagree: rank 0 failed with %v, rank %d with %v", remote[0], r, re)
				p.lose(g, err)
				break
			}
		}
		if err == nil {
			return nil, remote[0]
		}
	}
	if err == nil {
		for r, re := range remote {
			if re != nil {
				err = fmt.Errorf("ranks disagree: rank 0 succeeded, rank %d failed with %v", r, re)
				p.lose(g, err)
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", typ, ErrWorkerLost, err)
	}
	return out, nil
}

// same is a request that every rank gets alike.
func same(payload []byte, limit int) func(*proc) rankReq {
	return func(*proc) rankReq { return rankReq{payload: payload, limit: limit} }
}
