package worker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// fakeProxy is a Proxy whose "worker" is the other end of a socketpair,
// driven by the test (no process, no supervisor).
func fakeProxy(t testing.TB) (*Proxy, *kvPool, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "fake")
		if conns[i], err = net.FileConn(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	t.Cleanup(func() { conns[0].Close(); conns[1].Close() })
	spec := kernels.KVSpec{Layers: 1, Blocks: 4, BlockSize: 4, KVHeads: 1, HeadDimK: 2, HeadDimV: 2}
	p := &Proxy{opts: Options{Timeout: 2 * time.Second}, log: slog.New(slog.DiscardHandler),
		cfg: &models.Config{VocabSize: 8}, changed: make(chan struct{}), kvGen: 1}
	uc := conns[0].(*net.UnixConn)
	p.cur = &group{gen: 1, ranks: []*proc{{gen: 1, conn: uc, r: bufio.NewReader(uc), exited: make(chan struct{})}}, down: make(chan struct{})}
	p.gen = 1
	kp := &kvPool{p: p, spec: spec, rank: spec}
	p.pool = kp
	return p, kp, conns[1]
}

// answer reads one request on c and writes raw as the reply.
func answer(c net.Conn, raw []byte) {
	r := bufio.NewReader(c)
	if _, err := readFrame(r, MaxFrame); err != nil {
		return
	}
	c.Write(raw)
	c.Close()
}

func rawFrame(typ msgType, id uint32, payload []byte) []byte {
	var b bytes.Buffer
	writeFrame(&b, typ, id, payload, nil)
	return b.Bytes()
}

func logitsPayload(n int) []byte {
	var e enc
	e.f32sHeader(n)
	return append(e.b, make([]byte, 4*n)...)
}

// TestMalformedReplies: every kind of bad reply is an error (a lost
// worker, or the worker's error), never a panic, and a good one decodes.
func TestMalformedReplies(t *testing.T) {
	huge := make([]byte, headerSize)
	binary.LittleEndian.PutUint32(huge, MaxFrame+1)
	huge[4] = byte(msgLogits)
	binary.LittleEndian.PutUint32(huge[5:], 1)
	cases := []struct {
		name string
		raw  []byte
		lost bool // ErrWorkerLost (else a *RemoteError)
	}{
		{"empty", nil, true},
		{"short header", []byte{1, 2, 3}, true},
		{"truncated payload", rawFrame(msgLogits, 1, logitsPayload(8))[:20], true},
		{"huge length", huge, true},
		{"wrong id", rawFrame(msgLogits, 9, logitsPayload(8)), true},
		{"wrong type", rawFrame(msgBlock, 1, logitsPayload(8)), true},
		{"unknown type", rawFrame(200, 1, nil), true},
		{"wrong logits count", rawFrame(msgLogits, 1, logitsPayload(7)), true},
		{"count past payload", rawFrame(msgLogits, 1, logitsPayload(8)[:12]), true},
		{"trailing bytes", rawFrame(msgLogits, 1, append(logitsPayload(8), 0)), true},
		{"garbled error", rawFrame(msgError, 1, []byte{1, 0, 0, 0, 255, 255, 255, 255}), true},
		{"fatal error", rawFrame(msgError, 1, encodeError(codeFatal, "device lost")), true},
		{"error", rawFrame(msgError, 1, encodeError(codeBadRequest, "no")), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, kp, peer := fakeProxy(t)
			go answer(peer, c.raw)
			_, err := p.Forward(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1}, models.LastLogits)
			var re *RemoteError
			switch {
			case err == nil:
				t.Fatal("accepted")
			case c.lost && !(errors.Is(err, ErrWorkerLost) && errors.Is(err, session.ErrKVLost)):
				t.Fatalf("want a lost worker, got %v", err)
			case !c.lost && !errors.As(err, &re):
				t.Fatalf("want the worker's error, got %v", err)
			}
		})
	}
	p, kp, peer := fakeProxy(t)
	go answer(peer, rawFrame(msgLogits, 1, logitsPayload(8)))
	if l, err := p.Forward(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1}, models.LastLogits); err != nil || len(l) != 8 {
		t.Fatalf("good reply: %v %v", l, err)
	}
	// KV block ops have no error results: a bad reply zeroes the block.
	p, kp, peer = fakeProxy(t)
	go answer(peer, rawFrame(msgBlock, 1, logitsPayload(3)))
	dst := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	p.ReadKVBlock(kp, 0, dst)
	for _, v := range dst {
		if v != 0 {
			t.Fatalf("bad block reply left %v", dst)
		}
	}
	// A silent worker times out.
	p, kp, _ = fakeProxy(t)
	p.opts.Timeout = 100 * time.Millisecond
	if _, err := p.Forward(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1}, models.LastLogits); !errors.Is(err, ErrWorkerLost) {
		t.Fatalf("silent worker: %v", err)
	}
}

