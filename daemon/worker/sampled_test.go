package worker

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/internal/kvseq"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// TestSampledOverWorker: sampled generations without logprobs step with
// ForwardSample (counted), penalised and biased ones with their Adjust,
// and draw exactly the in-process session's tokens for the same seed, in
// a worker and in a group; so do greedy ones whose penalties or bias
// change the argmax (a top-k 1 draw); those with logprobs (or a
// temperature whose inverse no float32 holds) still get the logits.
func TestSampledOverWorker(t *testing.T) {
	for _, world := range worlds() {
		t.Run(fmt.Sprintf("tp%d", world), func(t *testing.T) {
			p := newPair(t, "qwen3", world, 0)
			px := p.workerPx
			p.open("a")
			p.append("a", prompt(30, 5))
			seed := uint64(11)
			var total int64
			for _, sp := range []session.SamplingParams{
				{Temperature: 0.7},
				{Temperature: 0.7, TopP: 0.9},
				{Temperature: 0.6, TopK: 20, TopP: 0.95},
				{Temperature: 1.2, MinP: 0.05},
				{Temperature: 3, TopP: 0.5},
				{Temperature: 0.8, RepetitionPenalty: 1.3},
				{Temperature: 0.8, FrequencyPenalty: 0.5, PresencePenalty: 0.25},
				{Temperature: 2, TopP: 0.9, RepetitionPenalty: 0.7, FrequencyPenalty: -0.3},
				{Temperature: 0.8, LogitBias: map[int32]float32{3: 2, 7: -100, 1 << 30: 5}},
				{Temperature: 1.5, LogitBias: map[int32]float32{11: 30}, PresencePenalty: 1}, // 11 drawn, then held back
				// Greedy, the argmax after the penalties and bias.
				{RepetitionPenalty: 1.3},
				{PresencePenalty: 0.5, FrequencyPenalty: 0.5},
				{LogitBias: map[int32]float32{11: 30}, PresencePenalty: 100}, // 11, then anything else
				{Temperature: 0.7, TopK: 1, RepetitionPenalty: 0.8, LogitBias: map[int32]float32{2: -100}},
			} {
				sp.Seed = &seed
				before, argmax := px.SampledSteps(), px.ArgmaxSteps()
				ids := p.generate("a", session.GenerateParams{MaxTokens: 9, Sampling: sp})
				// Every token but one whose logits an append kept (the first)
				// is drawn by the worker (a sampled EOS may end early).
				if n := px.SampledSteps() - before; n < int64(len(ids)-1) || px.ArgmaxSteps() != argmax {
					t.Fatalf("%+v: %d sampled steps for %d tokens, %d argmax-only", sp, n, len(ids), px.ArgmaxSteps()-argmax)
				}
				total += px.SampledSteps() - before
			}
			if total < 20 {
				t.Fatalf("%d sampled steps in all", total)
			}
			before := px.SampledSteps()
			for _, gp := range []session.GenerateParams{
				{MaxTokens: 3, Logprobs: true, Sampling: session.SamplingParams{Temperature: 0.8, Seed: &seed}},
				{MaxTokens: 3, Logprobs: true, Sampling: session.SamplingParams{Temperature: 0.8, RepetitionPenalty: 1.3, Seed: &seed}},
				{MaxTokens: 3, Sampling: session.SamplingParams{Temperature: 1e-40, Seed: &seed}}, // 1/T past a float32
			} {
				p.generate("a", gp)
			}
			if n := px.SampledSteps() - before; n != 0 {
				t.Fatalf("%d sampled steps for generations that need the logits", n)
			}
		})
	}
}

// TestSampledLookaheadReplay drives a rank as serve does (each reply, then
// the step run ahead) with ForwardSample requests over the fake recorder:
// the chain is answered from the steps replayed ahead and draws exactly
// the tokens of the in-process model's logits with the same variates; a
// request whose variate is not the one guessed is answered by its own
// step.
func TestSampledLookaheadReplay(t *testing.T) {
	for _, penalised := range []bool{false, true} {
		t.Run(fmt.Sprintf("penalised=%v", penalised), func(t *testing.T) { sampledLookahead(t, penalised) })
	}
}

