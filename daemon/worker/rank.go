package worker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/session"
)

// RankOptions configure ServeRank.
type RankOptions struct {
	// Backend is the backend this process runs ("cpu", "cuda"); a Hello
	// asking for another is refused.
	Backend string
	// Device is the GPU ordinal the process was started for.
	Device int
	// NewBackend makes the backend once the Hello has arrived; world is
	// the size of the rank's tensor-parallel group (1: none).
	NewBackend func(device, threads, world int) (kernels.Backend, error)
	// Join makes this rank's collective for a tensor-parallel group
	// (Hello.World > 1): it returns once every rank has joined. Nil: the
	// worker serves whole models only.
	Join func(be kernels.Backend, g Group) (kernels.Collective, io.Closer, error)
	// Shared is the shared-memory region the daemon passed (fd 4), mapped
	// when the Hello gives its size; nil: bulk data travels in frames.
	Shared *os.File
	// Graphs gives the backend's decode-step recorder, or nil (eager
	// steps only; also when Graphs itself is nil). See graphs.go.
	Graphs func(be kernels.Backend) StepGrapher
	// NoLookahead keeps the rank from running a greedy step ahead of its
	// request (rank_ahead.go).
	NoLookahead bool
	// HostDraw draws sampled steps' tokens on the host even where the
	// graph could on the device (StepDrawer): an A/B switch.
	HostDraw bool
	Logger   *slog.Logger
}

// Group is a rank's place in its tensor-parallel group, from the Hello.
type Group struct {
	Rank, World int
	// Dir is the group's private rendezvous directory.
	Dir string
	// JoinTimeout bounds the join; Timeout bounds each collective.
	JoinTimeout, Timeout time.Duration
}

// ErrGroupBroken is wrapped by the fatal error of a rank whose
// collective failed (a peer gone or hung): the group must be rebuilt.
var ErrGroupBroken = errors.New("tensor-parallel group broken")

// stickyComm remembers the first failure of a collective: after it the
// rank's state is unknown (peers may have stopped mid-step), so the rank
// reports a fatal error and exits.
type stickyComm struct {
	c   kernels.Collective
	err error
}

func (s *stickyComm) AllReduceSum(b kernels.Buf, n int) error {
	if s.err != nil {
		return s.err
	}
	if err := s.c.AllReduceSum(b, n); err != nil {
		s.err = fmt.Errorf("%w: %w", ErrGroupBroken, err)
	}
	return s.err
}

// AllReduceSumAdd forwards kernels.AllReduceAdder when the wrapped
// collective has it (declining otherwise), with the same stickiness.
func (s *stickyComm) AllReduceSumAdd(acc, b kernels.Buf, n int) (bool, error) {
	if s.err != nil {
		return true, s.err
	}
	ad, ok := s.c.(kernels.AllReduceAdder)
	if !ok {
		return false, nil
	}
	done, err := ad.AllReduceSumAdd(acc, b, n)
	if err != nil {
		s.err = fmt.Errorf("%w: %w", ErrGroupBroken, err)
		return true, s.err
	}
	return done, nil
}

// ErrDeviceLost is returned by ServeRank when the backend reported an
// error that poisons its device state (the process should exit).
var ErrDeviceLost = errors.New("device state lost")

