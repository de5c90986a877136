package worker

import (
	"errors"
	"math/bits"
	"slices"

	"github.com/pocketllm/pocketllm/session"
)

// Graph replay of decode steps.
//
// A single-token decode step is hundreds of kernel launches when run
// eagerly from Go; a backend that can record them (CUDA graphs) replays
// the step with one launch. A recording fixes everything but the step's
// token id, position, KV slot and block table contents: in particular the
// block table's length (the attention kernels' split count is chosen on
// the host from it while recording). So graphs are keyed by a table
// length bucket: a step whose sequence covers n blocks runs the graph of
// the smallest power of two ≥ max(n, minBucket), its table padded to that
// length with the sequence's first block. The padding is never read: the
// attention kernel takes the context length from the step's position on
// the device and reads table entries only below it; the store writes only
// the step's slot. Powers of two keep the number of recordings a sequence
// needs logarithmic in its length, at the price of attention splits sized
// for up to twice the context (the splits past it return at once).
//
// A recording also holds the addresses of the model's scratch buffers and
// of the KV pool: the cache is dropped when either changes
// (Model.ScratchGen, a new pool). It holds at most maxGraphs recordings,
// least recently used first out. A recording that fails (an architecture
// whose step reads device data on the host, such as MoE routing) turns
// replay off for the rank's life: every later step runs eagerly, and the
// failure is not retried.
//
// Hybrid models (Gated DeltaNet layers) read and write a per-sequence
// recurrent state in the step, and a recording holds the addresses of the
// state's buffers: a graph recorded for one state must only ever be
// replayed for that state. So their recordings are keyed by (bucket,
// state id), and each remembers the state object it was recorded for; a
// lookup whose id now names another object (the id freed and reused)
// drops the stale recording. A state's buffers never move while its id
// names it: Restore and Reset write into them (models.DeltaState), Clone
// makes new ones under a new id. Freeing a state drops its recordings
// (dropState). The bound of maxGraphs holds over all states together.
//
// Per-state keys let round-robin decoding of more sequences than the cache
// holds miss on every step, and a recording costs far more than an eager
// step. So a hybrid cache evicts only a recording left unused for
// churnWindow lookups: past the bound, the sequences beyond it run
// eagerly (errThrash) while the others keep replaying, instead of every
// step recording a graph that is evicted before its next use.

// Step is one single-token decode step, as a recorded graph replays it.
type Step struct {
	ID, Pos, Slot int32
	// Table is the sequence's blocks padded to the graph's bucket length.
	Table []int32
	// Draw is a drawn recording's rule and variate (DrawnGrapher; its
	// Adjust is nil), nil for the others.
	Draw *session.Draw
}

// StepGrapher is what a backend offers to record decode steps (optional:
// RankOptions.Graphs).
type StepGrapher interface {
	// Capture records the ops that fwd queues (one single-token forward
	// pass with LastLogits) without running them.
	Capture(fwd func() error) (StepGraph, error)
}

// StepGraph is a recorded decode step.
type StepGraph interface {
	// Launch writes the step's inputs and queues the replay.
	Launch(s Step) error
	// Argmax waits for the replay and returns the index of the largest
	// logit (the lowest index among equals), computed on the device.
	Argmax() (int32, error)
	// Logits waits for the replay and copies the logits into dst.
	Logits(dst []float32) error
	// Close frees the recording.
	Close()
}

// StepDrawer is a StepGraph that can also draw a sampled step's token on
// the device (optional): the rule of session.Drawer, reading back one
// token instead of the logits.
type StepDrawer interface {
	// Draw waits for the replay and returns the token drawn from its
	// logits with d.
	Draw(d session.Draw) (int32, error)
}

// DrawnGrapher is a StepGrapher that can also record a sampled step's
// draw inside the step (optional): CaptureDrawn's recordings are
// StepFeeders whose token is the one drawn by the rule and variate each
// launch's Step.Draw gives (session.Drawer's rule, penalties and bias
// aside), so a sampled generation's steps feed each other as greedy ones
// do (rank_ahead.go).
type DrawnGrapher interface {
	CaptureDrawn(fwd func() error) (StepGraph, error)
}

// StepFeeder is a StepGraph recorded to feed itself: each replay leaves
// its greedy token (a drawn recording's: the one it drew) on the device as
// the next replay's token id, so the rank can queue a generation's next
// step before it has read this one's token (rank_ahead.go), and the device
// does not wait for the host between them.
type StepFeeder interface {
	// Pending returns a function that waits for the graph's latest
	// replay alone (not for replays queued after it) and answers its
	// token.
	Pending() func() (int32, error)
	// LaunchFed queues the replay of the step after the latest one, its
	// token the one that replay chose (s.ID is not read). The latest
	// replay of a feeding graph on the backend must be this graph's.
	LaunchFed(s Step) error
}