// FuzzProxyReply: whatever a worker answers to a Forward, the proxy
// returns logits of the right size or an error.
func FuzzProxyReply(f *testing.F) {
	f.Add(rawFrame(msgLogits, 1, logitsPayload(8)))
	f.Add(rawFrame(msgError, 1, encodeError(codeInternal, "x")))
	f.Add(rawFrame(msgLogits, 1, logitsPayload(8))[:30])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, kp, peer := fakeProxy(t)
		p.opts.Timeout = 200 * time.Millisecond
		go answer(peer, raw)
		l, err := p.Forward(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1, 2}, models.LastLogits)
		if err == nil && len(l) != 8 {
			t.Fatalf("%d logits accepted", len(l))
		}
	})
}

// FuzzRankRequests: whatever frames follow the handshake, the rank side
// answers or stops reading; it never panics (a panic would surface as
// ErrDeviceLost).
func FuzzRankRequests(f *testing.F) {
	var e enc
	e.spec(kernels.KVSpec{Layers: 1, Blocks: 2, BlockSize: 4, KVHeads: 1, HeadDimK: 1})
	f.Add(rawFrame(msgNewKVPool, 1, e.b))
	fw := forwardReq{start: 0, want: models.AllLogits, tokens: []int32{1, 2, 3}, table: []int32{0}}
	f.Add(rawFrame(msgForward, 2, fw.encode()))
	fw = forwardReq{start: -5, want: 7, tokens: []int32{-1}, table: []int32{1 << 30}}
	f.Add(rawFrame(msgForward, 2, fw.encode()))
	f.Add(rawFrame(msgCopyBlock, 3, []byte{0, 0, 0, 0, 9, 0, 0, 0}))
	f.Add(rawFrame(msgWriteBlock, 3, []byte{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}))
	f.Add(rawFrame(msgHello, 1, nil))
	// State requests to a model without recurrent layers are refused.
	f.Add(rawFrame(msgNewState, 4, encodeStateID(1)))
	fw = forwardReq{state: 3, start: 0, want: models.LastLogits, tokens: []int32{1}, table: []int32{0}}
	f.Add(rawFrame(msgForward, 5, fw.encode()))
	// Sampled steps, a good draw and one no session makes.
	fw = forwardReq{start: 0, want: models.LastLogits, tokens: []int32{1}, table: []int32{0},
		draw: &session.Draw{Temperature: 0.7, TopK: 5, TopP: 0.9, U: 0.25, Next: 0.5}}
	f.Add(append(rawFrame(msgNewKVPool, 1, e.b), rawFrame(msgForwardSample, 6, fw.encode())...))
	fw.draw = &session.Draw{Temperature: -1, TopP: 2, U: 7}
	f.Add(rawFrame(msgForwardSample, 7, fw.encode()))
	// A penalised, biased draw (session.Adjust), one id past any vocabulary.
	fw.draw = &session.Draw{Temperature: 0.8, U: 0.5, Adjust: &session.Adjust{Repetition: 1.1, Entries: []session.AdjustEntry{
		{ID: 1, Flags: session.AdjustRepeat | session.AdjustSub, Sub: 0.5}, {ID: 1 << 30, Flags: session.AdjustBias, Bias: 4}}}}
	f.Add(append(rawFrame(msgNewKVPool, 1, e.b), rawFrame(msgForwardSample, 8, fw.encode())...))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h := Hello{Version: Version, Backend: "cpu", Threads: 1, Path: fixture("qwen3"),
			Pool: kernels.KVSpec{Layers: 0}}
		in := append(rawFrame(msgHello, 0, h.encode()), raw...)
		rw := &rwPair{r: bytes.NewReader(in), w: io.Discard}
		err := ServeRank(rw, RankOptions{Backend: "cpu", NewBackend: func(_, th, _ int) (kernels.Backend, error) { return cpu.New(th), nil }})
		if errors.Is(err, ErrDeviceLost) {
			t.Fatalf("rank panicked: %v", err)
		}
	})
}

type rwPair struct {
	r io.Reader
	w io.Writer
}

func (p *rwPair) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *rwPair) Write(b []byte) (int, error) { return p.w.Write(b) }

// hybridFake is fakeProxy serving a hybrid model whose states hold n
// values, and a state that lives in its worker under id 7.
func hybridFake(t testing.TB, n int) (*Proxy, *remoteState, net.Conn) {
	p, _, peer := fakeProxy(t)
	p.ready.Recurrent, p.ready.StateLen = true, int64(n)
	s := p.newRemoteState()
	*s.slot = stateSlot{id: 7, gen: 1}
	s.pos = 16
	p.states.next = 7
	return p, s, peer
}

