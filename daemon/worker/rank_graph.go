package worker

import (
	"errors"
	"fmt"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// replay runs a single-token LastLogits step as a recorded graph (see
// graphs.go). ok is false when no graph serves the step: several tokens,
// another logits mode, input the eager path must refuse with its own
// error, or replay off; the caller then runs the step eagerly. In a
// tensor-parallel group every rank replays its own recording, whose
// all-reduces were recorded with it; a rank that runs a step eagerly
// instead issues the same all-reduces in the same order, so ranks need not
// agree on the path.
//
// A hybrid model's step replays the recording made for its own recurrent
// state (graphs.go). The replay bypasses Model.Forward, so the rank checks
// and moves the state's position as Forward would: a step whose state is
// not at its start runs eagerly and gets Forward's error.
//
// Nothing is recorded before one single-token step has run eagerly: the
// backend then has the buffers such a step needs allocated and
// initialised by ordinary ops (a buffer first allocated while recording
// would be initialised only by the recording, so the eager path after a
// failed recording would find it uninitialised).
func (rk *rank) replay(req forwardReq) (StepGraph, bool) { return rk.replayStep(req, nil) }

// replayStep is replay; where fedBy is not nil the step is the one after
// fedBy's latest replay, fed by its token (StepFeeder; req.tokens are
// not read): it replays only on fedBy itself, else ok is false and
// nothing ran.
func (rk *rank) replayStep(req forwardReq, fedBy StepGraph) (StepGraph, bool) {
	if !rk.graphs.usable() || !rk.warm || len(req.tokens) != 1 || req.want != models.LastLogits || rk.pool == nil {
		return nil, false
	}
	st, ok := rk.stepState(req)
	if !ok {
		return nil, false
	}
	blocks, ok := rk.stepBlocks(req)
	if !ok {
		return nil, false
	}
	bucket := bucketFor(blocks)
	drawn := rk.drawnStep(req)
	// A greedy step of a tensor-parallel model records the argmax pairs'
	// head (models.Model.ForwardGreedy), as its eager run takes it: the
	// ranks must issue the same all-reduces whichever path each takes.
	pairs := req.argmax && rk.model.PairsArgmax()
	if pairs && !rk.warmPairs {
		return nil, false
	}
	key := graphKey{bucket, req.state, drawn, pairs}
	if fedBy != nil && rk.graphs.peek(key) != fedBy {
		return nil, false // another recording (or none yet) serves it
	}
	table := rk.padTable(req.table[:blocks], bucket)
	var owner any
	if st != nil {
		owner = st
	}
	g, err := rk.graphs.graph(key, owner, rk.model.ScratchGen, func() (StepGraph, error) {
		seq := models.Seq{Pool: rk.pool, Table: table, Start: req.start}
		if st != nil {
			seq.State = st
			// Recording runs Forward's host code, which moves the
			// position, but no op: the replay below is the step.
			defer st.SetPos(req.start)
		}
		capture := rk.graphs.rec.Capture
		if drawn {
			capture = rk.graphs.rec.(DrawnGrapher).CaptureDrawn
		}
		return capture(func() error {
			if pairs {
				_, err := rk.model.ForwardGreedy(seq, req.tokens)
				return err
			}
			_, err := rk.model.Forward(seq, req.tokens, models.LastLogits)
			return err
		})
	})
	if errors.Is(err, errThrash) {
		return nil, false
	}
	if err != nil {
		rk.log.Warn("decode graphs off: every step runs eagerly from now on", "err", err)
		return nil, false
	}
	bs := rk.spec.BlockSize
	pos := req.start
	s := Step{ID: req.tokens[0], Pos: int32(pos), Slot: table[pos/bs]*int32(bs) + int32(pos%bs), Table: table}
	if isDrawn(g) {
		d := *req.draw
		s.Draw = &d
	}
	launch := g.Launch
	if fedBy != nil {
		f, ok := g.(StepFeeder)
		if !ok || g != fedBy {
			return nil, false
		}
		launch = f.LaunchFed
	}
	if err := launch(s); err != nil {
		if fedBy != nil {
			// fedBy's replay is still in flight: its recording must
			// not be closed under it. The step runs as a plain guess,
			// and a lost device shows in serve's check.
			rk.log.Warn("a fed decode step did not launch", "err", err)
			return nil, false
		}
		// Launch fails before queuing anything, or the device state is
		// lost (which serve reports): either way the eager path answers.
		rk.graphs.off = err
		rk.graphs.reset()
		rk.log.Warn("decode graphs off: every step runs eagerly from now on", "err", err)
		return nil, false
	}
	if st != nil {
		st.SetPos(req.start + 1) // what Forward would have done
	}
	if rk.graphs.captures == 1 && rk.graphs.replays == 1 {
		rk.log.Info("decode steps replay recorded graphs", "bucket", bucket)
	}
	return g, true
}

// drawnStep reports whether req's step replays a recording that draws its
// token itself (DrawnGrapher): a sampled step without penalties or bias
// (whose Adjust comes with each request), once a device draw has made the
// backend's draw scratch. A recorder that cannot draw in the recording
// returns a plain one (isDrawn false), and the step draws after the
// replay.
func (rk *rank) drawnStep(req forwardReq) bool {
	d := req.draw
	if d == nil || d.Adjust != nil || d.TopK == 1 || !rk.drawnReady || rk.opts.HostDraw {
		return false
	}
	_, ok := rk.graphs.rec.(DrawnGrapher)
	return ok
}

// isDrawn reports whether g draws its step's token itself (a
// DrawnGrapher's recording where the backend could record the draw).
func isDrawn(g StepGraph) bool {
	d, ok := g.(interface{ Drawn() bool })
	return ok && d.Drawn()
}

// graphState is a recurrent state a recorded step can run on: a replay
// bypasses Model.Forward, so the rank keeps the state's position in step
// itself (models.DeltaState).
type graphState interface {
	models.RecurrentState
	SetPos(pos int)
}

// stepState resolves a step's recurrent state for a replay: nil for an
// attention-only model. ok false leaves the step to the eager path, which
// answers the error: a missing or unknown state, or one not at the step's
// position (recording such a step would fail in Forward and turn replay
// off for good).
func (rk *rank) stepState(req forwardReq) (st graphState, ok bool) {
	if rk.states == nil {
		return nil, req.state == 0
	}
	s, found := rk.states[req.state]
	if !found {
		return nil, false
	}
	st, ok = s.(graphState)
	if !ok || st.Pos() != req.start {
		return nil, false
	}
	return st, true
}

// stepBlocks makes the checks Model.Forward makes of a one-token step (a
// replay does not pass through it) and returns how many blocks the step's
// positions cover; ok false leaves the step to the eager path, which
// answers the error.
func (rk *rank) stepBlocks(req forwardReq) (int, bool) {
	cfg := rk.model.Config
	if t := req.tokens[0]; req.start < 0 || t < 0 || int(t) >= cfg.VocabSize {
		return 0, false
	}
	end := req.start + 1
	if cfg.MaxPositions > 0 && end > cfg.MaxPositions {
		return 0, false
	}
	bs := rk.spec.BlockSize
	n := (end + bs - 1) / bs
	if len(req.table) < n {
		return 0, false
	}
	for _, b := range req.table[:n] {
		if b < 0 || int(b) >= rk.spec.Blocks {
			return 0, false
		}
	}
	return n, true
}

// padTable is table padded to n entries with its first block (never read:
// see graphs.go), in a buffer the rank reuses.
func (rk *rank) padTable(table []int32, n int) []int32 {
	if cap(rk.padded) < n {
		rk.padded = make([]int32, n)
	}
	p := rk.padded[:n]
	copy(p, table)
	for i := len(table); i < n; i++ {
		p[i] = table[0]
	}
	return p
}

// graphToken is the greedy token of a replayed step, found on the device.
func (rk *rank) graphToken(g StepGraph) (int32, error) {
	id, err := g.Argmax()
	if err != nil {
		return 0, err
	}
	vocab := rk.model.Config.VocabSize
	if id >= 0 && int(id) < vocab {
		return id, nil
	}
	// No largest logit (all NaN): session.Argmax's answer, on the host.
	logits := make([]float32, vocab)
	if err := g.Logits(logits); err != nil {
		return 0, err
	}
	return session.Argmax(logits), nil
}

// graphDraw waits for a replayed step and draws its token from the
// logits with d: on the device where the graph can (StepDrawer), else on
// the host.
func (rk *rank) graphDraw(g StepGraph, d session.Draw) (int32, error) {
	n := rk.model.Config.VocabSize
	if gd, ok := g.(StepDrawer); ok && !rk.opts.HostDraw {
		id, err := gd.Draw(d)
		if err != nil {
			return 0, err
		}
		if id >= 0 && int(id) < n {
			rk.drawnReady = true
			return id, nil
		}
		// Not a token (a device that cannot draw): the host's draw.
	}
	if cap(rk.drawBuf) < n {
		rk.drawBuf = make([]float32, n)
	}
	logits := rk.drawBuf[:n]
	if err := g.Logits(logits); err != nil {
		return 0, err
	}
	return rk.drawer.Token(logits, d), nil
}

// graphLogits answers a replayed msgForward step: rank 0 sends the
// logits (read straight into shared memory when it fits), the others
// wait for the replay and send none.
func (rk *rank) graphLogits(g StepGraph) (msgType, []byte, []byte, error) {
	if rk.group.Rank != 0 {
		if _, err := g.Argmax(); err != nil { // waits for the replay
			return 0, nil, nil, err
		}
		var e enc
		e.f32sHeader(0)
		return msgLogits, e.b, nil, nil
	}
	n := rk.model.Config.VocabSize
	var e enc
	if rk.shm.fits(n) {
		ref := shmRef{count: n}
		buf, err := rk.shm.floats(ref, "logits")
		if err != nil {
			return 0, nil, nil, err
		}
		if err := g.Logits(buf); err != nil {
			return 0, nil, nil, err
		}
		e.ref(ref)
		return msgLogitsShared, e.b, nil, nil
	}
	logits := make([]float32, n)
	if err := g.Logits(logits); err != nil {
		return 0, nil, nil, fmt.Errorf("read replayed logits: %w", err)
	}
	e.f32sHeader(n)
	return msgLogits, e.b, f32Bytes(logits), nil
}
