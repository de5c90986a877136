package worker

// The Proxy's model operations: the KV pool, forward steps and block
// copies, each a request to every rank of the group (proxy.go has its
// lifecycle and supervision).

import (
	"errors"
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// kvPool is the Proxy's handle on the worker's KV pool.
type kvPool struct {
	p    *Proxy
	spec kernels.KVSpec // the group's: every rank's heads
	rank kernels.KVSpec // each rank's share
}

func (k *kvPool) Spec() kernels.KVSpec { return k.spec }

// NewKVPool implements kernels.KVOps. A worker holds one pool; restarted
// workers allocate it again during their handshake.
func (p *Proxy) NewKVPool(spec kernels.KVSpec) (kernels.KVPool, error) {
	if err := validSpec(spec); err != nil {
		return nil, err
	}
	// Float16 where asked and K and V rows have one width, as both
	// backends decide (kernels.KVSpec.Half): the ranks' pools then hold
	// float16, and read their blocks out widened to float32.
	spec.Half = spec.HalfRows()
	rank := spec
	if n := p.world(); spec.KVHeads%n != 0 {
		return nil, fmt.Errorf("worker: KV pool of %d heads over %d ranks", spec.KVHeads, n)
	} else {
		rank.KVHeads /= n
	}
	p.req.Lock()
	defer p.req.Unlock()
	p.mu.Lock()
	if p.pool != nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("worker: a worker holds one KV pool, and it has one")
	}
	p.mu.Unlock()
	g, err := p.worker()
	if err != nil {
		return nil, err
	}
	var e enc
	e.spec(rank)
	if _, err := p.call(g, msgNewKVPool, same(e.b, 0), msgOK); err != nil {
		return nil, fmt.Errorf("new kv pool: %w", err)
	}
	kp := &kvPool{p: p, spec: spec, rank: rank}
	p.mu.Lock()
	p.pool = kp
	p.mu.Unlock()
	p.kvGen = g.gen
	return kp, nil
}

func (p *Proxy) ownPool(kp kernels.KVPool) (*kvPool, error) {
	k, ok := kp.(*kvPool)
	if !ok || k.p != p {
		return nil, fmt.Errorf("worker: KV pool %T is not this worker's", kp)
	}
	return k, nil
}

// lostKV is the error of a Forward that cannot trust the KV (p.req held).
func (p *Proxy) lostKV(err error) error {
	p.kvGen = -1
	return fmt.Errorf("%w (%w)", err, session.ErrKVLost)
}

// Forward implements session.Runner.
func (p *Proxy) Forward(seq models.Seq, tokens []int32, want models.Logits) ([]float32, error) {
	var rows int
	width := p.cfg.VocabSize // floats a row
	switch want {
	case models.LastLogits:
		rows = 1
	case models.AllLogits:
		rows = len(tokens)
	case models.LastHidden:
		rows, width = 1, p.cfg.HiddenSize
	case models.AllHidden:
		rows, width = len(tokens), p.cfg.HiddenSize
	case models.NoLogits:
	case models.MarkedLogits:
		st, err := p.ownState(seq.State)
		if err != nil {
			return nil, err
		}
		rows = st.markCount() + 1
	default:
		return nil, fmt.Errorf("forward: logits mode %d", want)
	}
	outBytes := int64(rows) * int64(width) * 4
	if outBytes > MaxFrame-64 {
		return nil, fmt.Errorf("forward: %d rows of logits exceed a frame; ask for fewer", rows)
	}
	// Every rank runs the step (on its heads, joined by its collectives);
	// rank 0 returns the logits (in its shared memory when they fit), the
	// others an empty list.
	var logits []float32
	err := p.step(seq, tokens, want, nil, msgForward, int(outBytes)+64, func(pr *proc, f frame) error {
		d := dec{b: f.payload}
		var l []float32
		var err error
		if f.typ == msgLogitsShared {
			ref := d.ref("logits")
			if err = d.done("logits"); err == nil {
				l = make([]float32, ref.count)
				err = readShared(pr.shm, pr.shmSize, ref, l, "logits")
				p.shared.logits.Add(1)
			}
		} else {
			l = d.f32s("logits")
			err = d.done("logits")
		}
		want := outBytes
		if pr.rank > 0 {
			want = 0
		}
		if err == nil && int64(len(l))*4 != want {
			err = fmt.Errorf("%w: rank %d: %d logits, want %d", ErrBadFrame, pr.rank, len(l), want/4)
		}
		if pr.rank == 0 {
			logits = l
		}
		return err
	}, msgLogits, msgLogitsShared)
	if err != nil || want == models.NoLogits {
		return nil, err
	}
	return logits, nil
}