// histAdjust is a penalised draw's Adjust after the tokens hist: a
// repetition penalty and a count penalty on each, and a bias on token 5.
func histAdjust(hist []int32) *session.Adjust {
	ids := append([]int32{5}, hist...)
	slices.Sort(ids)
	a := &session.Adjust{Repetition: 1.5}
	for _, id := range slices.Compact(ids) {
		e := session.AdjustEntry{ID: id}
		if slices.Contains(hist, id) {
			e.Flags |= session.AdjustRepeat | session.AdjustSub
			e.Sub = 0.8
		}
		if id == 5 {
			e.Flags |= session.AdjustBias
			e.Bias = 3
		}
		a.Entries = append(a.Entries, e)
	}
	return a
}

// sampledLookahead is TestSampledLookaheadReplay, its draws penalised or
// not: a penalised one's Adjust counts every token before it, so the
// replay run ahead must draw with the request's, not the guess's.
func sampledLookahead(t *testing.T, penalised bool) {
	const bs, blocks, n = 4, 64, 20
	toks := prompt(30, 9)
	m := inProcess(t, "qwen3")
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(blocks - 1 - i)
	}
	rule := session.Draw{Temperature: 0.9, TopP: 0.95}
	us := make([]float64, n+2)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range us {
		us[i] = r.Float64()
	}
	drawAt := func(i int, hist []int32) session.Draw {
		d := rule
		d.U, d.Next = us[i], us[i+1]
		if penalised {
			d.Adjust = histAdjust(hist)
		}
		return d
	}
	// The reference: the model alone on a private pool, a step a token as
	// kvseq.Greedy, drawn with the same variates; last is the logits after
	// the n-th token.
	var ref []int32
	var lastLogits []float32
	{
		var dr session.Drawer
		seq, err := kvseq.Private(m, len(toks)+n+1, 16, false)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Forward(seq, toks, models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			id := dr.Token(l, drawAt(i, ref))
			ref = append(ref, id)
			seq.Start = len(toks) + i
			if l, err = m.Forward(seq, []int32{id}, models.LastLogits); err != nil {
				t.Fatal(err)
			}
		}
		lastLogits = l
	}
	rk, f := newGraphRank(t, blocks, bs)
	if _, _, err := step(rk, msgForward, table, 0, toks[:len(toks)-1], models.NoLogits); err != nil {
		t.Fatal(err)
	}
	var got []int32
	last := toks[len(toks)-1:]
	for i := range n {
		id, err := sampleStep(rk, table, len(toks)-1+i, last, drawAt(i, got))
		if err != nil {
			t.Fatal(err)
		}
		if err := rk.runAhead(); err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
		last = []int32{id}
	}
	if !slices.Equal(got, ref) {
		t.Fatalf("sampled with lookahead %v,\nin process %v", got, ref)
	}
	if rk.aheadHits == 0 || f.launched == 0 {
		t.Fatalf("%d requests answered ahead, %d replays", rk.aheadHits, f.launched)
	}
	// Unpenalised steps, after the first device draw, replay recordings
	// that draw their token themselves and feed each other (CaptureDrawn)
	// where greedy ones would (two of every four positions at four tokens
	// a block: rank_ahead_test.go); penalised ones never do (each request
	// brings its own Adjust).
	if fed := f.drawnFed; (penalised && fed != 0) || (!penalised && fed < n/4) {
		t.Fatalf("penalised %v: %d of %d steps fed by a drawn recording", penalised, fed, n)
	}
	// The pending guess drew with us[n]; ask with another variate.
	hits := rk.aheadHits
	d := drawAt(n, got)
	d.U = math.Nextafter(d.U, 0) / 2
	id, err := sampleStep(rk, table, len(toks)-1+n, last, d)
	if err != nil {
		t.Fatal(err)
	}
	var dr session.Drawer
	if want := dr.Token(lastLogits, d); id != want || rk.aheadHits != hits {
		t.Fatalf("another variate at the guessed step: %d, want %d (answered ahead: %v)", id, want, rk.aheadHits != hits)
	}
}

