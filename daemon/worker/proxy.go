package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

// ErrRecurrent refuses models with recurrent state (hybrid
// architectures): their state does not cross the protocol yet.
var ErrRecurrent = errors.New("models with recurrent state (hybrid architectures) are not supported on a worker yet")

// Options configure a worker Proxy.
type Options struct {
	// Command starts a worker process; its ExtraFiles[0] (fd 3) must be the
	// worker's end of the socketpair (see Start). Nil: the default
	// pocket-worker command line.
	Command Commander
	// Hello is what every (re)started worker is asked to load; Version
	// and Pool are filled in by the Proxy.
	Hello Hello
	// Timeout bounds one request (default 5 minutes); a worker that does
	// not answer in time is killed and restarted.
	Timeout time.Duration
	// StartTimeout bounds a start: process launch, model load and
	// handshake (default 15 minutes).
	StartTimeout time.Duration
	// MaxBackoff bounds the wait between failed restarts (default 5s).
	MaxBackoff time.Duration
	Logger     *slog.Logger
}

// Proxy is a model held by a worker process. It implements session.Runner
// (and kernels.KVOps for the cache) by sending each call to the worker,
// one at a time, and supervises the process: a lost worker is restarted
// with the same model and pool.
type Proxy struct {
	opts  Options
	log   *slog.Logger
	ready Ready
	cfg   *models.Config

	req sync.Mutex // one request at a time; guards kvGen and nextID
	// kvGen is the worker generation whose KV memory the scheduler's
	// blocks describe; -1 once a loss was reported (session.ErrKVLost),
	// when the next generation is taken as is.
	kvGen  int
	nextID uint32

	mu       sync.Mutex
	cur      *proc
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
	_ session.Runner = (*Proxy)(nil)
	_ kernels.KVOps  = (*Proxy)(nil)
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
	if opts.Command == nil {
		opts.Command = DefaultCommand("", opts.Hello.Backend, opts.Hello.Device)
	}
	p := &Proxy{opts: opts, log: opts.Logger, changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), kvGen: -1}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("model", opts.Hello.Name, "backend", opts.Hello.Backend)
	pr, err := p.spawn(1, kernels.KVSpec{})
	if err != nil {
		return nil, err
	}
	if pr.ready.Recurrent {
		pr.kill()
		<-pr.exited
		return nil, fmt.Errorf("model %s: %w", opts.Hello.Name, ErrRecurrent)
	}
	var cfg models.Config
	if err := json.Unmarshal(pr.ready.Config, &cfg); err != nil {
		pr.kill()
		<-pr.exited
		return nil, fmt.Errorf("model %s: worker's config: %w", opts.Hello.Name, err)
	}
	p.ready, p.cfg = pr.ready, &cfg
	p.gen, p.cur = 1, pr
	go p.supervise(pr)
	return p, nil
}

// ModelConfig implements session.Runner.
func (p *Proxy) ModelConfig() *models.Config { return p.cfg }

// NewState implements session.Runner: workers serve attention-only models.
func (p *Proxy) NewState() any { return nil }

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

// WeightBytes is the model's weight bytes read per token.
func (p *Proxy) WeightBytes() int64 { return p.ready.WeightBytes }

// Device describes the worker's device.
func (p *Proxy) Device() string { return p.ready.Device }

// Health is nil while a worker serves, and says why not otherwise (a
// restart in progress).
func (p *Proxy) Health() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return ErrClosed
	case p.cur == nil:
		return fmt.Errorf("worker restarting (restart %d) after: %v", p.restarts, p.lastErr)
	}
	return nil
}

// Restarts counts the worker restarts so far.
func (p *Proxy) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// PID is the current worker's process id (0 while none runs).
func (p *Proxy) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.pid()
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

// supervise restarts the worker whenever it is lost, until Close.
func (p *Proxy) supervise(pr *proc) {
	defer close(p.done)
	backoff := time.Duration(0)
	for {
		select {
		case <-pr.exited:
		case <-p.stop:
			pr.stop()
			return
		}
		p.lose(pr, pr.exitErr())
		if time.Since(pr.started) > 30*time.Second {
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
				spec = p.pool.spec
			}
			p.mu.Unlock()
			np, err := p.spawn(gen, spec)
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
				np.stop()
				return
			}
			p.gen, p.cur = gen, np
			p.notifyLocked()
			pr = np
			p.mu.Unlock()
			p.log.Info("worker restarted", "pid", np.pid(), "generation", gen)
			break
		}
	}
}