// ForwardArgmax implements session.GreedyRunner: the worker runs the
// step and answers only the argmax of the last token's logits (every
// rank of a group computes it from its full logits; rank 0's is taken),
// so a greedy decode step moves 4 bytes back instead of the vocabulary.
func (p *Proxy) ForwardArgmax(seq models.Seq, tokens []int32) (int32, error) {
	id, err := p.tokenStep(seq, tokens, nil)
	if err == nil {
		p.argmaxSteps.Add(1)
	}
	return id, err
}

// ForwardSample implements session.SamplingRunner: the worker runs the
// step and draws the token from the last token's logits with d (rank 0's
// answer is taken; every rank draws alike), so a sampled decode step,
// like a greedy one, moves 4 bytes back instead of the vocabulary and may
// be run ahead.
func (p *Proxy) ForwardSample(seq models.Seq, tokens []int32, d session.Draw) (int32, error) {
	if err := d.Check(); err != nil {
		return 0, err
	}
	id, err := p.tokenStep(seq, tokens, &d)
	if err == nil {
		p.sampledSteps.Add(1)
	}
	return id, err
}

// tokenStep is a step answered by a token: ForwardArgmax's (draw nil) or
// ForwardSample's.
func (p *Proxy) tokenStep(seq models.Seq, tokens []int32, draw *session.Draw) (int32, error) {
	typ := msgForwardArgmax
	if draw != nil {
		typ = msgForwardSample
	}
	vocab := p.cfg.VocabSize
	var id int32
	err := p.step(seq, tokens, models.LastLogits, draw, typ, 64, func(pr *proc, f frame) error {
		d := dec{b: f.payload}
		v := d.i32("token")
		if err := d.done("token"); err != nil {
			return err
		}
		if v < 0 || v >= vocab {
			return fmt.Errorf("%w: rank %d: token %d outside the vocabulary (%d)", ErrBadFrame, pr.rank, v, vocab)
		}
		if pr.rank == 0 {
			id = int32(v)
		}
		return nil
	}, msgToken)
	return id, err
}

// SampledSteps counts the steps answered by ForwardSample.
func (p *Proxy) SampledSteps() int64 { return p.sampledSteps.Load() }

// ArgmaxSteps counts the steps answered by ForwardArgmax.
func (p *Proxy) ArgmaxSteps() int64 { return p.argmaxSteps.Load() }

// step sends a forward request of type typ (with draw for a
// ForwardSample) to every rank and hands each rank's reply (of a type in
// reply, at most limit bytes) to decode, in rank order (p.req held). A
// reply that does not decode loses the group.
func (p *Proxy) step(seq models.Seq, tokens []int32, want models.Logits, draw *session.Draw, typ msgType, limit int, decode func(pr *proc, f frame) error, reply ...msgType) error {
	st, err := p.ownState(seq.State)
	if err != nil {
		return err
	}
	kp, err := p.ownPool(seq.Pool)
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return errors.New("forward: no tokens")
	}
	// Only the blocks that cover the positions travel.
	end := seq.Start + len(tokens)
	nb := min(len(seq.Table), (end+kp.spec.BlockSize-1)/kp.spec.BlockSize)
	req := forwardReq{start: seq.Start, want: want, tokens: tokens, table: seq.Table[:nb], draw: draw}

	p.req.Lock()
	defer p.req.Unlock()
	g, err := p.worker()
	if err != nil {
		return p.lostKV(err)
	}
	switch {
	case p.kvGen == -1:
		p.kvGen = g.gen
	case p.kvGen != g.gen:
		return p.lostKV(fmt.Errorf("%w: restarted (generation %d)", ErrWorkerLost, g.gen))
	}
	if err := p.flushFrees(g); err != nil {
		return p.lostKV(err)
	}
	if st != nil {
		// The worker advances the state in place: until the reply says
		// it did, its position is unknown.
		if req.state, err = p.live(g, st, true); err != nil {
			if errors.Is(err, ErrWorkerLost) {
				return p.lostKV(err)
			}
			return err
		}
		if st.pos != seq.Start {
			return fmt.Errorf("%w: state holds %d tokens, pass starts at position %d", models.ErrState, st.pos, seq.Start)
		}
		st.pos = -1
	}
	replies, err := p.call(g, typ, same(req.encode(), limit), reply...)
	if err != nil {
		if errors.Is(err, ErrWorkerLost) {
			return p.lostKV(err)
		}
		return err
	}
	for r, f := range replies {
		if err := decode(g.ranks[r], f); err != nil { // the worker does not speak the protocol: replace it
			p.lose(g, err)
			return p.lostKV(fmt.Errorf("%s: %w: %w", typ, ErrWorkerLost, err))
		}
	}
	if st != nil {
		st.pos = seq.Start + len(tokens)
		if m := st.marks; m != nil && m.gen == g.gen && m.pos[len(m.pos)-1] <= st.pos {
			m.filled = true
		}
	}
	return nil
}

