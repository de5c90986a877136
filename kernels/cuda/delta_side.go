//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// A Gated DeltaNet layer's one-token delta rule updates 3 MB of state
// (Qwen3.5-27B) that nothing reads until the same layer's next step, yet
// in place its stores sit on the step's critical path: the grid counts as
// complete only once they have drained, and the gated norm's wait returns
// ~2.5 µs after the last block instead of ~0.9 (docs/benchmarks.md,
// 2026-12-01 from 23:16). Inside a decode graph the delta rule is
// therefore split in two: gated_delta_rule_s computes the layer's output
// from the state it reads and writes only the update's operands (each
// value head's decay and normalised key, each column's delta), and
// delta_state_update applies them on a second stream, a side branch of
// the graph joined at the capture's end, so that every replay completes
// with every layer's state updated. The two forms round the update
// identically (hybrid.cu: stateDecay, stateAdd), so a replay leaves the
// bits an eager step does (conformance: DeltaSide).
//
// A layer's update waits for the next DeltaNet layer's convolution as
// well as for its own delta rule, so that it runs during that layer's mix,
// when DRAM is mostly idle, rather than beside the projections that stream
// weights; the last layer's runs at the join. One float4 a thread, the
// whole state in one wave of blocks. Measured on an H200 (Qwen3.5-27B FP8
// fed decode, four interleaved rounds, docs/benchmarks.md 2026-12-02 from
// 06:50): 134.9–135.0 tok/s against 134.2–134.3 in place; right after its
// own delta rule 134.5 (192 blocks); without any update at all (the bound,
// wrong results) 136.2.
//
// Only plain one-token passes inside a capture take it: an eager pass has
// no end at which to join, and a pass followed by a snapshot of the state
// (GatedDeltaRuleSegments) must see the state updated.

// deltaSideState is the backend's side stream and the update operands of
// a capture's side updates: the k-th of a capture uses upd[k], whichever
// graph it is in (replays run one at a time on the backend's stream, and
// each completes with its side branch).
type deltaSideState struct {
	stream cu.Stream
	s      cStream
	// fork marks a layer's delta rule, at the next layer's convolution
	// (where its update starts) and join the side stream's last update.
	fork, at, join cu.Event
	err            error // no side stream: the in-place form
	upd            []cu.DevicePtr
	updN           []int64
}

// ready makes the side stream and its events once (context current, not
// capturing).
func (d *deltaSideState) ready() error {
	if d.s != nil || d.err != nil {
		return d.err
	}
	var err error
	if d.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		d.err = fmt.Errorf("cuda: delta rule side stream: %w", err)
		return d.err
	}
	for _, e := range []*cu.Event{&d.fork, &d.at, &d.join} {
		if *e, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			d.err = fmt.Errorf("cuda: delta rule side event: %w", err)
			return d.err
		}
	}
	d.s = cstream(d.stream)
	return nil
}

// sideUpdate is a layer's delta_state_update, pending in a capture until
// the next layer's delta rule or EndCapture.
type sideUpdate struct {
	state, upd cu.DevicePtr
	s          kernels.DeltaShape
}

// deltaRuleSide runs a one-token delta rule as the split form inside a
// capture and reports whether it did; false leaves the pass to deltaRule.
func (b *Backend) deltaRuleSide(m *hybridMod, r deltaRows, state cu.DevicePtr, aLog, dtBias kernels.Tensor, rows int, s kernels.DeltaShape) bool {
	c, d := b.cap, &m.side
	if c == nil || rows != 1 || !switches.deltaSide || !switches.deltaLean || s.DV%4 != 0 || d.s == nil {
		return false // d.s: made before the capture began (prepareSide), or it failed
	}
	k := c.sides
	if k == len(d.upd) {
		d.upd, d.updN = append(d.upd, 0), append(d.updN, 0)
	}
	upd := b.scratch(&d.upd[k], &d.updN[k], int64(s.VHeads*(1+s.DK+s.DV))*4)
	if c.sideNext.upd != 0 {
		// The previous layer's update, behind what the main stream has
		// queued now: this layer's convolution.
		b.fail(d.at.Record(b.stream))
		b.fail(d.stream.Wait(d.at, 0))
		b.sideUpdate(m, c.sideNext)
	}
	al, dt := b.vecOf(aLog, "A_log"), b.vecOf(dtBias, "dt_bias")
	b.runHybrid(m.deltaSide, s.VHeads*cdiv(s.DV, 32), 1, 256, ptr(r.dst), ptr(r.qkv), ptr(r.a), ptr(r.b),
		ptr(state), ptr(al), ptr(dt), i32(s.KHeads), i32(s.VHeads), i32(s.DK), i32(s.DV), ptr(upd))
	b.fail(d.fork.Record(b.stream))
	b.fail(d.stream.Wait(d.fork, 0))
	c.sides++
	c.sideNext = sideUpdate{state, upd, s}
	return true
}

// sideUpdate launches u on the side stream, which already waits for its
// delta rule.
func (b *Backend) sideUpdate(m *hybridMod, u sideUpdate) {
	if b.err != nil || ablated("hybrid") || ablated("delta_state_update") {
		return
	}
	n4 := u.s.VHeads * u.s.DK * u.s.DV / 4
	b.a(ptr(u.state), ptr(u.upd), i32(u.s.VHeads), i32(u.s.DK), i32(u.s.DV))
	b.fail(launch(m.stateUpdate, cdiv(n4, 256), 1, 256, m.side.s, &b.args, b.nargs))
}

// prepareSide makes the side stream before a capture begins (BeginCapture:
// a stream made during one would be recorded into it). A failure leaves
// the in-place form.
func (b *Backend) prepareSide() {
	if switches.deltaSide {
		b.hybridState().side.ready()
	}
}

// joinSide ends a capture's side branch (EndCapture, before the capture
// ends): the last layer's update, then the main stream waits for the side
// stream, so the graph's replay completes with it.
func (b *Backend) joinSide(c *capture) {
	if c.sides == 0 {
		return
	}
	d := &b.hy.side
	b.sideUpdate(b.hy, c.sideNext)
	if err := d.join.Record(d.stream); err != nil {
		b.fail(fmt.Errorf("cuda: delta rule side branch: %w", err))
		return
	}
	b.fail(b.stream.Wait(d.join, 0))
}
