package worker

import (
	"slices"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// Lookahead: a greedy generation over a worker is a chain of one-token
// ForwardArgmax requests, each needing the token the one before answered.
// Between two steps the token travels to the daemon, the daemon does its
// per-token work (stop checks, the client's stream, bookkeeping) and the
// next request travels back, and the device idles all that while
// (BenchmarkStepOverWorker: ~85 µs of a tiny CPU step; on an H200 the
// daemon decoded Llama-3-8B at 237 tok/s where the same steps in one
// process ran 247).
//
// So after answering a ForwardArgmax the rank starts the step that a
// continuing generation asks for next — the answered token at the next
// position, over the same blocks — before it reads the next request. A
// replayed step is only queued (its argmax is read when the request
// comes); an eager one runs to the end. When the request is that step,
// its answer is the one computed ahead; otherwise the guess is dropped.
//
// A dropped guess has changed nothing anyone reads: its KV write is the
// key and value of position start+1 in the sequence's last block, a
// position at or past the sequence's end, which every later pass writes
// before it reads (and which a block copy or host-tier write simply
// carries or replaces). A hybrid's step also moves its recurrent state in
// place, so before a step run ahead the rank copies the state into a
// spare of its own (rk.undo, on the device where the backend copies
// there), and a dropped guess copies it back before anything reads the
// state. The copy moves the state's bytes twice (Qwen3.5-27B: 2 × 151 MB,
// ~70 µs on an H200), most of the round trip between tokens it hides
// where the host does nothing else (+0.6% through rank-bench there,
// docs/benchmarks.md); pocketd's own per-token work is hidden too.
//
// No step is run ahead whose next position needs a block the request did
// not carry (a block boundary: the daemon allocates blocks per step), nor
// for a state with marks pending. Ranks of a group see the same requests,
// so they guess, and run the collectives of a guessed step, alike. That
// is why a hybrid's ranks of a tensor-parallel group do not look ahead:
// whether a rank has room for its spare is its own device's answer, and a
// step one rank runs ahead and another does not would pair their
// collectives wrongly. Nor do a hybrid's steps that are not replayed: an
// eager step runs ahead on the rank's own thread, and on a CPU the copy
// of a large state (151 MB for Qwen3.5-27B) costs more than the round
// trip it would hide.

// lookahead is a guessed next step: its request and, once started, its
// replay (g) or its eager answer (id), and for a hybrid the state as it
// was before the step (undo; restored if the guess is dropped).
type lookahead struct {
	req  forwardReq
	g    StepGraph
	id   int32
	undo models.RecurrentState
}

// stateCopier is a recurrent state that copies another of its kind into
// its own buffers (models.DeltaState).
type stateCopier interface {
	CopyFrom(src models.RecurrentState) error
}

// saveUndo copies the state of la's step into the rank's spare before the
// step runs ahead (attention-only models: nothing to do). false: the step
// must not run ahead (no room for the spare, a state that cannot copy).
func (rk *rank) saveUndo(la *lookahead) bool {
	if la.req.state == 0 {
		return true
	}
	st, ok := rk.states[la.req.state]
	if !ok {
		return false
	}
	if rk.undo == nil {
		if !rk.roomFor(st.SizeBytes(), undoReserve) {
			if !rk.undoDenied {
				rk.undoDenied = true
				rk.log.Info("no room for a spare recurrent state: steps of hybrid sequences are not run ahead",
					"bytes", st.SizeBytes())
			}
			return false
		}
		rk.undo = st.Clone() // the copy too
		la.undo = rk.undo
		return true
	}
	c, ok := rk.undo.(stateCopier)
	if !ok || c.CopyFrom(st) != nil {
		return false
	}
	la.undo = rk.undo
	return true
}

// undoReserve is the device memory the spare state must leave free.
const undoReserve = 1 << 30

// restore puts a dropped guess's state back as it was before the step.
func (rk *rank) restore(la *lookahead) {
	if la.undo == nil {
		return
	}
	st, ok := rk.states[la.req.state]
	if !ok {
		return
	}
	if c, ok := st.(stateCopier); ok {
		if err := c.CopyFrom(la.undo); err != nil {
			rk.log.Error("restore a state after a dropped step", "err", err)
		}
	}
}

// guess records req's successor for greedy token id as the step to run
// ahead once the reply to req is written (see serve), where one exists and
// is not already running (fed: feedAhead).
func (rk *rank) guess(req forwardReq, id int32) {
	if rk.ahead != nil {
		return
	}
	if next, ok := rk.successor(req, id); ok {
		rk.next = &lookahead{req: next}
	}
}

// successor is the step a continuing generation asks for after req, with
// token id, where the rank may run it ahead.
func (rk *rank) successor(req forwardReq, id int32) (forwardReq, bool) {
	if rk.opts.NoLookahead || len(req.tokens) != 1 || req.want != models.LastLogits || (req.state != 0) != (rk.states != nil) {
		return forwardReq{}, false
	}
	if _, marked := rk.marks[req.state]; marked || (req.state != 0 && (rk.group.World > 1 || !rk.graphs.usable())) {
		return forwardReq{}, false
	}
	if req.draw != nil && req.draw.Adjust != nil && !rk.graphs.usable() {
		return forwardReq{}, false // an eager step ahead would have to draw without its request's Adjust
	}
	pos := req.start + 1
	if bs := rk.spec.BlockSize; bs <= 0 || pos >= len(req.table)*bs {
		return forwardReq{}, false
	}
	if mp := rk.model.Config.MaxPositions; mp > 0 && pos+1 > mp {
		return forwardReq{}, false
	}
	// req's table is its own (decodeForward allocates it), and nothing
	// writes it.
	next := forwardReq{start: pos, want: models.LastLogits, tokens: []int32{id}, table: req.table, state: req.state,
		argmax: req.argmax}
	if req.draw != nil {
		// A sampled step's successor draws with the variate the request
		// named for it (its own Next is not known yet).
		d := *req.draw
		d.U, d.Next = d.Next, 0
		next.draw = &d
	}
	return next, true
}

// feedAhead answers the token of la, a replay run ahead that req now asks
// for: its greedy token, or the one it drew (a drawn recording). Where
// la's recording feeds itself (StepFeeder) and the step after it replays
// on the same recording, that step is queued first, fed on the device by
// la's token (a drawn one with the variate req names for it), and becomes
// the step run ahead: the device then goes from one step to the next
// without waiting for the host to read a token and launch. Its token is
// filled in once known, so the next request matches it as any guess.
func (rk *rank) feedAhead(la *lookahead, req forwardReq) (int32, error) {
	f, ok := la.g.(StepFeeder)
	if !ok {
		return rk.graphToken(la.g)
	}
	token := f.Pending()
	var fed *lookahead
	if next, ok := rk.successor(req, 0); ok {
		fed = &lookahead{req: next}
		if !rk.saveUndo(fed) {
			fed = nil
		} else if g, ok := rk.replayStep(next, la.g); ok {
			fed.g = g
		} else {
			fed = nil
		}
	}
	id, err := token()
	if err != nil {
		if fed != nil {
			rk.ahead = fed
			rk.dropAhead()
		}
		return 0, err
	}
	if fed != nil {
		fed.req.tokens = []int32{id}
		rk.ahead = fed
	}
	return id, nil
}

// runAhead starts the guessed step (after the reply to the one before
// went out). A step that fails is dropped: the request, if it comes, runs
// as usual and reports its own error. But a broken collective or a lost
// device ends the rank now (serve returns the error): with the step's
// answer taken from here, a peer that stopped would otherwise go
// unnoticed by the next request, which would wait for the stopped rank
// until the daemon's request deadline instead of the collective's.
func (rk *rank) runAhead() error {
	la := rk.next
	rk.next = nil
	if la == nil || !rk.saveUndo(la) {
		return nil
	}
	// An eager step ahead answers at once, so it cannot take a penalised
	// draw, whose Adjust comes with its request: only a replay, which keeps
	// its logits until then, is run ahead for one.
	eager := rk.runArgmax
	if d := la.req.draw; d != nil {
		eager = rk.runSample
		if d.Adjust != nil {
			eager = nil
		}
	}
	if g, ok := rk.replay(la.req); ok {
		la.g = g
		rk.ahead = la
	} else if eager != nil {
		if id, err := eager(la.req); err == nil {
			la.id = id
			rk.ahead = la
		}
	}
	if rk.ahead == nil {
		rk.restore(la) // a failed step may have moved a hybrid's state
	}
	if err := rk.lost("a step run ahead"); err != nil {
		rk.ahead = nil
		return err
	}
	return nil
}

// takeAhead is the answer computed ahead for req, if req is the guessed
// step; any other request drops the guess.
func (rk *rank) takeAhead(req forwardReq) (int32, bool, error) {
	la := rk.ahead
	// A replay that draws after it (not a drawn recording) draws with the
	// request's own Adjust.
	drawsLater := la != nil && la.g != nil && !isDrawn(la.g)
	if la == nil || req.start != la.req.start || req.want != la.req.want || req.state != la.req.state || req.argmax != la.req.argmax ||
		!slices.Equal(req.tokens, la.req.tokens) || !slices.Equal(req.table, la.req.table) ||
		!sameDraw(req.draw, la.req.draw, drawsLater) {
		rk.dropAhead()
		return 0, false, nil
	}
	rk.ahead = nil
	rk.aheadHits++
	switch {
	case drawsLater && la.req.draw != nil:
		id, err := rk.graphDraw(la.g, *req.draw)
		return id, true, err
	case la.g != nil:
		id, err := rk.feedAhead(la, req)
		return id, true, err
	}
	return la.id, true, nil
}

// sameDraw reports whether a request's draw (nil: an argmax) is the one
// a step was run ahead with: the same rule and this step's variate. A
// replay that draws after it (drawsLater) draws when the request comes,
// with the request's Adjust (penalties and bias change with every token),
// so only a draw made ahead (an eager step's, a drawn recording's) must
// have had the same Adjust.
func sameDraw(req, ahead *session.Draw, drawsLater bool) bool {
	if req == nil || ahead == nil {
		return req == ahead
	}
	r, a := *req, *ahead
	if drawsLater {
		r.Adjust, a.Adjust = nil, nil
	}
	return r.SameRule(a) && r.U == a.U
}

// dropAhead forgets the step run ahead. A replay still in flight is
// waited for first, so that what follows (a new pool drops every
// recording) never frees a graph the device is running.
func (rk *rank) dropAhead() {
	la := rk.ahead
	if la == nil {
		return
	}
	if la.g != nil {
		la.g.Argmax() // a device failure shows in serve's check of the backend
	}
	rk.restore(la)
	rk.ahead = nil
}
