//go:build cuda

package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/pocketllm/pocketllm/internal/kvseq"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/kernels/cuda"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/safetensors"
	"github.com/pocketllm/pocketllm/session"
)

// runParity checks fixture checkpoints on the GPU against their
// references: prompt logits (max|Δ|/max|ref|), top-1 agreement per prompt
// position, the KV-cached greedy continuation run eagerly, and the same
// continuation replayed as one CUDA graph per token (models whose decode
// step keeps no host logic: not MoE routing on the host, not MLA's
// zero-filled scratch; the others report it as n/a).
func runParity(args []string) error {
	fs := flag.NewFlagSet("parity", flag.ContinueOnError)
	dev := deviceFlag(fs)
	tol := fs.Float64("tol", 1e-2, "largest relative logits error that passes")
	skip := fs.Bool("skip-unsupported", false, "report fixtures whose weight formats the backend lacks as skipped, not failed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	g, err := openDevice(*dev)
	if err != nil {
		return err
	}
	failed := 0
	for _, dir := range fs.Args() {
		if err := parityOne(g, dir, *tol); *skip && errors.Is(err, kernels.ErrUnsupported) && g.Err() == nil {
			fmt.Printf("%-12s skipped: %v\n", filepath.Base(dir), err)
		} else if err != nil {
			fmt.Printf("%-12s FAIL: %v\n", filepath.Base(dir), err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d fixtures failed", failed, len(fs.Args()))
	}
	return nil
}

type reference struct {
	ids, greedy []int32
	logits      []float32
}

func loadReference(dir string) (*reference, error) {
	f, err := safetensors.OpenFile(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r reference
	for _, x := range []struct {
		name string
		i32  *[]int32
		f32  *[]float32
	}{{"input_ids", &r.ids, nil}, {"greedy", &r.greedy, nil}, {"logits", nil, &r.logits}} {
		t, ok := f.Tensor(x.name)
		if !ok {
			return nil, fmt.Errorf("reference lacks %s", x.name)
		}
		if x.i32 != nil {
			*x.i32, err = t.Int32s()
		} else {
			*x.f32, err = t.Float32s()
		}
		if err != nil {
			return nil, err
		}
	}
	return &r, nil
}

func parityOne(g *cuda.Backend, dir string, tol float64) error {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	m, err := ck.Model(g)
	if err != nil {
		return err
	}
	if _, err := g.PrepareDecode(0); err != nil { // as the daemon's ranks do
		return err
	}
	ref, err := loadReference(dir)
	if err != nil {
		return err
	}
	V := m.Config.VocabSize
	T := len(ref.ids)
	seq, err := kvseq.Private(m, T+len(ref.greedy), 4, true)
	if err != nil {
		return err
	}
	logits, err := m.Forward(seq, ref.ids, models.AllLogits)
	if err != nil {
		return err
	}
	if err := g.Err(); err != nil {
		return err
	}
	var maxDiff, maxRef float64
	for i := range ref.logits {
		maxDiff = math.Max(maxDiff, math.Abs(float64(logits[i]-ref.logits[i])))
		maxRef = math.Max(maxRef, math.Abs(float64(ref.logits[i])))
	}
	rel := maxDiff / maxRef
	top1 := 0
	for p := 0; p < T; p++ {
		if session.Argmax(logits[p*V:(p+1)*V]) == session.Argmax(ref.logits[p*V:(p+1)*V]) {
			top1++
		}
	}
	// The graph replay below decodes again from the prompt's end: keep a
	// recurrent state as the prompt left it.
	rewind := rewinder(seq, T)
	// Eager greedy decode.
	next := session.Argmax(logits[(T-1)*V:])
	first := next
	eager := make([]int32, 0, len(ref.greedy))
	for i := range ref.greedy {
		eager = append(eager, next)
		seq.Start = T + i
		l, err := m.Forward(seq, []int32{next}, models.LastLogits)
		if err != nil {
			return err
		}
		next = session.Argmax(l)
	}
	// Graph replay of the same continuation.
	if err := rewind(); err != nil {
		return err
	}
	graphTok, _, gerr := graphDecode(g, m, seq, T, first, len(ref.greedy), false)
	agree := func(got []int32) int {
		n := 0
		for i := range ref.greedy {
			if i < len(got) && got[i] == ref.greedy[i] {
				n++
			}
		}
		return n
	}
	gstat := fmt.Sprintf("%d/%d", agree(graphTok), len(ref.greedy))
	if gerr != nil {
		gstat = "n/a (" + gerr.Error() + ")"
	}
	// And once more, the replays feeding their own tokens.
	var fedTok []int32
	ferr := rewind()
	if ferr == nil {
		fedTok, _, ferr = graphDecode(g, m, seq, T, first, len(ref.greedy), true)
	}
	if ferr == nil {
		gstat += fmt.Sprintf(", fed %d/%d", agree(fedTok), len(ref.greedy))
	} else {
		gstat += ", fed n/a (" + ferr.Error() + ")"
	}
	marks, merr := markedParity(m, ref.ids, logits, maxRef)
	mstat := ""
	if merr == nil && marks >= 0 {
		mstat = fmt.Sprintf("  marks rel %.2e", marks)
	}
	hidden, herr := hiddenParity(ck, m, ref.ids)
	if herr == nil {
		mstat += fmt.Sprintf("  hidden rel %.2e", hidden)
	}
	pstat, perr := pairsParity(g, ck, ref.ids, len(ref.greedy))
	mstat += "  pairs " + pstat
	fmt.Printf("%-12s logits rel %.2e  top1 %d/%d  greedy eager %d/%d  greedy graph %s%s\n",
		filepath.Base(dir), rel, top1, T, agree(eager), len(ref.greedy), gstat, mstat)
	switch {
	case g.Err() != nil:
		return g.Err()
	case merr != nil:
		return merr
	case herr != nil:
		return herr
	case perr != nil:
		return fmt.Errorf("as a group of one rank: %w", perr)
	case hidden > tol:
		return fmt.Errorf("final hidden states (embeddings): relative error %.3g > %g against the CPU", hidden, tol)
	case marks > tol:
		return fmt.Errorf("marked pass: logits relative error %.3g > %g against one pass", marks, tol)
	case rel > tol:
		return fmt.Errorf("logits relative error %.3g > %g", rel, tol)
	case agree(eager) != len(ref.greedy):
		return fmt.Errorf("eager greedy %v, want %v", eager, ref.greedy)
	case gerr == nil && agree(graphTok) != len(ref.greedy):
		return fmt.Errorf("graph greedy %v, want %v", graphTok, ref.greedy)
	case gerr != nil && !errors.Is(gerr, kernels.ErrUnsupported):
		return gerr
	case ferr == nil && agree(fedTok) != len(ref.greedy):
		return fmt.Errorf("fed graph greedy %v, want %v", fedTok, ref.greedy)
	case ferr != nil && !errors.Is(ferr, kernels.ErrUnsupported):
		return ferr
	}
	return nil
}

// pairsParity runs the checkpoint as a tensor-parallel group of one rank
// (models.Plan of world 1 with a collective: its all-reduces see this
// rank alone): its greedy steps end in the distributed argmax's pairs
// (argmax_pair), eagerly and recorded, the recording's token picked on
// the device (argmax_pairs) or by the host, as a group's ranks run them.
// Their n tokens after the prompt ids must be the argmax of the same
// model's logits (its vocabulary-parallel head: the same products), and
// ForwardGreedy of the prompt its first.
func pairsParity(g *cuda.Backend, ck *checkpoint.Checkpoint, ids []int32, n int) (string, error) {
	m, err := models.NewRank(ck.Name, ck.Config, ck.Source, g, &models.Plan{World: 1, Comm: identityComm{}})
	if err != nil {
		return "", err
	}
	if !m.PairsArgmax() {
		return "n/a (no pairs head)", nil
	}
	T := len(ids)
	seq, err := kvseq.Private(m, T+n, 4, true)
	if err != nil {
		return "", err
	}
	logits, err := m.Forward(seq, ids, models.LastLogits)
	if err != nil {
		return "", err
	}
	first := session.Argmax(logits)
	rewind := rewinder(seq, T)
	// decode continues from the prompt's end with step, then rewinds.
	decode := func(step func(tok int32) (int32, error)) ([]int32, error) {
		out := make([]int32, 0, n)
		next := first
		for i := range n {
			out = append(out, next)
			seq.Start = T + i
			var err error
			if next, err = step(next); err != nil {
				return nil, err
			}
		}
		return out, rewind()
	}
	want, err := decode(func(tok int32) (int32, error) {
		l, err := m.Forward(seq, []int32{tok}, models.LastLogits)
		return session.Argmax(l), err
	})
	if err != nil {
		return "", err
	}
	eager, err := decode(func(tok int32) (int32, error) { return m.ForwardGreedy(seq, []int32{tok}) })
	if err != nil {
		return "", err
	}
	agree := func(got []int32) string {
		k := 0
		for i := range want {
			if i < len(got) && got[i] == want[i] {
				k++
			}
		}
		return fmt.Sprintf("%d/%d", k, len(want))
	}
	stat := "eager " + agree(eager)
	if !slices.Equal(eager, want) {
		return stat, fmt.Errorf("pairs eager greedy %v, want %v", eager, want)
	}
	for _, fed := range []bool{false, true} {
		got, _, err := graphDecodeBy(g, m, seq, T, first, n, fed, true)
		name := map[bool]string{false: "graph", true: "fed"}[fed]
		switch {
		case errors.Is(err, kernels.ErrUnsupported):
			stat += ", " + name + " n/a"
		case err != nil:
			return stat, err
		case !slices.Equal(got, want):
			return stat, fmt.Errorf("pairs %s greedy %v, want %v", name, got, want)
		default:
			stat += ", " + name + " " + agree(got)
		}
		if err := rewind(); err != nil {
			return stat, err
		}
	}
	// The prompt's step too, on a sequence of its own.
	seq2, err := kvseq.Private(m, T+1, 4, true)
	if err != nil {
		return stat, err
	}
	if id, err := m.ForwardGreedy(seq2, ids); err != nil || id != first {
		return stat, fmt.Errorf("pairs of the prompt: %d (%v), want %d", id, err, first)
	}
	return stat, g.Err()
}

// identityComm is the collective of a group of one rank: a sum over the
// rank itself.
type identityComm struct{}

func (identityComm) AllReduceSum(kernels.Buf, int) error { return nil }

// hiddenParity compares the final hidden states (models.AllHidden, what
// /v1/embeddings pools) of ids on the GPU model m with the CPU backend's
// on the same checkpoint: max|Δ| / max|CPU|.
func hiddenParity(ck *checkpoint.Checkpoint, m *models.Model, ids []int32) (float64, error) {
	cm, err := ck.Model(cpu.New(0))
	if err != nil {
		return 0, err
	}
	var out [2][]float32
	for i, mm := range []*models.Model{m, cm} {
		seq, err := kvseq.Private(mm, len(ids), 4, true)
		if err != nil {
			return 0, err
		}
		if out[i], err = mm.Forward(seq, ids, models.AllHidden); err != nil {
			return 0, err
		}
	}
	if len(out[0]) != len(out[1]) || len(out[0]) != len(ids)*m.Config.HiddenSize {
		return 0, fmt.Errorf("hidden states: %d values on the GPU, %d on the CPU", len(out[0]), len(out[1]))
	}
	var maxDiff, maxRef float64
	for i, want := range out[1] {
		maxDiff = math.Max(maxDiff, math.Abs(float64(out[0][i]-want)))
		maxRef = math.Max(maxRef, math.Abs(float64(want)))
	}
	return maxDiff / maxRef, nil
}

// rewinder returns a function that puts seq's recurrent state (hybrid
// models; nothing for others) back to what it holds now, pos tokens: a
// recurrent state cannot be truncated like a KV cache, so a second decode
// of the same continuation must restore it.
func rewinder(seq models.Seq, pos int) func() error {
	rs, ok := seq.State.(models.RecurrentState)
	if !ok {
		return func() error { return nil }
	}
	snap := rs.Snapshot()
	return func() error { return rs.Restore(snap, pos) }
}

// graphRun is what graphDecode measured: the replays after the first in
// tokens per second (0 when a replay failed), and what recording the step
// (capture and instantiation) and its first replay (which uploads the
// graph) took — a hybrid's daemon pays both once per sequence state.
type graphRun struct {
	perS               float64
	capture, firstStep time.Duration
}

// graphDecode captures one single-token Forward at position start and
// replays it n times, sampling greedily on the device. seq's KV for
// positions before start must be in place. fed: the step feeds itself
// (cuda.Backend.CaptureFeed): after the first, the replays are queued back
// to back and their tokens read once at the end, where otherwise the host
// reads each token before it launches the next replay.
func graphDecode(g *cuda.Backend, m *models.Model, seq models.Seq, start int, first int32, n int, fed bool) (out []int32, run graphRun, err error) {
	return graphDecodeBy(g, m, seq, start, first, n, fed, false)
}

// graphDecodeBy is graphDecode; with pairs the step recorded is
// ForwardGreedy's (a tensor-parallel model's greedy step ending in the
// group's argmax pairs: argmax_pairs picks a fed step's token, the host
// an unfed one's, as the ranks do).
func graphDecodeBy(g *cuda.Backend, m *models.Model, seq models.Seq, start int, first int32, n int, fed, pairs bool) (out []int32, run graphRun, err error) {
	if fed && n > 1024 {
		return nil, run, fmt.Errorf("a fed decode reads its tokens once: at most 1024, not %d", n)
	}
	t0 := time.Now()
	if err := g.BeginCapture(); err != nil {
		return nil, run, err
	}
	seq.Start = start
	ferr := recordStep(m, seq, first, pairs)
	if ferr == nil && fed {
		ferr = g.CaptureFeed()
	}
	gr, err := g.EndCapture()
	if ferr != nil {
		if err == nil {
			gr.Close()
		}
		return nil, run, ferr
	}
	if err != nil {
		return nil, run, err
	}
	run.capture = time.Since(t0)
	defer gr.Close()
	if pairs != (gr.Pairs > 0) {
		return nil, run, fmt.Errorf("a step recorded with pairs %v ends in %d pairs", pairs, gr.Pairs)
	}
	bs := seq.Pool.Spec().BlockSize
	out = make([]int32, 0, n)
	next := first
	fedFrom := 0
	t0 = time.Now()
	for i := 0; i < n; i++ {
		if i == 1 {
			run.firstStep = time.Since(t0)
			t0 = time.Now()
		}
		pos := start + i
		st := cuda.Step{ID: next, Pos: int32(pos), Slot: seq.Table[pos/bs]*int32(bs) + int32(pos%bs), Table: seq.Table, Fed: fed && i > 0}
		if err := gr.Launch(st); err != nil {
			return out, graphRun{}, err
		}
		switch {
		case !fed:
			out = append(out, next)
			next = graphGreedy(g, gr)
		case i == 0:
			out = append(out, next)
			c, _, err := g.FeedTokens() // the graph's upload, untimed as above
			if err != nil {
				return out, graphRun{}, err
			}
			fedFrom = c - 1 // the first step's token
		}
	}
	if fed && n > 1 {
		c, ring, err := g.FeedTokens()
		if err != nil {
			return out, graphRun{}, err
		}
		if c-fedFrom != n {
			return out, graphRun{}, fmt.Errorf("fed decode: %d tokens in the ring, want %d", c-fedFrom, n)
		}
		for k := fedFrom; k < c-1; k++ { // the last step's token is past n
			out = append(out, ring[k%len(ring)])
		}
	}
	run.perS = float64(n-1) / time.Since(t0).Seconds()
	return out, run, g.Err()
}

// markedParity checks, for a hybrid, snapshots taken inside one pass
// (models.MarkingState, the daemon's prefill): a pass over ids marked at
// 8 and 16 returns the logits of one plain pass at the rows before the
// marks and at the end, and the state held at 16 continues to the same
// last logits. It returns the largest difference relative to maxRef (-1:
// not a hybrid, or too short a prompt).
func markedParity(m *models.Model, ids []int32, want []float32, maxRef float64) (float64, error) {
	T, V := len(ids), m.Config.VocabSize
	if _, ok := m.NewState().(models.MarkingState); !ok || T <= 16 {
		return -1, nil
	}
	seq, err := kvseq.Private(m, T, 4, true)
	if err != nil {
		return 0, err
	}
	st := seq.State.(models.MarkingState)
	if err := st.HoldAt([]int{8, 16}); err != nil {
		return 0, err
	}
	got, err := m.Forward(seq, ids, models.MarkedLogits)
	if err != nil {
		return 0, err
	}
	held := st.TakeHeld()
	if len(held) != 2 || len(got) != 3*V {
		return 0, fmt.Errorf("marked pass: %d held states, %d logits", len(held), len(got))
	}
	var diff float64
	cmp := func(a, b []float32) {
		for i := range a {
			diff = math.Max(diff, math.Abs(float64(a[i]-b[i])))
		}
	}
	for i, row := range []int{7, 15, T - 1} {
		cmp(got[i*V:(i+1)*V], want[row*V:(row+1)*V])
	}
	// From the held state at 16 (the marked pass's KV blocks up to it).
	fork := seq
	fs := m.NewState().(*models.DeltaState)
	if err := fs.CopyFrom(held[1].(*models.HeldDelta).State); err != nil {
		return 0, err
	}
	fork.State, fork.Start = fs, 16
	last, err := m.Forward(fork, ids[16:], models.LastLogits)
	if err != nil {
		return 0, err
	}
	cmp(last, want[(T-1)*V:])
	return diff / maxRef, nil
}
