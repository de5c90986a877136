package worker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/demo"
)

// RankOptions configure ServeRank.
type RankOptions struct {
	// Backend is the backend this process runs ("cpu", "cuda"); a Hello
	// asking for another is refused.
	Backend string
	// Device is the GPU ordinal the process was started for.
	Device int
	// NewBackend makes the backend once the Hello has arrived.
	NewBackend func(device, threads int) (kernels.Backend, error)
	Logger     *slog.Logger
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
	start := time.Now()
	be, err := rk.opts.NewBackend(h.Device, h.Threads)
	if err != nil {
		return nil, fmt.Errorf("backend %s device %d: %w", h.Backend, h.Device, err)
	}
	var ck *checkpoint.Checkpoint
	if h.Demo {
		ck, err = demo.Open()
	} else {
		ck, err = checkpoint.Open(h.Path)
	}
	if err != nil {
		return nil, err
	}
	if h.Name != "" {
		ck.Name = h.Name
	}
	m, err := ck.Model(be)
	if err != nil {
		ck.Close()
		return nil, err
	}
	rk.model, rk.be = m, be
	cfg, err := json.Marshal(m.Config)
	if err != nil {
		ck.Close()
		return nil, err
	}
	if h.Pool.Blocks > 0 {
		if err := rk.newPool(h.Pool); err != nil {
			ck.Close()
			return nil, err
		}
	}
	dev := be.Name()
	if d, ok := be.(interface{ DeviceName() string }); ok {
		dev = d.DeviceName()
	}
	r := Ready{Version: Version, Backend: be.Name(), Device: dev, Config: cfg, KV: m.KVSpec(0, 0),
		Recurrent: m.NewState() != nil, EOS: ck.EOS(), WeightBytes: m.WeightBytes()}
	if err := writeFrame(rk.w, msgReady, f.id, r.encode(), nil); err != nil {
		ck.Close()
		return nil, err
	}
	rk.log.Info("rank ready", "model", ck.Name, "backend", be.Name(), "device", dev, "took", time.Since(start).Round(time.Millisecond))
	return func() { ck.Close() }, nil
}

func (rk *rank) newPool(spec kernels.KVSpec) error {
	if err := validSpec(spec); err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if want := rk.model.KVSpec(spec.Blocks, spec.BlockSize); want != spec {
		return fmt.Errorf("%w: KV pool spec %+v does not fit the model (%+v)", errBadRequest, spec, want)
	}
	p, err := rk.be.NewKVPool(spec)
	if err != nil {
		return err
	}
	rk.pool, rk.spec = p, spec
	return nil
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
	if e, ok := rk.be.(interface{ Err() error }); ok {
		if derr := e.Err(); derr != nil {
			err = fmt.Errorf("%w: %s: %w", ErrDeviceLost, f.typ, derr)
			rk.log.Error("rank failed", "err", err)
			writeFrame(rk.w, msgError, f.id, encodeError(codeFatal, err.Error()), nil)
			return err
		}
	}
	if reqErr != nil {
		return rk.replyErr(f.id, reqErr)
	}
	return writeFrame(rk.w, typ, f.id, payload, extra)
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
		buf := make([]float32, rk.spec.BytesPerBlock()/4)
		rk.be.ReadKVBlock(rk.pool, b, buf)
		var e enc
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
	}
	return 0, nil, nil, fmt.Errorf("%w: unexpected %s request", errBadRequest, f.typ)
}

func (rk *rank) forward(req forwardReq) (msgType, []byte, []byte, error) {
	if rk.model.NewState() != nil {
		return 0, nil, nil, fmt.Errorf("%w: %w", kernels.ErrUnsupported, ErrRecurrent)
	}
	if req.start < 0 {
		return 0, nil, nil, fmt.Errorf("%w: negative start %d", errBadRequest, req.start)
	}
	vocab := rk.model.Config.VocabSize
	switch req.want {
	case models.LastLogits, models.NoLogits:
	case models.AllLogits:
		if int64(len(req.tokens))*int64(vocab)*4 > MaxFrame-64 {
			return 0, nil, nil, fmt.Errorf("%w: %d rows of logits exceed a frame", errBadRequest, len(req.tokens))
		}
	default:
		return 0, nil, nil, fmt.Errorf("%w: logits mode %d", errBadRequest, req.want)
	}
	seq := models.Seq{Pool: rk.pool, Table: req.table, Start: req.start}
	logits, err := rk.model.Forward(seq, req.tokens, req.want)
	if err != nil {
		return 0, nil, nil, err
	}
	var e enc
	e.f32sHeader(len(logits))
	return msgLogits, e.b, f32Bytes(logits), nil
}