// blockOp runs a KV block request on every rank (p.req held by the
// caller); the KVOps methods have no error results, so failures are
// logged: a lost worker's KV is reported by the next Forward
// (session.ErrKVLost). It returns the group and the replies, in rank
// order (nil on failure).
func (p *Proxy) blockOp(what string, kp kernels.KVPool, typ msgType, req func(*proc) rankReq, want ...msgType) (*group, []frame) {
	if _, err := p.ownPool(kp); err != nil {
		p.log.Error(what, "err", err)
		return nil, nil
	}
	g, err := p.worker()
	if err != nil {
		p.log.Error(what, "err", err)
		return nil, nil
	}
	replies, err := p.call(g, typ, req, want...)
	if err != nil {
		p.log.Error(what, "err", err)
		return nil, nil
	}
	return g, replies
}

// CopyKVBlock implements kernels.KVOps.
func (p *Proxy) CopyKVBlock(kp kernels.KVPool, dst, src int) {
	var e enc
	e.i32(dst)
	e.i32(src)
	p.req.Lock()
	defer p.req.Unlock()
	p.blockOp("copy kv block", kp, msgCopyBlock, same(e.b, 0), msgOK)
}

// ReadKVBlock implements kernels.KVOps: the ranks' shares of the block,
// in rank order, each from the rank's shared memory or inline in its
// reply. On failure dst is zeroed; the loss is reported by the next
// Forward, and the cache then drops every block, including any host copy
// made from dst.
func (p *Proxy) ReadKVBlock(kp kernels.KVPool, block int, dst []float32) {
	var e enc
	e.i32(block)
	n := p.world()
	per := len(dst) / n
	p.req.Lock()
	defer p.req.Unlock()
	g, replies := p.blockOp("read kv block", kp, msgReadBlock, same(e.b, per*4+64), msgBlock, msgBlockShared)
	if replies == nil {
		clear(dst)
		return
	}
	for r, f := range replies {
		part := dst[r*per : (r+1)*per]
		d := dec{b: f.payload}
		var err error
		if per*n != len(dst) {
			err = fmt.Errorf("read kv block: %d floats over %d ranks", len(dst), n)
		} else if f.typ == msgBlockShared {
			ref := d.ref("block")
			if err = d.done("block"); err == nil {
				err = readShared(g.ranks[r].shm, g.ranks[r].shmSize, ref, part, "block")
				p.shared.reads.Add(1)
			}
		} else if got := d.count(4, "block"); got != per || len(d.b) != 4*got {
			err = fmt.Errorf("%w: rank %d: %d floats, want %d", ErrBadFrame, r, got, per)
		} else {
			copy(f32Bytes(part), d.b)
		}
		if err != nil {
			p.log.Error("read kv block", "rank", r, "err", err)
			p.lose(g, err)
			clear(dst)
			return
		}
	}
}

// WriteKVBlock implements kernels.KVOps: each rank gets its share of src,
// through its shared memory when it fits, else inline.
func (p *Proxy) WriteKVBlock(kp kernels.KVPool, block int, src []float32) {
	n := p.world()
	per := len(src) / n
	p.req.Lock()
	defer p.req.Unlock()
	p.blockOp("write kv block", kp, msgWriteBlock, func(pr *proc) rankReq {
		part := src[pr.rank*per : (pr.rank+1)*per]
		var e enc
		e.i32(block)
		if int64(per)*4 <= pr.shmSize && per > 0 {
			// One request at a time: the region is free until the reply.
			if err := writeShared(pr.shm, f32Bytes(part)); err == nil {
				e.ref(shmRef{count: per})
				p.shared.writes.Add(1)
				return rankReq{typ: msgWriteBlockShared, payload: e.b}
			}
		}
		e.f32sHeader(per)
		return rankReq{payload: e.b, extra: f32Bytes(part)}
	}, msgOK)
}

// Ping checks that the worker answers.
func (p *Proxy) Ping() error {
	p.req.Lock()
	defer p.req.Unlock()
	g, err := p.worker()
	if err != nil {
		return err
	}
	_, err = p.call(g, msgPing, same(nil, 0), msgOK)
	return err
}