// rank is the worker side of one connection.
type rank struct {
	opts  RankOptions
	log   *slog.Logger
	r     *bufio.Reader
	w     io.Writer
	model *models.Model
	be    kernels.Backend
	pool  kernels.KVPool
	spec  kernels.KVSpec
	// prepared: the backend's decode copies are made (newPool, once).
	prepared bool
	group    Group       // World ≤ 1: the whole model
	comm     *stickyComm // nil without a group
	shm      *mapping    // nil: no shared memory
	// states are the sequences' recurrent states by id (hybrid models;
	// nil for attention-only ones): see rank_state.go.
	states     map[uint64]models.RecurrentState
	freedBytes int64 // state bytes freed since the last collection
	// marks are the ids a MarkState request gave the copies the next
	// Forward of a state leaves (by the state's id).
	marks map[uint64][]uint64
	// baseChunk is the model's own MaxChunk (sizeChunk raises it on a
	// device with room).
	baseChunk int

	graphs *graphCache // nil: decode steps run eagerly
	padded []int32     // padTable's buffer
	warm   bool        // a single-token step ran eagerly (see replay)
	// warmPairs: a single-token ForwardGreedy ran eagerly, so the argmax
	// pairs' buffers exist before one is recorded (see replay).
	warmPairs bool

	// next is the step to run ahead once the current reply is out, ahead
	// the one run ahead, aheadHits how many requests it answered: see
	// rank_ahead.go.
	next, ahead *lookahead
	aheadHits   int64
	// undo is where a hybrid's state is copied before a step run ahead
	// (rank_ahead.go): one a rank, made on the first such step.
	undo       models.RecurrentState
	undoDenied bool // the spare was refused for want of room (logged once)
	// drawer draws ForwardSample's tokens, from drawBuf where a replay's
	// logits are read to the host.
	drawer  session.Drawer
	drawBuf []float32
	// drawnReady: a device draw has run, so the backend's draw scratch
	// exists and sampled steps may be recorded with their draw
	// (drawnStep).
	drawnReady bool
}

// ServeRank serves one daemon over conn: the handshake, then requests
// until the daemon closes the connection (nil) or the device state is
// lost (an error wrapping ErrDeviceLost, after a fatal Error frame).
func ServeRank(conn io.ReadWriter, opts RankOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rk := &rank{opts: opts, log: log, r: bufio.NewReaderSize(conn, 1<<16), w: conn}
	f, err := readFrame(rk.r, 1<<20)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if f.typ != msgHello {
		rk.replyErr(f.id, fmt.Errorf("%w: expected hello, got %s", errBadRequest, f.typ))
		return fmt.Errorf("handshake: got %s", f.typ)
	}
	closeModel, err := rk.hello(f)
	if err != nil {
		rk.replyErr(f.id, err)
		return fmt.Errorf("handshake: %w", err)
	}
	defer closeModel()
	for {
		f, err := readFrame(rk.r, MaxFrame)
		if errors.Is(err, io.EOF) {
			return nil // the daemon closed the connection
		}
		if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
		if err := rk.serve(f); err != nil {
			return err
		}
	}
}

