//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
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
// A step that feeds itself (CaptureFeed; CaptureFeedDraw for a sampled
// step) ends with its greedy (or drawn) token written into its own
// token-id input, so the next replay (Step.Fed)
// needs nothing from the host but its position (the arena's upload,
// queued behind the replay before it): the host queues replays back to
// back and reads their tokens from a ring when it needs them, and the
// device no longer waits between tokens for the host's sync, the token's
// copy back and the next replay's launch.
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
	fedOff  int  // the token id's word in the arena, where CaptureFeed recorded the feed; else -1
	drawn   bool // the feed is a draw by the arena's rule (CaptureFeedDraw), not the argmax
	// pairs is the group's size where the step ends in a distributed
	// argmax's pairs (ArgmaxPair; its output is them, not logits), of a
	// vocabulary of pairVocab tokens; 0 otherwise.
	pairs, pairVocab int
	sides            int // delta rule state updates forked to the side stream (delta_side.go)
	// sideNext is the latest layer's side update, launched at the next
	// layer's delta rule or at the join.
	sideNext sideUpdate
	err      error
}

// The fed steps' tokens: every replay of a fed graph is a ticket, the
// count of such replays before it; its argmax writes the token to
// host[ticket % feedRingLen] (page-locked host memory the kernel writes
// directly, so no copy is queued between replays) and an event recorded
// after the replay says when it is there.
const (
	feedRingLen = 1024 // a power of two
	feedEvents  = 4    // replays whose own completion can be waited for
)

type feedRing struct {
	host    []int32
	dev     cu.DevicePtr
	events  [feedEvents]cu.Event
	tickets uint64 // fed replays launched so far
	last    *Graph // the fed graph replayed last
	err     error  // why there is no ring (feeding unsupported)
}

// ready allocates the ring and its events on first use. Context current,
// not capturing.
func (f *feedRing) ready() error {
	if f.host != nil || f.err != nil {
		return f.err
	}
	host, dev, err := mappedInts(feedRingLen)
	if err != nil {
		f.err = fmt.Errorf("cuda: fed steps: %w: %w", err, kernels.ErrUnsupported)
		return f.err
	}
	for i := range f.events {
		if f.events[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
			f.err = fmt.Errorf("cuda: fed steps: event: %w: %w", err, kernels.ErrUnsupported)
			return f.err
		}
	}
	f.host, f.dev = host, dev
	return nil
}