// TestMalformedStateReplies: a snapshot reply of the wrong size, type or
// shape loses the worker and yields no snapshot; a good one decodes; a
// failed restore or clone leaves a state no Forward accepts.
func TestMalformedStateReplies(t *testing.T) {
	for name, raw := range map[string][]byte{
		"short":      rawFrame(msgBlock, 1, logitsPayload(3)),
		"long":       rawFrame(msgBlock, 1, logitsPayload(5)),
		"wrong type": rawFrame(msgLogits, 1, logitsPayload(4)),
		"no shm":     rawFrame(msgBlockShared, 1, []byte{0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}),
		"error":      rawFrame(msgError, 1, encodeError(codeBadRequest, "no")),
		"trailing":   rawFrame(msgBlock, 1, append(logitsPayload(4), 1)),
	} {
		t.Run(name, func(t *testing.T) {
			p, s, peer := hybridFake(t, 4)
			go answer(peer, raw)
			if got := s.Snapshot(); got != nil {
				t.Fatalf("snapshot %v accepted", got)
			}
			if name != "error" && p.Health() == nil {
				t.Fatal("worker kept after a malformed reply")
			}
		})
	}
	_, s, peer := hybridFake(t, 4)
	go answer(peer, rawFrame(msgBlock, 1, logitsPayload(4)))
	if got := s.Snapshot(); len(got) != 4 {
		t.Fatalf("good snapshot reply: %v", got)
	}
	_, s, peer = hybridFake(t, 4)
	go answer(peer, rawFrame(msgError, 1, encodeError(codeBadRequest, "no")))
	if err := s.Restore(make([]float32, 4), 16); err == nil || s.Pos() != -1 {
		t.Fatalf("failed restore: %v, pos %d", err, s.Pos())
	}
	if err := s.Restore(make([]float32, 3), 16); !errors.Is(err, models.ErrState) {
		t.Fatalf("restore of the wrong length: %v", err)
	}
	_, s, peer = hybridFake(t, 4)
	go answer(peer, rawFrame(msgError, 1, encodeError(codeBadRequest, "no")))
	if c := s.Clone(); c.Pos() != -1 || s.Pos() != 16 {
		t.Fatalf("failed clone: clone at %d, source at %d", c.Pos(), s.Pos())
	}
}

// FuzzProxyStateReply: whatever a worker answers to a snapshot, the
// proxy returns the state's values or nil.
func FuzzProxyStateReply(f *testing.F) {
	f.Add(rawFrame(msgBlock, 1, logitsPayload(4)))
	f.Add(rawFrame(msgBlockShared, 1, []byte{0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}))
	f.Add(rawFrame(msgError, 1, encodeError(codeInternal, "x")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, s, peer := hybridFake(t, 4)
		s.p.opts.Timeout = 200 * time.Millisecond
		go answer(peer, raw)
		if got := s.Snapshot(); got != nil && len(got) != 4 {
			t.Fatalf("%d values accepted", len(got))
		}
	})
}

// TestHoldReplies: a hold is kept only on a one-byte yes; a no or an
// error reply gives ErrNotHeld or the error, and the worker is kept; a
// malformed reply loses it. A held snapshot restores only into a state of
// its own proxy.
func TestHoldReplies(t *testing.T) {
	for name, c := range map[string]struct {
		raw        []byte
		held, lost bool
	}{
		"held":       {rawFrame(msgOK, 1, []byte{1}), true, false},
		"declined":   {rawFrame(msgOK, 1, []byte{0}), false, false},
		"empty":      {rawFrame(msgOK, 1, nil), false, false},
		"error":      {rawFrame(msgError, 1, encodeError(codeBadRequest, "no")), false, false},
		"wrong type": {rawFrame(msgBlock, 1, logitsPayload(4)), false, true},
	} {
		t.Run(name, func(t *testing.T) {
			p, s, peer := hybridFake(t, 4)
			go answer(peer, c.raw)
			h, err := s.Hold()
			if (h != nil) != c.held || (err == nil) != c.held {
				t.Fatalf("hold: %v, %v", h, err)
			}
			if name == "declined" && !errors.Is(err, ErrNotHeld) {
				t.Fatalf("declined hold: %v, want ErrNotHeld", err)
			}
			if lost := p.Health() != nil; lost != c.lost {
				t.Fatalf("worker lost %v after a %s reply", lost, name)
			}
			if h != nil {
				if h.Pos() != s.pos || h.Bytes() != 16 {
					t.Fatalf("held at %d, %d bytes", h.Pos(), h.Bytes())
				}
				_, other, _ := hybridFake(t, 4)
				if err := other.RestoreHeld(h); !errors.Is(err, models.ErrState) {
					t.Fatalf("restore into another proxy's state: %v", err)
				}
				h.Release()
				if err := s.RestoreHeld(h); !errors.Is(err, models.ErrState) {
					t.Fatalf("restore of a released snapshot: %v", err)
				}
			}
		})
	}
}