// lose marks pr as gone (idempotent): calls wait for the next worker.
func (p *Proxy) lose(pr *proc, err error) {
	pr.kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != pr {
		return
	}
	p.cur = nil
	p.lastErr = err
	p.restarts++
	p.notifyLocked()
	p.log.Warn("worker lost", "pid", pr.pid(), "err", err)
}

// worker waits (up to the request timeout) for a serving worker.
func (p *Proxy) worker() (*proc, error) {
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

// call sends one request and reads its reply (p.req held). Transport
// failures lose the worker and wrap ErrWorkerLost; Error frames become
// *RemoteError (a fatal one loses the worker too).
func (p *Proxy) call(pr *proc, typ msgType, payload, extra []byte, want msgType, limit int) ([]byte, error) {
	p.nextID++
	id := p.nextID
	pr.conn.SetDeadline(time.Now().Add(p.opts.Timeout))
	err := writeFrame(pr.conn, typ, id, payload, extra)
	var f frame
	if err == nil {
		f, err = readFrame(pr.r, max(limit, 1<<16))
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
			return nil, re
		}
	}
	if err == nil && f.typ != want {
		err = fmt.Errorf("%w: %s reply to %s", ErrBadFrame, f.typ, typ)
	}
	if err != nil {
		p.lose(pr, err)
		return nil, fmt.Errorf("%s: %w: %w", typ, ErrWorkerLost, err)
	}
	return f.payload, nil
}

// kvPool is the Proxy's handle on the worker's KV pool.
type kvPool struct {
	p    *Proxy
	spec kernels.KVSpec
}

func (k *kvPool) Spec() kernels.KVSpec { return k.spec }

// NewKVPool implements kernels.KVOps. A worker holds one pool; restarted
// workers allocate it again during their handshake.
func (p *Proxy) NewKVPool(spec kernels.KVSpec) (kernels.KVPool, error) {
	if err := validSpec(spec); err != nil {
		return nil, err
	}
	p.req.Lock()
	defer p.req.Unlock()
	p.mu.Lock()
	if p.pool != nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("worker: a worker holds one KV pool, and it has one")
	}
	p.mu.Unlock()
	pr, err := p.worker()
	if err != nil {
		return nil, err
	}
	var e enc
	e.spec(spec)
	if _, err := p.call(pr, msgNewKVPool, e.b, nil, msgOK, 0); err != nil {
		return nil, fmt.Errorf("new kv pool: %w", err)
	}
	kp := &kvPool{p: p, spec: spec}
	p.mu.Lock()
	p.pool = kp
	p.mu.Unlock()
	p.kvGen = pr.gen
	return kp, nil
}

func (p *Proxy) ownPool(kp kernels.KVPool) (*kvPool, error) {
	k, ok := kp.(*kvPool)
	if !ok || k.p != p {
		return nil, fmt.Errorf("worker: KV pool %T is not this worker's", kp)
	}
	return k, nil
}

// lostKV is the error of a Forward that cannot trust the KV (p.req held).
func (p *Proxy) lostKV(err error) error {
	p.kvGen = -1
	return fmt.Errorf("%w (%w)", err, session.ErrKVLost)
}

