package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// Hello opens a rank: which model to load on which backend and device,
// and the KV pool to allocate right away (Blocks == 0: none yet).
type Hello struct {
	Version int
	Backend string         // "cpu", "cuda"
	Device  int            // GPU ordinal (ignored by the CPU backend)
	Threads int            // CPU backend goroutines (0: all cores)
	Name    string         // the model's name (for logs)
	Path    string         // checkpoint directory or .gguf file
	Demo    bool           // the built-in demo model instead of Path
	Pool    kernels.KVSpec // this rank's pool (its KV heads only)

	// Tensor parallelism: this process is rank Rank of World (World ≤ 1:
	// the whole model, no group). The ranks meet in Rendezvous, a private
	// directory the daemon made for this group (CPU ranks: rank 0's
	// socket; CUDA ranks: the NCCL unique id rank 0 writes). Joining must
	// finish within JoinTimeout, every collective within CollTimeout.
	Rank, World int
	Rendezvous  string
	JoinTimeout time.Duration
	CollTimeout time.Duration

	// Shared is the size of the shared-memory region the worker got as
	// fd 4 (0: none): bulk data may travel there instead of in frames.
	Shared int64
}

func (h *Hello) encode() []byte {
	var e enc
	e.u32(uint32(h.Version))
	e.str(h.Backend)
	e.i32(h.Device)
	e.i32(h.Threads)
	e.str(h.Name)
	e.str(h.Path)
	e.u8(b2u(h.Demo))
	e.spec(h.Pool)
	e.i32(h.Rank)
	e.i32(h.World)
	e.str(h.Rendezvous)
	e.u64(uint64(h.JoinTimeout))
	e.u64(uint64(h.CollTimeout))
	e.u64(uint64(h.Shared))
	return e.b
}

func decodeHello(p []byte) (Hello, error) {
	d := dec{b: p}
	h := Hello{Version: int(d.u32("version"))}
	if d.err == nil && h.Version != Version {
		// Nothing else is read: a different version may lay out the rest
		// differently.
		return h, fmt.Errorf("%w: protocol version %d, this worker speaks %d", errVersion, h.Version, Version)
	}
	h.Backend = d.str("backend")
	h.Device = d.i32("device")
	h.Threads = d.i32("threads")
	h.Name = d.str("name")
	h.Path = d.str("path")
	h.Demo = d.u8("demo") != 0
	h.Pool = d.spec("pool")
	h.Rank = d.i32("rank")
	h.World = d.i32("world")
	h.Rendezvous = d.str("rendezvous")
	h.JoinTimeout = time.Duration(d.u64("join timeout"))
	h.CollTimeout = time.Duration(d.u64("collective timeout"))
	h.Shared = int64(d.u64("shared"))
	return h, d.done("hello")
}

// Ready answers Hello once the model is loaded.
type Ready struct {
	Version     int
	Backend     string // the backend's own name, e.g. "cuda"
	Device      string // a description of the device, for logs
	Config      []byte // the model's hyper-parameters (models.Config as JSON)
	KV          kernels.KVSpec
	Recurrent   bool // the model keeps per-sequence recurrent state
	EOS         []int32
	WeightBytes int64
	Shared      bool // the worker mapped the shared-memory region
	// StateLen is the number of float32 values of a recurrent state's
	// snapshot (0 for attention-only models).
	StateLen int64
	// FreeBytes is the device memory left free once the weights are in,
	// before the KV pool (0: the backend has no memory of its own, e.g.
	// the CPU), so that the daemon can size a pool it was not given a
	// size for (Proxy.PoolRoom).
	FreeBytes int64
}

func (r *Ready) encode() []byte {
	var e enc
	e.u32(uint32(r.Version))
	e.str(r.Backend)
	e.str(r.Device)
	e.str(string(r.Config))
	e.spec(r.KV)
	e.u8(b2u(r.Recurrent))
	e.i32s(r.EOS)
	e.u64(uint64(r.WeightBytes))
	e.u8(b2u(r.Shared))
	e.u64(uint64(r.StateLen))
	e.u64(uint64(r.FreeBytes))
	return e.b
}

func decodeReady(p []byte) (Ready, error) {
	d := dec{b: p}
	r := Ready{Version: int(d.u32("version"))}
	if d.err == nil && r.Version != Version {
		return r, fmt.Errorf("%w: worker speaks protocol version %d, pocketd %d", errVersion, r.Version, Version)
	}
	r.Backend = d.str("backend")
	r.Device = d.str("device")
	r.Config = []byte(d.str("config"))
	r.KV = d.spec("kv")
	r.Recurrent = d.u8("recurrent") != 0
	r.EOS = d.i32s("eos")
	r.WeightBytes = int64(d.u64("weight bytes"))
	r.Shared = d.u8("shared") != 0
	r.StateLen = int64(d.u64("state length"))
	r.FreeBytes = int64(d.u64("free bytes"))
	if d.err == nil && (r.StateLen < 0 || r.StateLen > MaxFrame/4 || r.Recurrent != (r.StateLen > 0)) {
		d.err = fmt.Errorf("%w: recurrent %v with a state of %d values", ErrBadFrame, r.Recurrent, r.StateLen)
	}
	if d.err == nil && r.FreeBytes < 0 {
		d.err = fmt.Errorf("%w: %d free bytes", ErrBadFrame, r.FreeBytes)
	}
	return r, d.done("ready")
}

// forwardReq is a Forward request.
type forwardReq struct {
	start  int
	want   models.Logits
	tokens []int32
	table  []int32
	state  uint64 // the sequence's recurrent state (see state.go); 0: none
	// draw is a ForwardSample's rule and variates (nil for the others).
	draw *session.Draw
	// argmax marks a ForwardArgmax step (and one run ahead for it): only
	// its token is wanted, so a tensor-parallel model picks it from the
	// group's argmax pairs (models.Model.ForwardGreedy), eager or
	// replayed, on every rank alike. Not on the wire: the message type
	// says it.
	argmax bool
}