// hello loads the model and answers Ready.
func (rk *rank) hello(f frame) (func(), error) {
	h, err := decodeHello(f.payload)
	if err != nil {
		return nil, err
	}
	if h.Backend != rk.opts.Backend {
		return nil, fmt.Errorf("%w: hello asks for backend %q, this worker runs %q", errBadRequest, h.Backend, rk.opts.Backend)
	}
	world := max(h.World, 1)
	if h.Rank < 0 || h.Rank >= world {
		return nil, fmt.Errorf("%w: rank %d of %d", errBadRequest, h.Rank, world)
	}
	if world > 1 && (rk.opts.Join == nil || h.Rendezvous == "" || h.JoinTimeout <= 0 || h.CollTimeout <= 0) {
		return nil, fmt.Errorf("%w: tensor-parallel rank %d of %d: this worker cannot join a %s group (rendezvous %q, timeouts %v/%v)",
			errBadRequest, h.Rank, world, h.Backend, h.Rendezvous, h.JoinTimeout, h.CollTimeout)
	}
	start := time.Now()
	be, err := rk.opts.NewBackend(h.Device, h.Threads, world)
	if err != nil {
		return nil, fmt.Errorf("backend %s device %d: %w", h.Backend, h.Device, err)
	}
	var plan *models.Plan
	var commCloser io.Closer
	if world > 1 {
		rk.group = Group{Rank: h.Rank, World: world, Dir: h.Rendezvous, JoinTimeout: h.JoinTimeout, Timeout: h.CollTimeout}
		c, closer, err := rk.opts.Join(be, rk.group)
		if err != nil {
			return nil, fmt.Errorf("join tensor-parallel group as rank %d of %d: %w", h.Rank, world, err)
		}
		rk.comm, commCloser = &stickyComm{c: c}, closer
		plan = &models.Plan{Rank: h.Rank, World: world, Comm: rk.comm}
		rk.log.Info("joined tensor-parallel group", "rank", h.Rank, "world", world, "took", time.Since(start).Round(time.Millisecond))
	}
	closeComm := func() {
		if commCloser != nil {
			commCloser.Close()
		}
	}
	var ck *checkpoint.Checkpoint
	if h.Demo {
		ck, err = demo.Open()
	} else {
		ck, err = checkpoint.Open(h.Path)
	}
	if err != nil {
		closeComm()
		return nil, err
	}
	if h.Name != "" {
		ck.Name = h.Name
	}
	m, err := models.NewRank(ck.Name, ck.Config, ck.Source, be, plan)
	if err != nil {
		ck.Close()
		closeComm()
		return nil, err
	}
	rk.model, rk.be, rk.baseChunk = m, be, m.MaxChunk
	closeAll := func() { ck.Close(); closeComm() }
	cfg, err := json.Marshal(m.Config)
	if err != nil {
		closeAll()
		return nil, err
	}
	if h.Pool.Blocks > 0 {
		if err := rk.newPool(h.Pool); err != nil {
			closeAll()
			return nil, err
		}
	}
	if h.Shared > 0 && rk.opts.Shared != nil {
		// Without the region the frames carry the data: not fatal.
		if rk.shm, err = mapShared(rk.opts.Shared, h.Shared); err != nil {
			rk.log.Warn("no shared memory: bulk data travels in frames", "err", err)
		}
		rk.pinShared()
	}
	var stateLen int64
	graphable := true
	if st, ok := m.NewState().(models.RecurrentState); ok {
		rk.states, stateLen = map[uint64]models.RecurrentState{}, int64(st.Len())
		// A recording bakes in one state's buffers: hybrid recordings are
		// per state (graphs.go), and a replay moves the state's position
		// itself (graphState).
		_, graphable = st.(graphState)
	}
	if rk.opts.Graphs != nil && graphable {
		if rec := rk.opts.Graphs(be); rec != nil {
			rk.graphs = newGraphCache(rec, maxGraphs)
			rk.graphs.perState = rk.states != nil
		}
	}
	dev := be.Name()
	if d, ok := be.(interface{ DeviceName() string }); ok {
		dev = d.DeviceName()
	}
	r := Ready{Version: Version, Backend: be.Name(), Device: dev, Config: cfg, KV: m.KVSpec(0, 0),
		Recurrent: rk.states != nil, EOS: ck.EOS(), WeightBytes: m.WeightBytes(), Shared: rk.shm != nil, StateLen: stateLen}
	if room, ok := be.(kernels.MemoryRoom); ok {
		if free, err := room.FreeBytes(); err == nil && free > 0 {
			r.FreeBytes = free
		}
	}
	if err := writeFrame(rk.w, msgReady, f.id, r.encode(), nil); err != nil {
		closeAll()
		return nil, err
	}
	rk.log.Info("rank ready", "model", ck.Name, "backend", be.Name(), "device", dev, "rank", h.Rank, "world", world,
		"took", time.Since(start).Round(time.Millisecond))
	return closeAll, nil
}

func (rk *rank) newPool(spec kernels.KVSpec) error {
	if err := validSpec(spec); err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	// The element type is the daemon's choice (cache.kv_dtype); the rest
	// is the model's.
	want := rk.model.KVSpec(spec.Blocks, spec.BlockSize)
	if want.Half = spec.Half; want != spec {
		return fmt.Errorf("%w: KV pool spec %+v does not fit the model (%+v)", errBadRequest, spec, want)
	}
	p, err := rk.be.NewKVPool(spec)
	if err != nil {
		return err
	}
	rk.graphs.reset() // they address the old pool
	rk.pool, rk.spec = p, spec
	// Spare device memory on faster decode layouts (the CUDA backend's
	// tiled FP8 copies) once the weights and the first pool are in (the
	// daemon sends the pool after the hello; a restarted worker gets it in
	// its hello), and before the passes are sized on what memory is left;
	// the backend keeps its own headroom.
	if dp, ok := rk.be.(kernels.DecodePreparer); ok && !rk.prepared {
		rk.prepared = true
		what, err := dp.PrepareDecode(0)
		if err != nil {
			return err
		}
		rk.log.Info("decode weights", "layout", what)
	}
	rk.sizeChunk()
	return nil
}