// Forward implements session.Runner.
func (p *Proxy) Forward(seq models.Seq, tokens []int32, want models.Logits) ([]float32, error) {
	if seq.State != nil {
		return nil, ErrRecurrent
	}
	kp, err := p.ownPool(seq.Pool)
	if err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, errors.New("forward: no tokens")
	}
	vocab := p.cfg.VocabSize
	var rows int
	switch want {
	case models.LastLogits:
		rows = 1
	case models.AllLogits:
		rows = len(tokens)
	case models.NoLogits:
	default:
		return nil, fmt.Errorf("forward: logits mode %d", want)
	}
	outBytes := int64(rows) * int64(vocab) * 4
	if outBytes > MaxFrame-64 {
		return nil, fmt.Errorf("forward: %d rows of logits exceed a frame; ask for fewer", rows)
	}
	// Only the blocks that cover the positions travel.
	end := seq.Start + len(tokens)
	nb := min(len(seq.Table), (end+kp.spec.BlockSize-1)/kp.spec.BlockSize)
	req := forwardReq{start: seq.Start, want: want, tokens: tokens, table: seq.Table[:nb]}

	p.req.Lock()
	defer p.req.Unlock()
	pr, err := p.worker()
	if err != nil {
		return nil, p.lostKV(err)
	}
	switch {
	case p.kvGen == -1:
		p.kvGen = pr.gen
	case p.kvGen != pr.gen:
		return nil, p.lostKV(fmt.Errorf("%w: restarted (generation %d)", ErrWorkerLost, pr.gen))
	}
	reply, err := p.call(pr, msgForward, req.encode(), nil, msgLogits, int(outBytes)+64)
	if err != nil {
		if errors.Is(err, ErrWorkerLost) {
			return nil, p.lostKV(err)
		}
		return nil, err
	}
	d := dec{b: reply}
	logits := d.f32s("logits")
	err = d.done("logits")
	if err == nil && int64(len(logits))*4 != outBytes {
		err = fmt.Errorf("%w: %d logits, want %d", ErrBadFrame, len(logits), outBytes/4)
	}
	if err != nil { // the worker does not speak the protocol: replace it
		p.lose(pr, err)
		return nil, p.lostKV(fmt.Errorf("forward: %w: %w", ErrWorkerLost, err))
	}
	if want == models.NoLogits {
		return nil, nil
	}
	return logits, nil
}

// blockOp runs a KV block request (p.req held by the caller); the
// KVOps methods have no error results, so failures are logged: a lost
// worker's KV is reported by the next Forward (session.ErrKVLost).
func (p *Proxy) blockOp(what string, kp kernels.KVPool, typ msgType, payload, extra []byte, want msgType, limit int) []byte {
	if _, err := p.ownPool(kp); err != nil {
		p.log.Error(what, "err", err)
		return nil
	}
	pr, err := p.worker()
	if err != nil {
		p.log.Error(what, "err", err)
		return nil
	}
	reply, err := p.call(pr, typ, payload, extra, want, limit)
	if err != nil {
		p.log.Error(what, "err", err)
		return nil
	}
	return reply
}

// CopyKVBlock implements kernels.KVOps.
func (p *Proxy) CopyKVBlock(kp kernels.KVPool, dst, src int) {
	var e enc
	e.i32(dst)
	e.i32(src)
	p.req.Lock()
	defer p.req.Unlock()
	p.blockOp("copy kv block", kp, msgCopyBlock, e.b, nil, msgOK, 0)
}

// ReadKVBlock implements kernels.KVOps. On failure dst is zeroed; the
// loss is reported by the next Forward, and the cache then drops every
// block, including any host copy made from dst.
func (p *Proxy) ReadKVBlock(kp kernels.KVPool, block int, dst []float32) {
	var e enc
	e.i32(block)
	p.req.Lock()
	defer p.req.Unlock()
	reply := p.blockOp("read kv block", kp, msgReadBlock, e.b, nil, msgBlock, len(dst)*4+64)
	d := dec{b: reply}
	n := d.count(4, "block")
	if reply == nil || n != len(dst) || len(d.b) != 4*n {
		if reply != nil {
			err := fmt.Errorf("%w: %d floats, want %d", ErrBadFrame, n, len(dst))
			p.log.Error("read kv block", "err", err)
			p.mu.Lock()
			pr := p.cur
			p.mu.Unlock()
			if pr != nil {
				p.lose(pr, err)
			}
		}
		clear(dst)
		return
	}
	copy(f32Bytes(dst), d.b)
}

// WriteKVBlock implements kernels.KVOps.
func (p *Proxy) WriteKVBlock(kp kernels.KVPool, block int, src []float32) {
	var e enc
	e.i32(block)
	e.f32sHeader(len(src))
	p.req.Lock()
	defer p.req.Unlock()
	p.blockOp("write kv block", kp, msgWriteBlock, e.b, f32Bytes(src), msgOK, 0)
}

// Ping checks that the worker answers.
func (p *Proxy) Ping() error {
	p.req.Lock()
	defer p.req.Unlock()
	pr, err := p.worker()
	if err != nil {
		return err
	}
	_, err = p.call(pr, msgPing, nil, nil, msgOK, 0)
	return err
}