func (c *capture) put(b *Backend, kind int, v []uint32) cu.DevicePtr {
	if i := c.last[kind]; i >= 0 {
		e := c.entries[i]
		if slices.Equal(c.host[e.off:e.off+e.n], v) {
			return c.arena + cu.DevicePtr(e.off*4)
		}
	}
	// 256-byte aligned, so that 32 words from an entry's start lie in the
	// arena (a multiple of 64 words): attn_decode reads a table's first 32
	// words whatever its length.
	off := (len(c.host) + 63) &^ 63
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
	b.feed.ready() // before the capture, which would record the allocations; its error is CaptureFeed's
	b.argmaxScratch()
	b.prepareSide()
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
// the step's greedy token written into its own token-id input (for the
// next replay: Step.Fed) and into the token ring (Graph.Pending). It
// fails with kernels.ErrUnsupported, recording nothing, where the step did
// not read its logits once or does not embed exactly one token id through
// the arena, or where the host ring cannot be had.
func (b *Backend) CaptureFeed() error {
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	off, err := b.feedable()
	if err != nil {
		return err
	}
	c := b.cap
	slot := c.put(b, kFeedSlot, []uint32{0})
	if c.pairs > 0 {
		// A greedy step of a tensor-parallel group: the token is picked
		// from the pairs the step's all-reduce left (argmax_pairs).
		if c.outN != 2*c.pairs {
			return fmt.Errorf("cuda: a step ending in %d argmax pairs read %d values", c.pairs, c.outN)
		}
		b.launchFnPDL(b.fn[fArgmaxPairs], 1, 1, 32, 0, ptr(c.arena+cu.DevicePtr(off*4)), ptr(b.feed.dev), ptr(slot),
			i32(feedRingLen-1), ptr(dptr(c.out)), i32(c.pairs), i32(c.pairVocab))
	} else {
		b.argmax(c.arena+cu.DevicePtr(off*4), b.feed.dev, slot, dptr(c.out), c.outN, true)
	}
	c.fedOff = off
	return b.err
}

// CaptureFeedDraw is CaptureFeed for a sampled step: the token is drawn
// inside the recording (sample_draw_grid_f, the grid draw as a
// cooperative launch) by the rule and variate that each replay's
// Step.Draw writes to the arena, and fed to the next replay and the ring
// as a greedy token is. It fails with kernels.ErrUnsupported, recording
// nothing, where CaptureFeed would, where the vocabulary is one the
// one-block draw takes or cooperative launches were refused, or where the
// draw's scratch for this vocabulary was not made before the capture (an
// eager Draw of it makes it).
func (b *Backend) CaptureFeedDraw() error {
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	off, err := b.feedable()
	if err != nil {
		return err
	}
	c, m, n := b.cap, b.sample, b.cap.outN
	blocks := drawGridBlocks(n, b.sms)
	switch {
	case c.pairs > 0:
		return fmt.Errorf("cuda: a draw needs the logits, the step ends in argmax pairs: %w", kernels.ErrUnsupported)
	case m == nil || m.noGrid || blocks <= 1:
		return fmt.Errorf("cuda: a fed draw takes the grid draw: %w", kernels.ErrUnsupported)
	case m.probsCap < int64(4*n):
		return fmt.Errorf("cuda: a fed draw's scratch is made by an eager draw first: %w", kernels.ErrUnsupported)
	}
	slot := c.put(b, kFeedSlot, []uint32{0})
	rule := c.put(b, kDrawRule, make([]uint32, drawRuleWords))
	b.a(ptr(c.arena+cu.DevicePtr(off*4)), ptr(m.probs), ptr(dptr(c.out)), i32(n), ptr(rule), ptr(m.grid),
		ptr(b.feed.dev), ptr(slot), i32(feedRingLen-1))
	tooLarge, err := launchCoop(m.drawFed, blocks, 1024, b.s, &b.args, b.nargs)
	switch {
	case err != nil:
		b.fail(err)
		return err
	case tooLarge: // eager draws were let in (m.noGrid): the recording fails
		m.noGrid = true
		c.err = errors.New("cuda: a fed draw's cooperative launch was refused")
		return c.err
	}
	c.fedOff, c.drawn = off, true
	return b.err
}

// drawRuleWords is the arena words of a DrawRule (sample_grid.cuh).
const drawRuleWords = 8

// drawRule is a's rule and variate as DrawRule's words.
func drawRule(a DrawArgs) [drawRuleWords]uint32 {
	tp, u := math.Float64bits(a.TopP), math.Float64bits(a.U)
	return [drawRuleWords]uint32{math.Float32bits(a.InvT), uint32(int32(a.TopK)), math.Float32bits(a.MinP), 0,
		uint32(tp), uint32(tp >> 32), uint32(u), uint32(u >> 32)}
}

// feedable is the arena word of the step's token id, where a feed may be
// recorded (see CaptureFeed); b.enter held.
func (b *Backend) feedable() (int, error) {
	c := b.cap
	switch {
	case c == nil:
		return -1, errors.New("cuda: a feed recorded outside a capture")
	case c.reads != 1:
		// EndCapture reports such a step (host logic inside it).
		return -1, fmt.Errorf("cuda: a fed step must read its logits once (%d reads): %w", c.reads, kernels.ErrUnsupported)
	case c.fedOff >= 0:
		return -1, errors.New("cuda: a feed recorded twice in one capture")
	case b.feed.err != nil:
		return -1, b.feed.err
	}
	off := -1
	for _, e := range c.entries {
		if e.kind != kIDs {
			continue
		}
		if off >= 0 || e.n != 1 {
			return -1, fmt.Errorf("cuda: a fed step must embed one token id: %w", kernels.ErrUnsupported)
		}
		off = e.off
	}
	if off < 0 {
		return -1, fmt.Errorf("cuda: the step embeds no token id from the arena: %w", kernels.ErrUnsupported)
	}
	return off, nil
}

// FeedTokens waits for the queued work and returns how many fed replays
// have run (all graphs together) and the ring: replay k's token is
// ring[k % len(ring)], for the last len(ring) of them.
func (b *Backend) FeedTokens() (count int, ring []int32, err error) {
	if !b.enter() {
		b.exit()
		return 0, nil, b.err
	}
	defer b.exit()
	b.fail(b.stream.Synchronize())
	ring = make([]int32, len(b.feed.host))
	for i := range ring {
		ring[i] = atomic.LoadInt32(&b.feed.host[i])
	}
	return int(b.feed.tickets), ring, b.err
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
	b.joinSide(c)
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
	g := &Graph{b: b, exec: exec, arena: c.arena, host: c.host, entries: c.entries, fedOff: c.fedOff, drawn: c.drawn,
		Out: c.out, OutLen: c.outN, Pairs: c.pairs, Vocab: c.outN}
	if c.pairs > 0 {
		g.Vocab = c.pairVocab
	}
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
	fedOff  int    // see capture.fedOff
	drawn   bool   // see capture.drawn
	ticket  uint64 // the fed ticket of the latest replay
	// Out and OutLen are the buffer and length the captured step read
	// (the logits).
	Out    kernels.Buf
	OutLen int
	// Pairs is the group's size where the step read a distributed
	// argmax's pairs instead (kernels.ArgmaxOps; Out holds 2·Pairs
	// floats, models.PickPairs picks the token), else 0. Vocab is the
	// vocabulary its token ids lie in.
	Pairs, Vocab int
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
	// Draw is the rule and variate of a drawn graph's step
	// (CaptureFeedDraw; its Adjust is not read), which every launch of
	// one must give.
	Draw *DrawArgs
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
		case kFeedSlot:
			dst[0] = uint32(b.feed.tickets % feedRingLen)
		case kDrawRule:
			if s.Draw == nil {
				return errors.New("cuda: a drawn graph launched without its draw")
			}
			r := drawRule(*s.Draw)
			copy(dst, r[:])
		}
	}
	switch {
	case s.Fed && g.fedOff < 0:
		return errors.New("cuda: a fed launch of a graph recorded without CaptureFeed")
	case s.Fed && b.feed.last != g:
		return errors.New("cuda: a fed launch must follow a replay of the same graph")
	case s.Fed && ablated("feed_upload"):
		// Timing only (POCKET_ABLATE=feed_upload): fed replays queued with
		// nothing between them, every one at the first one's position,
		// which prices the arena's upload between fed steps.
	case s.Fed:
		// Everything but the token id, which the previous replay wrote.
		g.upload(0, g.fedOff)
		g.upload(g.fedOff+1, len(g.host))
	default:
		g.upload(0, len(g.host))
	}
	b.fail(graphLaunch(g.exec, b.s))
	if g.fedOff >= 0 && b.err == nil {
		g.ticket = b.feed.tickets
		b.fail(b.feed.events[g.ticket%feedEvents].Record(b.stream))
		b.feed.tickets++
		b.feed.last = g
	}
	return b.err
}