// Passes of a rank on a device: up to deviceMaxChunk rows at once where
// deviceChunkRoom bytes are still free once the weights and the KV pool
// are in (the CPU, and a device with less, keep models.Model's 512). A
// device's prefill reads every weight once per chunk: a Qwen3.5-27B FP8
// prefilled 6800 tok/s in passes of 256 rows on an H200, 9400 at 1024 and
// 9650 at 4096 (docs/benchmarks.md). The scratch grows with the chunk
// (~1–2 GB at 2048 rows for that model), and a failed allocation would
// fail the worker at every retry of the prompt.
const (
	deviceMaxChunk  = 2048
	deviceChunkRoom = 8 << 30
)

// sizeChunk sets the model's chunk for the memory left after the pool.
func (rk *rank) sizeChunk() {
	rk.model.MaxChunk = rk.baseChunk
	if _, device := rk.be.(kernels.MemoryRoom); device && rk.roomFor(0, deviceChunkRoom) {
		rk.model.MaxChunk = max(rk.baseChunk, deviceMaxChunk)
	}
}

// serve answers one request. It returns an error only when the worker
// must exit (the device state is lost or the connection broke).
func (rk *rank) serve(f frame) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: panic in %s: %v", ErrDeviceLost, f.typ, p)
			rk.log.Error("rank failed", "err", err)
			writeFrame(rk.w, msgError, f.id, encodeError(codeFatal, err.Error()), nil)
		}
	}()
	typ, payload, extra, reqErr := rk.handle(f)
	if err := rk.lost(f.typ.String()); err != nil {
		rk.log.Error("rank failed", "err", err)
		writeFrame(rk.w, msgError, f.id, encodeError(codeFatal, err.Error()), nil)
		return err
	}
	if reqErr != nil {
		return rk.replyErr(f.id, reqErr)
	}
	if err := writeFrame(rk.w, typ, f.id, payload, extra); err != nil {
		return err
	}
	if err := rk.runAhead(); err != nil {
		rk.log.Error("rank failed", "err", err)
		return err
	}
	return nil
}

// lost is the rank's fatal error after what it ran, or nil: a broken
// collective or a backend failure (the device state is then unknown).
func (rk *rank) lost(what string) error {
	if rk.comm != nil && rk.comm.err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDeviceLost, what, rk.comm.err)
	}
	if e, ok := rk.be.(interface{ Err() error }); ok {
		if err := e.Err(); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrDeviceLost, what, err)
		}
	}
	return nil
}

func (rk *rank) replyErr(id uint32, err error) error {
	return writeFrame(rk.w, msgError, id, encodeError(codeOf(err), err.Error()), nil)
}

