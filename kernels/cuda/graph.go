//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// A decode step is launched as one CUDA graph: BeginCapture, one ordinary
// Model.Forward of a single token, EndCapture. During capture the host
// arrays that ops upload (token ids, positions, slots, the block table,
// the attention start) go to fixed places in a device arena instead of the
// stream; Graph.Launch rewrites the dynamic ones for the next step with one
// copy and replays the graph. A Read during capture is not performed but
// remembered as the step's output (the logits); a step that needs device
// data on the host mid-way (MoE routing on the host, for expert formats
// without kernels.MoEOps) cannot be captured.
//
// A step that feeds itself (CaptureFeed) ends with its greedy token
// written into its own token-id input, so the next replay (Step.Fed)
// needs nothing from the host but the position: the host queues replays
// back to back and reads their tokens from a ring when it syncs, and the
// device never waits on the host between tokens (the sync, the token's
// copy back, the argmax's and the next replay's launches).
//
// A Graph refers to the activation buffers the captured Forward used: it
// stays valid while the model's scratch buffers do (no pass with more rows
// than were seen before the capture, no new model).

const arenaWords = 1 << 18

type entry struct{ kind, off, n int }

type capture struct {
	arena   cu.DevicePtr
	host    []uint32
	entries []entry
	last    [numKinds]int
	out     kernels.Buf
	outN    int
	reads   int
	fedOff  int // the token id's word in the arena, where CaptureFeed recorded the feed; else -1
	err     error
}

// feedRing is how many fed tokens the ring holds (a power of two): the
// host reads them at least this often.
const feedRing = 1024

func (c *capture) put(b *Backend, kind int, v []uint32) cu.DevicePtr {
	if i := c.last[kind]; i >= 0 {
		e := c.entries[i]
		if slices.Equal(c.host[e.off:e.off+e.n], v) {
			return c.arena + cu.DevicePtr(e.off*4)
		}
	}
	off := (len(c.host) + 63) &^ 63 // 256-byte aligned
	if off+len(v) > arenaWords {
		c.err = fmt.Errorf("cuda: capture arena full (%d words)", arenaWords)
		return c.arena
	}
	c.host = append(c.host, make([]uint32, off-len(c.host))...)
	c.host = append(c.host, v...)
	c.last[kind] = len(c.entries)
	c.entries = append(c.entries, entry{kind, off, len(v)})
	return c.arena + cu.DevicePtr(off*4)
}

// BeginCapture starts recording the ops that follow into a graph.
func (b *Backend) BeginCapture() error {
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	if b.cap != nil {
		return errors.New("cuda: capture already in progress")
	}
	arena := b.alloc(arenaWords * 4)
	if b.err != nil {
		return b.err
	}
	if b.feed == 0 {
		// Before the capture: a memset then would be recorded.
		b.feed = b.alloc((1 + feedRing) * 4)
		if b.err == nil {
			b.fail(cu.MemsetD32Async(b.feed, 0, 1+feedRing, b.stream))
		}
	}
	b.argmaxScratch()
	b.fail(b.stream.Synchronize())
	if b.err != nil {
		return b.err
	}
	c := &capture{arena: arena, fedOff: -1}
	for i := range c.last {
		c.last[i] = -1
	}
	if err := beginCapture(b.s); err != nil {
		return err
	}
	b.cap = c
	return nil
}

// CaptureFeed records, after the step's Forward and before EndCapture,
// the step's greedy token written into its own token-id input and
// appended to the feed ring (FeedTokens). It fails, recording nothing,
// where the step did not read its logits once or does not embed exactly
// one token id through the arena.
func (b *Backend) CaptureFeed() error {
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	c := b.cap
	switch {
	case c == nil:
		return errors.New("cuda: CaptureFeed outside a capture")
	case c.reads != 1:
		return fmt.Errorf("cuda: a fed step must read its logits once (%d reads)", c.reads)
	case c.fedOff >= 0:
		return errors.New("cuda: CaptureFeed twice in one capture")
	}
	off := -1
	for _, e := range c.entries {
		if e.kind != kIDs {
			continue
		}
		if off >= 0 || e.n != 1 {
			return fmt.Errorf("cuda: a fed step must embed one token id: %w", kernels.ErrUnsupported)
		}
		off = e.off
	}
	if off < 0 {
		return fmt.Errorf("cuda: the step embeds no token id from the arena: %w", kernels.ErrUnsupported)
	}
	b.argmax(c.arena+cu.DevicePtr(off*4), b.feed, dptr(c.out), c.outN, true)
	c.fedOff = off
	return b.err
}

