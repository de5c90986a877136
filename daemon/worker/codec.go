package worker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

// Version is the protocol version both sides must speak.
const Version = 8

// msgType is a frame's message type.
type msgType uint8

const (
	msgHello msgType = 1 + iota
	msgReady
	msgNewKVPool
	msgForward
	msgCopyBlock
	msgReadBlock
	msgWriteBlock
	msgPing
	msgOK
	msgLogits
	msgBlock
	msgError
	msgForwardArgmax
	msgToken
	msgWriteBlockShared
	msgBlockShared
	msgLogitsShared
	msgNewState
	msgFreeStates
	msgSnapshotState
	msgRestoreState
	msgRestoreStateShared
	msgCloneState
	msgResetState
	msgHoldState
	msgCopyState
	msgMarkState
	msgForwardSample
)

func (t msgType) String() string {
	names := [...]string{"?", "hello", "ready", "new-kv-pool", "forward", "copy-block", "read-block",
		"write-block", "ping", "ok", "logits", "block", "error", "forward-argmax", "token",
		"write-block-shared", "block-shared", "logits-shared", "new-state", "free-states", "snapshot-state",
		"restore-state", "restore-state-shared", "clone-state", "reset-state", "hold-state", "copy-state", "mark-state",
		"forward-sample"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("type %d", uint8(t))
}

const (
	headerSize = 9
	// MaxFrame bounds a frame's payload (1 GiB): a reader never allocates
	// more on the word of a length field.
	MaxFrame = 1 << 30
)

// ErrBadFrame is wrapped by errors about frames that do not decode.
var ErrBadFrame = errors.New("malformed frame")

// frame is one decoded message.
type frame struct {
	typ     msgType
	id      uint32
	payload []byte
}

// writeFrame writes one frame; extra, when non-nil, is appended to the
// payload without copying it (bulk float32 data).
func writeFrame(w io.Writer, typ msgType, id uint32, payload, extra []byte) error {
	n := len(payload) + len(extra)
	if n > MaxFrame {
		return fmt.Errorf("%s frame of %d bytes exceeds %d", typ, n, MaxFrame)
	}
	buf := make([]byte, headerSize, headerSize+len(payload))
	binary.LittleEndian.PutUint32(buf[0:], uint32(n))
	buf[4] = byte(typ)
	binary.LittleEndian.PutUint32(buf[5:], id)
	buf = append(buf, payload...)
	if len(extra) == 0 {
		_, err := w.Write(buf)
		return err
	}
	bufs := [][]byte{buf, extra}
	for _, b := range bufs {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// readFrame reads one frame whose payload is at most limit bytes.
func readFrame(r *bufio.Reader, limit int) (frame, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.LittleEndian.Uint32(h[0:])
	f := frame{typ: msgType(h[4]), id: binary.LittleEndian.Uint32(h[5:])}
	if int64(n) > int64(min(limit, MaxFrame)) {
		return frame{}, fmt.Errorf("%w: %s frame of %d bytes (limit %d)", ErrBadFrame, f.typ, n, limit)
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return f, nil
}

// enc builds a payload.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) i32(v int) {
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(int32(v)))
}
func (e *enc) u64(v uint64)  { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) f64(v float64) { e.u64(math.Float64bits(v)) }
func (e *enc) str(s string)  { e.u32(uint32(len(s))); e.b = append(e.b, s...) }
func (e *enc) i32s(v []int32) {
	e.u32(uint32(len(v)))
	for _, x := range v {
		e.b = binary.LittleEndian.AppendUint32(e.b, uint32(x))
	}
}

// f32sHeader writes the count of a float32 array whose bytes follow as
// the frame's extra (see f32Bytes).
func (e *enc) f32sHeader(n int) { e.u32(uint32(n)) }

func (e *enc) spec(s kernels.KVSpec) {
	half := 0
	if s.Half {
		half = 1
	}
	for _, v := range []int{s.Layers, s.Blocks, s.BlockSize, s.KVHeads, s.HeadDimK, s.HeadDimV, half} {
		e.i32(v)
	}
}

// f32Bytes views a float32 slice as its little-endian bytes (the only byte
// order pocketd runs on: amd64, arm64).
func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
}

// dec reads a payload; the first error sticks and later reads return zero.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: short or bad %s", ErrBadFrame, what)
	}
}

func (d *dec) take(n int, what string) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.fail(what)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8(what string) uint8 {
	if b := d.take(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (d *dec) u32(what string) uint32 {
	if b := d.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *dec) i32(what string) int { return int(int32(d.u32(what))) }

func (d *dec) u64(what string) uint64 {
	if b := d.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// count reads an array length and checks that size-byte elements fit.
func (d *dec) f64(what string) float64 { return math.Float64frombits(d.u64(what)) }

func (d *dec) count(size int, what string) int {
	n := d.u32(what)
	if d.err == nil && uint64(n)*uint64(size) > uint64(len(d.b)) {
		d.fail(what)
		return 0
	}
	return int(n)
}

func (d *dec) str(what string) string {
	n := d.count(1, what)
	return string(d.take(n, what))
}

func (d *dec) i32s(what string) []int32 {
	n := d.count(4, what)
	b := d.take(n*4, what)
	if b == nil {
		return nil
	}
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return out
}

func (d *dec) f32s(what string) []float32 {
	n := d.count(4, what)
	b := d.take(n*4, what)
	if b == nil {
		return nil
	}
	out := make([]float32, n)
	copy(f32Bytes(out), b)
	return out
}

func (d *dec) spec(what string) kernels.KVSpec {
	var v [7]int
	for i := range v {
		v[i] = d.i32(what)
	}
	return kernels.KVSpec{Layers: v[0], Blocks: v[1], BlockSize: v[2], KVHeads: v[3], HeadDimK: v[4], HeadDimV: v[5],
		Half: v[6] != 0}
}

// done checks that the payload was consumed exactly.
func (d *dec) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes in %s", ErrBadFrame, len(d.b), what)
	}
	return d.err
}

// validSpec reports whether a KV spec is sane enough to allocate.
func validSpec(s kernels.KVSpec) error {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV < 0 {
		return fmt.Errorf("bad KV pool spec %+v", s)
	}
	if s.BytesPerBlock() > MaxFrame/2 || s.BytesPerBlock()*int64(s.Blocks) > math.MaxInt64/2 {
		return fmt.Errorf("KV pool spec %+v too large", s)
	}
	return nil
}