// handle runs one request and returns the reply.
func (rk *rank) handle(f frame) (typ msgType, payload, extra []byte, err error) {
	d := dec{b: f.payload}
	block := func(what string) int {
		b := d.i32(what)
		if d.err == nil && (b < 0 || b >= rk.spec.Blocks) {
			d.err = fmt.Errorf("%w: %s %d outside the pool (%d blocks)", errBadRequest, what, b, rk.spec.Blocks)
		}
		return b
	}
	needPool := func() error {
		if rk.pool == nil {
			return fmt.Errorf("%w: %s before new-kv-pool", errBadRequest, f.typ)
		}
		return nil
	}
	rk.next = nil
	if f.typ != msgForwardArgmax && f.typ != msgForwardSample {
		rk.dropAhead() // only the next greedy or sampled step can use it
	}
	if typ, payload, extra, ok, err := rk.handleState(f); ok {
		return typ, payload, extra, err
	}
	switch f.typ {
	case msgPing:
		return msgOK, nil, nil, d.done("ping")
	case msgNewKVPool:
		spec := d.spec("spec")
		if err := d.done("new-kv-pool"); err != nil {
			return 0, nil, nil, err
		}
		return msgOK, nil, nil, rk.newPool(spec)
	case msgForward:
		if err := needPool(); err != nil {
			return 0, nil, nil, err
		}
		req, err := decodeForward(f.payload)
		if err != nil {
			return 0, nil, nil, err
		}
		return rk.forward(req)
	case msgForwardArgmax, msgForwardSample:
		// A token's step: its logits' argmax, or the token drawn from
		// them with the request's draw.
		if err := needPool(); err != nil {
			return 0, nil, nil, err
		}
		decode, step := decodeForward, rk.forwardArgmax
		if f.typ == msgForwardSample {
			decode, step = decodeForwardSample, rk.forwardSample
		}
		req, err := decode(f.payload)
		if err != nil {
			return 0, nil, nil, err
		}
		req.argmax = f.typ == msgForwardArgmax
		if req.want != models.LastLogits {
			return 0, nil, nil, fmt.Errorf("%w: %s of logits mode %d", errBadRequest, f.typ, req.want)
		}
		id, err := step(req)
		if err != nil {
			return 0, nil, nil, err
		}
		rk.guess(req, id)
		var e enc
		e.i32(int(id))
		return msgToken, e.b, nil, nil
	case msgCopyBlock:
		if err := needPool(); err != nil {
			return 0, nil, nil, err
		}
		dst, src := block("dst"), block("src")
		if err := d.done("copy-block"); err != nil {
			return 0, nil, nil, err
		}
		rk.be.CopyKVBlock(rk.pool, dst, src)
		return msgOK, nil, nil, nil
	case msgReadBlock:
		if err := needPool(); err != nil {
			return 0, nil, nil, err
		}
		b := block("block")
		if err := d.done("read-block"); err != nil {
			return 0, nil, nil, err
		}
		n := int(rk.spec.BytesPerBlock() / 4)
		var e enc
		if rk.shm.fits(n) { // straight into shared memory
			ref := shmRef{count: n}
			buf, err := rk.shm.floats(ref, "block")
			if err != nil {
				return 0, nil, nil, err
			}
			rk.be.ReadKVBlock(rk.pool, b, buf)
			e.ref(ref)
			return msgBlockShared, e.b, nil, nil
		}
		buf := make([]float32, n)
		rk.be.ReadKVBlock(rk.pool, b, buf)
		e.f32sHeader(len(buf))
		return msgBlock, e.b, f32Bytes(buf), nil
	case msgWriteBlock:
		if err := needPool(); err != nil {
			return 0, nil, nil, err
		}
		b := block("block")
		data := d.f32s("data")
		if err := d.done("write-block"); err != nil {
			return 0, nil, nil, err
		}
		if int64(len(data)) != rk.spec.BytesPerBlock()/4 {
			return 0, nil, nil, fmt.Errorf("%w: block data of %d floats, want %d", errBadRequest, len(data), rk.spec.BytesPerBlock()/4)
		}
		rk.be.WriteKVBlock(rk.pool, b, data)
		return msgOK, nil, nil, nil
	case msgWriteBlockShared:
		if err := needPool(); err != nil {
			return 0, nil, nil, err
		}
		b := block("block")
		ref := d.ref("data")
		if err := d.done("write-block-shared"); err != nil {
			return 0, nil, nil, err
		}
		if int64(ref.count) != rk.spec.BytesPerBlock()/4 {
			return 0, nil, nil, fmt.Errorf("%w: block data of %d floats, want %d", errBadRequest, ref.count, rk.spec.BytesPerBlock()/4)
		}
		data, err := rk.shm.floats(ref, "block data")
		if err != nil {
			return 0, nil, nil, err
		}
		rk.be.WriteKVBlock(rk.pool, b, data)
		return msgOK, nil, nil, nil
	}
	return 0, nil, nil, fmt.Errorf("%w: unexpected %s request", errBadRequest, f.typ)
}

// forwardArgmax runs a ForwardArgmax step (or takes it from the step run
// ahead): every rank has the full logits and answers their argmax (the
// session's tie rule); the daemon takes rank 0's.
func (rk *rank) forwardArgmax(req forwardReq) (int32, error) {
	if id, ok, err := rk.takeAhead(req); ok {
		return id, err
	}
	if g, ok := rk.replay(req); ok {
		return rk.graphToken(g)
	}
	return rk.runArgmax(req)
}