// TestForwardSampleRejectsBadDraws: a ForwardSample whose draw no session
// would make is a bad request, not a token.
func TestForwardSampleRejectsBadDraws(t *testing.T) {
	rk, _ := newGraphRank(t, 8, 4)
	table := []int32{0, 1, 2, 3}
	for _, d := range []session.Draw{
		{Temperature: 0, U: 0.5},
		{Temperature: math.NaN(), U: 0.5},
		{Temperature: 1e-40, U: 0.5}, // 1/T overflows a float32
		{Temperature: 1, TopK: -1, U: 0.5},
		{Temperature: 1, TopP: 1.5, U: 0.5},
		{Temperature: 1, MinP: math.Inf(1), U: 0.5},
		{Temperature: 1, U: 1},
		{Temperature: 1, U: 0.5, Next: -0.1},
		{Temperature: 1, U: 0.5, Adjust: &session.Adjust{Entries: []session.AdjustEntry{{ID: 2, Flags: session.AdjustRepeat}}}},
		{Temperature: 1, U: 0.5, Adjust: &session.Adjust{Entries: []session.AdjustEntry{{ID: 2, Flags: session.AdjustSub}, {ID: 1, Flags: session.AdjustSub}}}},
		{Temperature: 1, U: 0.5, Adjust: &session.Adjust{Entries: []session.AdjustEntry{{ID: 2, Flags: session.AdjustSub, Sub: math.NaN()}}}},
		{Temperature: 1, U: 0.5, Adjust: &session.Adjust{Entries: []session.AdjustEntry{{ID: 2, Flags: 0x40}}}},
	} {
		if _, err := sampleStep(rk, table, 0, []int32{1}, d); !errors.Is(err, errBadRequest) {
			t.Errorf("%+v: %v, want a bad request", d, err)
		}
	}
	// An adjusted draw round-trips, and one id past the vocabulary is
	// ignored, as the session ignores such a logit_bias id.
	adj := &session.Adjust{Repetition: 1.2, Entries: []session.AdjustEntry{{ID: 1, Flags: session.AdjustRepeat | session.AdjustSub, Sub: 0.25},
		{ID: 5, Flags: session.AdjustBias, Bias: -3}, {ID: 1 << 30, Flags: session.AdjustBias, Bias: 7}}}
	req0 := forwardReq{start: 0, want: models.LastLogits, tokens: []int32{1}, table: table[:1],
		draw: &session.Draw{Temperature: 1, U: 0.5, Adjust: adj}}
	back, err := decodeForwardSample(req0.encode())
	if err != nil || !reflect.DeepEqual(back.draw, req0.draw) {
		t.Errorf("round trip: %+v, %v; want %+v", back.draw, err, req0.draw)
	}
	if _, err := sampleStep(rk, table, 0, []int32{1}, *req0.draw); err != nil {
		t.Errorf("adjusted draw: %v", err)
	}
	// Truncated: the forward fields without the draw.
	req := forwardReq{start: 0, want: models.LastLogits, tokens: []int32{1}, table: table[:1]}
	if _, _, _, err := rk.handle(frame{typ: msgForwardSample, payload: req.encode()}); err == nil {
		t.Error("a ForwardSample without its draw was answered")
	}
}