func (f *forwardReq) encode() []byte {
	var e enc
	e.u64(f.state)
	e.i32(f.start)
	e.u8(uint8(f.want))
	e.i32s(f.tokens)
	e.i32s(f.table)
	if d := f.draw; d != nil {
		e.f64(d.Temperature)
		e.i32(d.TopK)
		e.f64(d.TopP)
		e.f64(d.MinP)
		e.f64(d.U)
		e.f64(d.Next)
		encodeAdjust(&e, d.Adjust)
	}
	return e.b
}

// adjustEntrySize is an encoded session.AdjustEntry: id, flags, sub, bias.
const adjustEntrySize = 4 + 1 + 8 + 4

// encodeAdjust writes a draw's Adjust: its entry count (0: none), then
// the repetition factor and the entries, each written in place (a
// repetition penalty lists every distinct token of the prompt: thousands
// of entries a step, which field-by-field appends and reads took ~0.8 ms
// for).
func encodeAdjust(e *enc, a *session.Adjust) {
	if a == nil || len(a.Entries) == 0 {
		e.u32(0)
		return
	}
	e.u32(uint32(len(a.Entries)))
	e.f64(a.Repetition)
	at := len(e.b)
	e.b = slices.Grow(e.b, len(a.Entries)*adjustEntrySize)[:at+len(a.Entries)*adjustEntrySize]
	for i, x := range a.Entries {
		b := e.b[at+i*adjustEntrySize:]
		binary.LittleEndian.PutUint32(b, uint32(x.ID))
		b[4] = x.Flags
		binary.LittleEndian.PutUint64(b[5:], math.Float64bits(x.Sub))
		binary.LittleEndian.PutUint32(b[13:], math.Float32bits(x.Bias))
	}
}

func decodeAdjust(d *dec) *session.Adjust {
	n := d.count(adjustEntrySize, "adjust")
	if n == 0 {
		return nil
	}
	a := &session.Adjust{Repetition: d.f64("repetition")}
	raw := d.take(n*adjustEntrySize, "adjust entries")
	if raw == nil {
		return nil
	}
	a.Entries = make([]session.AdjustEntry, n)
	for i := range a.Entries {
		b := raw[i*adjustEntrySize:]
		a.Entries[i] = session.AdjustEntry{ID: int32(binary.LittleEndian.Uint32(b)), Flags: b[4],
			Sub: math.Float64frombits(binary.LittleEndian.Uint64(b[5:])), Bias: math.Float32frombits(binary.LittleEndian.Uint32(b[13:]))}
	}
	return a
}

func decodeForward(p []byte) (forwardReq, error) {
	d := dec{b: p}
	f := decodeForwardFields(&d)
	return f, d.done("forward")
}

func decodeForwardFields(d *dec) forwardReq {
	f := forwardReq{state: d.u64("state")}
	f.start, f.want = d.i32("start"), models.Logits(d.u8("want"))
	f.tokens = d.i32s("tokens")
	f.table = d.i32s("table")
	return f
}

// decodeForwardSample decodes a ForwardSample: a Forward's fields, then
// its Draw, checked.
func decodeForwardSample(p []byte) (forwardReq, error) {
	d := dec{b: p}
	f := decodeForwardFields(&d)
	dr := session.Draw{Temperature: d.f64("temperature"), TopK: d.i32("top-k"), TopP: d.f64("top-p"),
		MinP: d.f64("min-p"), U: d.f64("u"), Next: d.f64("next")}
	dr.Adjust = decodeAdjust(&d)
	if err := d.done("forward-sample"); err != nil {
		return f, err
	}
	if err := dr.Check(); err != nil {
		return f, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	f.draw = &dr
	return f, nil
}

// Error codes of Error frames.
const (
	codeInternal    = 1 // the request failed in the worker
	codeBadRequest  = 2 // the request does not make sense (bad block, bad spec)
	codeUnsupported = 3 // the backend cannot do it (kernels.ErrUnsupported)
	codeContext     = 4 // past the model's context (models.ErrContext)
	codeVersion     = 5 // protocol versions differ
	codeFatal       = 6 // the worker's device state is lost; it exits after this frame
)

var errVersion = errors.New("protocol version mismatch")

// RemoteError is an Error frame from a worker.
type RemoteError struct {
	Code    int
	Message string
}

func (e *RemoteError) Error() string { return "worker: " + e.Message }

// Unwrap maps codes to the sentinels callers branch on.
func (e *RemoteError) Unwrap() error {
	switch e.Code {
	case codeUnsupported:
		return kernels.ErrUnsupported
	case codeContext:
		return models.ErrContext
	case codeVersion:
		return errVersion
	}
	return nil
}

func encodeError(code int, msg string) []byte {
	var e enc
	e.u32(uint32(code))
	e.str(msg)
	return e.b
}

func decodeError(p []byte) (*RemoteError, error) {
	d := dec{b: p}
	r := &RemoteError{Code: int(d.u32("code")), Message: d.str("message")}
	return r, d.done("error")
}

// codeOf picks the Error code for an error the worker hit.
func codeOf(err error) int {
	switch {
	case errors.Is(err, kernels.ErrUnsupported):
		return codeUnsupported
	case errors.Is(err, models.ErrContext):
		return codeContext
	case errors.Is(err, errVersion):
		return codeVersion
	case errors.Is(err, errBadRequest), errors.Is(err, ErrBadFrame):
		return codeBadRequest
	}
	return codeInternal
}

var errBadRequest = errors.New("bad request")

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