// forwardSample is forwardArgmax for a sampled step: the token drawn
// from the logits with req.draw (session.Drawer).
func (rk *rank) forwardSample(req forwardReq) (int32, error) {
	if id, ok, err := rk.takeAhead(req); ok {
		return id, err
	}
	if g, ok := rk.replay(req); ok {
		if f, ok := g.(StepFeeder); ok && isDrawn(g) {
			return f.Pending()()
		}
		return rk.graphDraw(g, *req.draw)
	}
	return rk.runSample(req)
}

// runSample runs req eagerly and answers the token drawn from its logits.
func (rk *rank) runSample(req forwardReq) (int32, error) {
	logits, err := rk.run(req)
	if err != nil {
		return 0, err
	}
	return rk.drawer.Token(logits, *req.draw), nil
}

// runArgmax runs req eagerly and answers its greedy token
// (models.Model.ForwardGreedy: a tensor-parallel group picks it from its
// argmax pairs, the logits never assembled).
func (rk *rank) runArgmax(req forwardReq) (int32, error) {
	var id int32
	_, err := rk.runWith(req, func(seq models.Seq) (logits []float32, err error) {
		id, err = rk.model.ForwardGreedy(seq, req.tokens)
		return nil, err
	})
	if err == nil && len(req.tokens) == 1 {
		rk.warmPairs = true
	}
	return id, err
}

// run checks a Forward request and runs it.
func (rk *rank) run(req forwardReq) ([]float32, error) {
	return rk.runWith(req, func(seq models.Seq) ([]float32, error) {
		return rk.model.Forward(seq, req.tokens, req.want)
	})
}

// runWith checks a Forward request and runs it by fwd on its sequence.
func (rk *rank) runWith(req forwardReq, fwd func(models.Seq) ([]float32, error)) ([]float32, error) {
	var state any
	switch {
	case rk.states != nil && req.state == 0:
		return nil, fmt.Errorf("%w: %w: forward without the sequence's recurrent state", errBadRequest, models.ErrState)
	case req.state != 0:
		st, err := rk.stateOf(req.state, "forward")
		if err != nil {
			return nil, err
		}
		state = st
	}
	if req.start < 0 {
		return nil, fmt.Errorf("%w: negative start %d", errBadRequest, req.start)
	}
	vocab := rk.model.Config.VocabSize
	switch req.want {
	case models.LastLogits, models.NoLogits, models.LastHidden:
	case models.AllLogits, models.MarkedLogits, models.AllHidden:
		rows, width := len(req.tokens), vocab
		if req.want == models.MarkedLogits {
			rows = len(rk.marks[req.state]) + 1
		}
		if req.want == models.AllHidden {
			width = rk.model.Config.HiddenSize
		}
		if int64(rows)*int64(width)*4 > MaxFrame-64 {
			return nil, fmt.Errorf("%w: %d rows of logits exceed a frame", errBadRequest, rows)
		}
	default:
		return nil, fmt.Errorf("%w: logits mode %d", errBadRequest, req.want)
	}
	seq := models.Seq{Pool: rk.pool, Table: req.table, Start: req.start, State: state}
	logits, err := fwd(seq)
	if err == nil && len(req.tokens) == 1 {
		rk.warm = true
	}
	rk.keepMarked(req.state, state)
	return logits, err
}

func (rk *rank) forward(req forwardReq) (msgType, []byte, []byte, error) {
	if _, marked := rk.marks[req.state]; !marked {
		if g, ok := rk.replay(req); ok {
			return rk.graphLogits(g)
		}
	}
	logits, err := rk.run(req)
	if err != nil {
		return 0, nil, nil, err
	}
	if rk.group.Rank != 0 {
		logits = nil // every rank has the full logits; rank 0 returns them
	}
	var e enc
	if rk.shm.fits(len(logits)) {
		ref := shmRef{count: len(logits)}
		buf, err := rk.shm.floats(ref, "logits")
		if err != nil {
			return 0, nil, nil, err
		}
		copy(buf, logits)
		e.ref(ref)
		return msgLogitsShared, e.b, nil, nil
	}
	e.f32sHeader(len(logits))
	return msgLogits, e.b, f32Bytes(logits), nil
}