// sampleStep sends one ForwardSample request (table cut as the Proxy
// cuts it) and returns the token.
func sampleStep(rk *rank, table []int32, start int, tokens []int32, d session.Draw) (int32, error) {
	bs := rk.spec.BlockSize
	nb := min(len(table), (start+len(tokens)+bs-1)/bs)
	req := forwardReq{start: start, want: models.LastLogits, tokens: tokens, table: table[:nb], draw: &d}
	typ, payload, _, err := rk.handle(frame{typ: msgForwardSample, payload: req.encode()})
	if err != nil {
		return 0, err
	}
	if typ != msgToken {
		return 0, fmt.Errorf("reply %s", typ)
	}
	dd := dec{b: payload}
	v := dd.i32("token")
	return int32(v), dd.done("token")
}

// drawingGraph is a StepGraph that draws on its "device": it answers id
// (counting the calls), as a backend's StepDrawer would.
type drawingGraph struct {
	StepGraph
	id    int32
	calls int
}

func (g *drawingGraph) Draw(session.Draw) (int32, error) { g.calls++; return g.id, nil }

// TestGraphDrawOnDevice: a replay that can draw on the device
// (StepDrawer) answers a sampled step without the host's draw, unless
// HostDraw is set; a device answer outside the vocabulary falls back to
// the host's draw from the logits.
func TestGraphDrawOnDevice(t *testing.T) {
	rk, _ := newGraphRank(t, 8, 4)
	vocab := rk.model.Config.VocabSize
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(i % 13)
	}
	host := &hostLogits{l: logits}
	d := session.Draw{Temperature: 0.8, TopP: 0.9, U: 0.37}
	var dr session.Drawer
	want := dr.Token(logits, d)

	g := &drawingGraph{StepGraph: host, id: 5}
	if id, err := rk.graphDraw(g, d); err != nil || id != 5 || g.calls != 1 {
		t.Fatalf("device draw: %d %v (%d calls), want 5", id, err, g.calls)
	}
	k := d
	k.TopK = 20
	if id, err := rk.graphDraw(g, k); err != nil || id != 5 || g.calls != 2 {
		t.Fatalf("top-k: %d %v (%d device calls), want 5", id, err, g.calls)
	}
	rk.opts.HostDraw = true
	if id, err := rk.graphDraw(g, d); err != nil || id != want || g.calls != 2 {
		t.Fatalf("HostDraw: %d %v (%d device calls), want the host's %d", id, err, g.calls, want)
	}
	rk.opts.HostDraw = false
	bad := &drawingGraph{StepGraph: host, id: int32(vocab)}
	if id, err := rk.graphDraw(bad, d); err != nil || id != want || bad.calls != 1 {
		t.Fatalf("a device answer past the vocabulary: %d %v, want the host's %d", id, err, want)
	}
}

// hostLogits is a finished replay whose logits are l.
type hostLogits struct{ l []float32 }

func (h *hostLogits) Launch(Step) error          { return nil }
func (h *hostLogits) Argmax() (int32, error)     { return session.Argmax(h.l), nil }
func (h *hostLogits) Logits(dst []float32) error { copy(dst, h.l); return nil }
func (h *hostLogits) Close()                     {}

// BenchmarkAdjustWire: a penalised step's request after a long prompt (a
// repetition penalty over 12000 distinct tokens), encoded and decoded.
func BenchmarkAdjustWire(b *testing.B) {
	a := &session.Adjust{Repetition: 1.1}
	for i := range 12000 {
		e := session.AdjustEntry{ID: int32(i * 2), Flags: session.AdjustRepeat}
		if i%40 == 0 {
			e.Flags |= session.AdjustSub
			e.Sub = 0.5
		}
		a.Entries = append(a.Entries, e)
	}
	req := forwardReq{start: 100, want: models.LastLogits, tokens: []int32{1}, table: make([]int32, 64),
		draw: &session.Draw{Temperature: 0.7, TopP: 0.9, U: 0.5, Adjust: a}}
	for range b.N {
		if f, err := decodeForwardSample(req.encode()); err != nil || f.draw == nil {
			b.Fatal(err)
		}
	}
}