// Fed reports whether the graph feeds itself (CaptureFeed or
// CaptureFeedDraw).
func (g *Graph) Fed() bool { return g.fedOff >= 0 }

// Drawn reports whether the graph's feed is a draw (CaptureFeedDraw).
func (g *Graph) Drawn() bool { return g.drawn }

// Pending returns, for a fed graph's latest replay, a function that waits
// for that replay alone (not for what was queued after it) and answers its
// token, greedy or drawn (Token of that replay).
func (g *Graph) Pending() func() (int32, error) {
	t := g.ticket
	return func() (int32, error) { return g.token(t) }
}

// Token waits for a fed graph's latest replay alone and answers its
// token (greedy, or drawn by a CaptureFeedDraw recording) (0 where nothing won, all NaN, as session.Argmax answers
// then and as the replay after it embeds).
func (g *Graph) Token() (int32, error) { return g.token(g.ticket) }

// token is Token of the replay with ticket t.
func (g *Graph) token(t uint64) (int32, error) {
	b := g.b
	if !b.enter() {
		b.exit()
		return 0, b.err
	}
	defer b.exit()
	if g.fedOff < 0 {
		return 0, errors.New("cuda: a fed token of a graph recorded without CaptureFeed")
	}
	if b.feed.tickets-t <= feedEvents {
		b.fail(b.feed.events[t%feedEvents].Synchronize())
	} else if b.feed.tickets-t <= feedRingLen {
		b.fail(b.stream.Synchronize()) // its event was recorded again since
	} else {
		return 0, fmt.Errorf("cuda: fed token %d is no longer in the ring (%d since)", t, b.feed.tickets-t)
	}
	id := atomic.LoadInt32(&b.feed.host[t%feedRingLen])
	if id < 0 || int(id) >= g.Vocab {
		id = 0
	}
	return id, b.err
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
		if g.b.feed.last == g {
			g.b.feed.last = nil
		}
		graphDestroy(g.exec)
		g.b.poolMu.Lock()
		g.b.free[arenaWords*4] = append(g.b.free[arenaWords*4], g.arena)
		g.b.poolMu.Unlock()
	}
	g.b.exit()
}
