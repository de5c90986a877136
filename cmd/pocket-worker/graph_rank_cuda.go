//go:build cuda

package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// noGraphs turns decode-step replay off in serve-rank (POCKET_GRAPHS=0):
// an A/B switch for measuring on a GPU host, read once here like the
// backend's own (kernels/cuda/switches.go). pocketd's environment reaches
// the ranks it starts.
var noGraphs = os.Getenv("POCKET_GRAPHS") == "0"

// noFeed records decode steps without their greedy token fed on the
// device (POCKET_FEED=0; worker.StepFeeder): the A/B switch of the fed
// steps, read once here as POCKET_GRAPHS is.
var noFeed = os.Getenv("POCKET_FEED") == "0"

// noFeedDraw records sampled steps without their draw (POCKET_FEED_DRAW=0;
// worker.DrawnGrapher): they draw after the replay and do not feed each
// other. An A/B switch, read once here as POCKET_FEED is.
var noFeedDraw = os.Getenv("POCKET_FEED_DRAW") == "0"

// cudaGraphs is the CUDA rank's decode-step recorder: CUDA graphs
// (cuda.Backend.BeginCapture, cuda.Graph).
func cudaGraphs(be kernels.Backend) worker.StepGrapher {
	b, ok := be.(*cuda.Backend)
	if !ok || noGraphs {
		return nil
	}
	if !hostDraw {
		// The replays draw sampled steps on the device: compile the
		// draw's module with the rest of the start-up, not in the first
		// sampled request (~2 s on an H200 where the driver's JIT cache
		// does not have it yet). A failure marks the backend failed, as
		// any op's does.
		_ = b.PrepareDraw()
	}
	g := cudaGrapher{b, new(drawScratch)}
	if hostDraw || noFeed || noFeedDraw {
		return g
	}
	return cudaDrawGrapher{g}
}

// cudaDrawGrapher is cudaGrapher that also records sampled steps with
// their draw (worker.DrawnGrapher).
type cudaDrawGrapher struct{ cudaGrapher }

// CaptureDrawn implements worker.DrawnGrapher: the step's draw recorded
// after its Forward (cuda.Backend.CaptureFeedDraw), its token fed to the
// next replay. Where the backend cannot record the draw the recording
// feeds its greedy token instead (not Drawn: the rank draws after it).
func (c cudaDrawGrapher) CaptureDrawn(fwd func() error) (worker.StepGraph, error) {
	return c.capture(fwd, true)
}

// cudaGrapher records steps on b; its graphs share one drawScratch (a
// rank draws one step at a time, as b's draw scratch on the device does).
type cudaGrapher struct {
	b    *cuda.Backend
	draw *drawScratch
}

// Capture implements worker.StepGrapher. The capture is always ended,
// also when fwd fails or panics, so that the stream leaves capture mode
// and later ops run.
func (c cudaGrapher) Capture(fwd func() error) (worker.StepGraph, error) {
	return c.capture(fwd, false)
}

// capture records fwd's step, with its draw where drawn (CaptureDrawn).
func (c cudaGrapher) capture(fwd func() error, drawn bool) (worker.StepGraph, error) {
	if err := c.b.BeginCapture(); err != nil {
		return nil, err
	}
	ferr := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic while recording a decode step: %v", p)
			}
		}()
		if err := fwd(); err != nil {
			return err
		}
		// The greedy token too, written where the next replay reads its
		// token id (worker.StepFeeder); a step that cannot feed itself
		// is recorded without it.
		if noFeed {
			return nil
		}
		if drawn {
			err := c.b.CaptureFeedDraw()
			if !errors.Is(err, kernels.ErrUnsupported) {
				return err
			}
		}
		if err := c.b.CaptureFeed(); err != nil && !errors.Is(err, kernels.ErrUnsupported) {
			return err
		}
		return nil
	}()
	g, err := c.b.EndCapture()
	if ferr != nil {
		if g != nil {
			g.Close()
		}
		return nil, fmt.Errorf("record decode step: %w", ferr)
	}
	if err != nil {
		return nil, fmt.Errorf("record decode step: %w", err)
	}
	if g.Fed() {
		return fedGraph{cudaGraph{g, c.b, c.draw}}, nil
	}
	return cudaGraph{g, c.b, c.draw}, nil
}

type cudaGraph struct {
	g    *cuda.Graph
	b    *cuda.Backend
	draw *drawScratch
}