const (
	// maxGraphs bounds the recordings a rank keeps (each holds a device
	// arena and the instantiated graph).
	maxGraphs = 8
	// minBucket is the smallest table length recorded (64 positions at
	// the default block size): short sequences share one graph.
	minBucket = 4
)

// bucketFor is the table length of the graph that serves a sequence
// covering blocks blocks.
func bucketFor(blocks int) int {
	if blocks <= minBucket {
		return minBucket
	}
	return 1 << bits.Len(uint(blocks-1))
}

// churnWindow is how many lookups a hybrid recording must have gone
// unused before a new one may evict it.
const churnWindow = 2 * maxGraphs

// errThrash answers a lookup that would evict a recording still in use
// (hybrid caches only): the step runs eagerly, replay stays on.
var errThrash = errors.New("decode graph cache full of recordings in use")

// graphKey names a recording: the table length bucket and, for hybrid
// models, the recurrent state id it was recorded with (0 for
// attention-only models).
type graphKey struct {
	bucket int
	state  uint64
	drawn  bool // recorded with its draw (DrawnGrapher)
	pairs  bool // a greedy step's recording that picks from the group's argmax pairs (forwardReq.argmax)
}

type graphEntry struct {
	key graphKey
	// owner is the recurrent state object the recording addresses (nil
	// for attention-only models).
	owner any
	g     StepGraph
	used  uint64 // the lookup that last used it
}

// graphCache holds a rank's recordings, most recently used last.
type graphCache struct {
	rec     StepGrapher
	limit   int
	entries []graphEntry
	gen     uint64 // the scratch generation the entries were recorded under
	off     error  // the recording failure that turned replay off
	// perState marks a hybrid model's cache (keys carry state ids; see
	// errThrash).
	perState bool
	tick     uint64 // lookups so far
	// captures and replays count, for tests and logs.
	captures, replays int
}

func newGraphCache(rec StepGrapher, limit int) *graphCache {
	return &graphCache{rec: rec, limit: max(limit, 1)}
}

// usable reports whether steps may be replayed (nil-safe).
func (c *graphCache) usable() bool { return c != nil && c.off == nil }

// reset closes every recording (nil-safe).
func (c *graphCache) reset() {
	if c == nil {
		return
	}
	for _, e := range c.entries {
		e.g.Close()
	}
	c.entries = c.entries[:0]
}

// dropState closes the recordings made for state id (nil-safe): its
// buffers are about to be freed.
func (c *graphCache) dropState(id uint64) {
	if c == nil || id == 0 {
		return
	}
	c.entries = slices.DeleteFunc(c.entries, func(e graphEntry) bool {
		if e.key.state == id {
			e.g.Close()
			return true
		}
		return false
	})
}

// graph returns the recording for key, made for the state object owner,
// recording one with capture when there is none. gen reads the scratch
// generation; recordings made under another are dropped first, and so are
// those under key's state id made for another object. An error is a failed
// recording (replay is off from then on) or errThrash (this step runs
// eagerly, replay stays on).
func (c *graphCache) graph(key graphKey, owner any, gen func() uint64, capture func() (StepGraph, error)) (StepGraph, error) {
	if c.off != nil {
		return nil, c.off
	}
	c.sync(gen())
	c.tick++
	if key.state != 0 {
		// Recordings under this id made for another object (the id freed
		// and reused) address buffers that are not this state's.
		c.entries = slices.DeleteFunc(c.entries, func(e graphEntry) bool {
			if e.key.state == key.state && e.owner != owner {
				e.g.Close()
				return true
			}
			return false
		})
	}
	for i, e := range c.entries {
		if e.key != key {
			continue
		}
		copy(c.entries[i:], c.entries[i+1:])
		e.used = c.tick
		c.entries[len(c.entries)-1] = e
		c.replays++
		return e.g, nil
	}
	if c.perState && len(c.entries) >= c.limit && c.tick-c.entries[0].used < churnWindow {
		return nil, errThrash
	}
	g, err := capture()
	if err != nil {
		c.off = err
		c.reset()
		return nil, err
	}
	c.captures++
	// The recording pass itself may have replaced buffers (a first step
	// with no eager pass before it): then only it is current.
	c.sync(gen())
	if len(c.entries) >= c.limit {
		c.entries[0].g.Close()
		c.entries = append(c.entries[:0], c.entries[1:]...)
	}
	c.entries = append(c.entries, graphEntry{key: key, owner: owner, g: g, used: c.tick})
	c.replays++
	return g, nil
}

// peek is the recording for key if the cache holds one that is current,
// else nil; nothing is recorded or reordered.
func (c *graphCache) peek(key graphKey) StepGraph {
	if c.off != nil || len(c.entries) == 0 {
		return nil
	}
	for _, e := range c.entries {
		if e.key == key {
			return e.g
		}
	}
	return nil
}

// sync drops the recordings when the scratch generation moved.
func (c *graphCache) sync(gen uint64) {
	if gen != c.gen {
		c.reset()
		c.gen = gen
	}
}