// FuzzRankStateRequests: whatever state requests a rank of a hybrid model
// gets, it answers or stops reading; it never panics.
func FuzzRankStateRequests(f *testing.F) {
	frames := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	id1, id2 := encodeStateID(1), encodeStateID(2)
	restore := restoreHeader(1, 16)
	restore.f32sHeader(2)
	restore.b = append(restore.b, 0, 0, 0, 0, 0, 0, 0, 0)
	shared := restoreHeader(1, 0)
	shared.ref(shmRef{count: 4})
	fw := forwardReq{state: 1, start: 0, want: models.LastLogits, tokens: []int32{1, 2}, table: []int32{0}}
	f.Add(frames(rawFrame(msgNewState, 1, id1), rawFrame(msgSnapshotState, 2, id1), rawFrame(msgCloneState, 3, encodeClone(1, 2)),
		rawFrame(msgResetState, 4, id2), rawFrame(msgFreeStates, 5, encodeFreeStates([]uint64{1, 2, 9}))))
	f.Add(frames(rawFrame(msgNewState, 1, id1), rawFrame(msgNewState, 2, id1), rawFrame(msgRestoreState, 3, restore.b),
		rawFrame(msgRestoreStateShared, 4, shared.b), rawFrame(msgForward, 5, fw.encode())))
	f.Add(frames(rawFrame(msgCloneState, 1, encodeClone(5, 0)), rawFrame(msgSnapshotState, 2, encodeStateID(0)),
		rawFrame(msgFreeStates, 3, []byte{255, 255, 255, 255})))
	// Held snapshots: hold, copy back, copy between unknown or equal ids,
	// a hold onto an id in use, a truncated hold.
	f.Add(frames(rawFrame(msgNewState, 1, id1), rawFrame(msgHoldState, 2, encodeHold(1, 2, 1<<30)),
		rawFrame(msgCopyState, 3, encodeClone(2, 1)), rawFrame(msgCopyState, 4, encodeClone(1, 1)),
		rawFrame(msgCopyState, 5, encodeClone(7, 1)), rawFrame(msgHoldState, 6, encodeHold(1, 2, -1)),
		rawFrame(msgHoldState, 7, encodeClone(1, 3))))
	// Marks: a marked forward, marks of an unknown state, ids in use or
	// repeated, marks out of order or behind the state, a forget, a
	// MarkedLogits forward without marks, truncated counts.
	mark := markReq{src: 1, reserve: 1 << 20, pos: []int{1}, dst: []uint64{5}}
	marked := forwardReq{state: 1, start: 0, want: models.MarkedLogits, tokens: []int32{1, 2, 3}, table: []int32{0}}
	bad := []markReq{{src: 9, pos: []int{1}, dst: []uint64{5}}, {src: 1, pos: []int{1, 2}, dst: []uint64{1, 6}},
		{src: 1, pos: []int{1, 2}, dst: []uint64{6, 6}}, {src: 1, pos: []int{2, 1}, dst: []uint64{6, 7}},
		{src: 1, pos: []int{0}, dst: []uint64{6}}, {src: 1}}
	seeds := [][]byte{rawFrame(msgNewState, 1, id1), rawFrame(msgMarkState, 2, mark.encode()),
		rawFrame(msgForward, 3, marked.encode()), rawFrame(msgCopyState, 4, encodeClone(5, 1))}
	for i, m := range bad {
		seeds = append(seeds, rawFrame(msgMarkState, uint32(5+i), m.encode()))
	}
	seeds = append(seeds, rawFrame(msgForward, 20, marked.encode()), rawFrame(msgMarkState, 21, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255}))
	f.Add(frames(seeds...))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h := Hello{Version: Version, Backend: "cpu", Threads: 1, Path: fixture("qwen3_5")}
		in := append(rawFrame(msgHello, 0, h.encode()), raw...)
		rw := &rwPair{r: bytes.NewReader(in), w: io.Discard}
		err := ServeRank(rw, RankOptions{Backend: "cpu", NewBackend: func(_, th, _ int) (kernels.Backend, error) { return cpu.New(th), nil }})
		if errors.Is(err, ErrDeviceLost) {
			t.Fatalf("rank panicked: %v", err)
		}
	})
}