func (c cudaGraph) Launch(s worker.Step) error {
	return c.g.Launch(c.step(s, false))
}

// step is s as the recording takes it (its draw, for a drawn one).
func (c cudaGraph) step(s worker.Step, fed bool) cuda.Step {
	cs := cuda.Step{ID: s.ID, Pos: s.Pos, Slot: s.Slot, Table: s.Table, Fed: fed}
	if s.Draw != nil {
		a := c.draw.args(*s.Draw)
		cs.Draw = &a
	}
	return cs
}

// Argmax reads back one int32, not the logits; a step ending in a
// distributed argmax's pairs (cuda.Graph.Pairs) reads those and picks.
func (c cudaGraph) Argmax() (int32, error) {
	id := graphGreedy(c.b, c.g)
	return id, c.b.Err()
}

// graphGreedy is the greedy token of g's latest replay: its logits' argmax
// on the device, or for a step that ends in a distributed argmax's pairs
// (cuda.Graph.Pairs) the pick from those, read back.
func graphGreedy(b *cuda.Backend, g *cuda.Graph) int32 {
	if n := g.Pairs; n > 0 {
		pairs := make([]float32, 2*n)
		b.Read(g.Out, 0, pairs)
		return models.PickPairs(pairs, g.Vocab)
	}
	return b.Argmax(g.Out, g.OutLen)
}

// recordStep runs the one-token step a graph records: the logits'
// Forward, or with pairs ForwardGreedy's (a tensor-parallel greedy step
// ending in the group's argmax pairs).
func recordStep(m *models.Model, seq models.Seq, tok int32, pairs bool) error {
	if pairs {
		_, err := m.ForwardGreedy(seq, []int32{tok})
		return err
	}
	_, err := m.Forward(seq, []int32{tok}, models.LastLogits)
	return err
}

// Draw implements worker.StepDrawer: the token drawn on the device
// (cuda.Backend.Draw), one int32 read back.
func (c cudaGraph) Draw(d session.Draw) (int32, error) {
	b := c.b
	id := b.Draw(c.g.Out, c.g.OutLen, c.draw.args(d))
	return id, b.Err()
}

// drawScratch holds the entries of the last penalised draw's Adjust as
// the device takes them, reused from draw to draw: a step after a long
// prompt carries thousands (24 bytes each), every token.
type drawScratch struct{ adj cuda.LogitAdjust }

// args is d as cuda.Backend.Draw takes it, valid until the next call
// (Draw has uploaded the entries when it returns).
func (s *drawScratch) args(d session.Draw) cuda.DrawArgs {
	a := cuda.DrawArgs{InvT: float32(1 / d.Temperature), TopK: d.TopK, TopP: d.TopP, MinP: float32(d.MinP), U: d.U}
	if adj := d.Adjust; adj != nil && len(adj.Entries) > 0 {
		ents := s.adj.Entries[:0]
		for _, e := range adj.Entries {
			ents = append(ents, cuda.LogitAdjustEntry{ID: e.ID, Flags: int32(e.Flags), Sub: e.Sub, Bias: e.Bias})
		}
		s.adj = cuda.LogitAdjust{Repetition: adj.Repetition, Entries: ents}
		a.Adjust = &s.adj
	}
	return a
}

func (c cudaGraph) Logits(dst []float32) error {
	if len(dst) != c.g.OutLen {
		return fmt.Errorf("replayed step has %d logits, asked for %d", c.g.OutLen, len(dst))
	}
	b := c.b
	b.Read(c.g.Out, 0, dst)
	return b.Err()
}

func (c cudaGraph) Close() { c.g.Close() }

// fedGraph is a recording that feeds itself (cuda.Backend.CaptureFeed):
// a worker.StepFeeder, whose greedy token is the one its replay computed
// in place (no argmax launched after it, no wait for later replays).
type fedGraph struct{ cudaGraph }

func (f fedGraph) Argmax() (int32, error)         { return f.g.Token() }
func (f fedGraph) Pending() func() (int32, error) { return f.g.Pending() }

// Drawn reports a recording whose fed token is drawn (CaptureFeedDraw).
func (f fedGraph) Drawn() bool { return f.g.Drawn() }

func (f fedGraph) LaunchFed(s worker.Step) error {
	return f.g.Launch(f.step(s, true))
}