// FeedTokens waits for the queued work and returns how many tokens fed
// steps have appended to the ring so far (all graphs of the backend
// together, from zero) and the ring: token k is ring[k % len(ring)] for the
// last len(ring) of them.
func (b *Backend) FeedTokens() (count int, ring []int32, err error) {
	if !b.enter() {
		b.exit()
		return 0, nil, b.err
	}
	defer b.exit()
	if b.feed == 0 {
		return 0, nil, nil
	}
	buf := make([]int32, 1+feedRing)
	b.fail(cu.MemcpyDtoHAsync(unsafe.Pointer(&buf[0]), b.feed, int64(len(buf))*4, b.stream))
	b.fail(b.stream.Synchronize())
	return int(uint32(buf[0])), buf[1:], b.err
}

// EndCapture finishes the recording and instantiates the graph.
func (b *Backend) EndCapture() (*Graph, error) {
	if !b.enter() {
		b.exit()
		return nil, b.err
	}
	defer b.exit()
	c := b.cap
	if c == nil {
		return nil, errors.New("cuda: no capture in progress")
	}
	b.cap = nil
	exec, err := endCapture(b.s)
	if err != nil {
		return nil, err
	}
	switch {
	case c.err != nil:
		graphDestroy(exec)
		return nil, c.err
	case c.reads != 1:
		graphDestroy(exec)
		return nil, fmt.Errorf("cuda: captured step reads device data %d times (host logic inside the step, e.g. MoE routing): %w", c.reads, kernels.ErrUnsupported)
	}
	g := &Graph{b: b, exec: exec, arena: c.arena, host: c.host, entries: c.entries, fedOff: c.fedOff, Out: c.out, OutLen: c.outN}
	if len(g.host) > 0 {
		b.fail(cu.MemcpyHtoD(g.arena, unsafe.Pointer(&g.host[0]), int64(len(g.host))*4))
	}
	return g, b.err
}

// Graph is a captured decode step.
type Graph struct {
	b       *Backend
	exec    cGraph
	arena   cu.DevicePtr
	host    []uint32
	entries []entry
	fedOff  int // see capture.fedOff
	// Out and OutLen are the buffer and length the captured step read
	// (the logits).
	Out    kernels.Buf
	OutLen int
}

// Step holds the per-step inputs of a captured single-token decode step.
type Step struct {
	ID    int32
	Pos   int32
	Slot  int32
	Table []int32 // same length as at capture
	// Fed: the token is the one the previous replay of a fed graph
	// (CaptureFeed) wrote; ID is ignored.
	Fed bool
}

// Launch writes the step's inputs and replays the graph (asynchronously:
// read Out, or call Argmax, to wait for it).
func (g *Graph) Launch(s Step) error {
	b := g.b
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	for _, e := range g.entries {
		dst := g.host[e.off : e.off+e.n]
		switch e.kind {
		case kIDs:
			dst[0] = uint32(s.ID)
		case kPos, kStart:
			dst[0] = uint32(s.Pos)
		case kSlots:
			dst[0] = uint32(s.Slot)
		case kTable:
			if len(s.Table) != e.n {
				return fmt.Errorf("cuda: graph launch with a %d-block table, captured with %d", len(s.Table), e.n)
			}
			copy(dst, words(s.Table))
		}
	}
	if s.Fed {
		if g.fedOff < 0 {
			return errors.New("cuda: a fed launch of a graph recorded without CaptureFeed")
		}
		// Everything but the token id, which the previous replay wrote.
		g.upload(0, g.fedOff)
		g.upload(g.fedOff+1, len(g.host))
	} else {
		g.upload(0, len(g.host))
	}
	b.fail(graphLaunch(g.exec, b.s))
	return b.err
}

// upload queues the copy of the arena's words [from, to).
func (g *Graph) upload(from, to int) {
	if to > from {
		g.b.fail(cu.MemcpyHtoDAsync(g.arena+cu.DevicePtr(from*4), unsafe.Pointer(&g.host[from]), int64(to-from)*4, g.b.stream))
	}
}

// Close frees the graph.
func (g *Graph) Close() {
	if g.b.enter() {
		graphDestroy(g.exec)
		g.b.poolMu.Lock()
		g.b.free[arenaWords*4] = append(g.b.free[arenaWords*4], g.arena)
		g.b.poolMu.Unlock()
	}
	g.b.exit()
}
