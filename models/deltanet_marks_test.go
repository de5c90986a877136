package models_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// A pass marked at positions inside it leaves, at each, the state that a
// pass ending there leaves, bit for bit on the CPU, and its own logits
// are those of the passes split at the marks: the engine prefills a
// hybrid's prompt in one marked pass instead of pieces ending on its
// snapshot positions. Segments of more and of fewer than 16 rows take the
// chunked and the token-by-token delta rule, as pieces of those lengths do.
//
// A mark 2 rows in (fewer than the convolution's window) makes the
// convolution run segment by segment too; otherwise it is one call over
// the pass, the states at the marks copied from its input rows.
func TestHybridMarkedPass(t *testing.T) {
	for _, arch := range []string{"qwen3_5", "qwen3_next"} {
		for _, marks := range [][]int{{8, 40, 44, 128}, {2, 40}} {
			t.Run(fmt.Sprint(arch, marks), func(t *testing.T) { markedPass(t, arch, marks) })
		}
	}
}

func markedPass(t *testing.T, arch string, marks []int) {
	m, ref := openHybrid(t, arch)
	const n = 150
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = ref.ids[(i*5+i/len(ref.ids))%len(ref.ids)]
	}

	// The pieces, ending on the marks, with a snapshot at each.
	pieces := newSeq(t, m, n)
	var want []float32
	var snaps [][]float32
	lo := 0
	for _, hi := range append(slices.Clone(marks), n) {
		pieces.Start = lo
		l, err := m.Forward(pieces, ids[lo:hi], models.AllLogits)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, l...)
		if hi < n {
			snaps = append(snaps, pieces.State.(models.RecurrentState).Snapshot())
		}
		lo = hi
	}

	V := m.Config.VocabSize
	row := func(pos int) []float32 { return want[(pos-1)*V : pos*V] } // the logits before pos
	var seq models.Seq
	var held []models.HeldState
	// In one chunk, and in chunks of 40 rows (a mark at a chunk's
	// end, others inside chunks).
	for _, chunk := range []int{512, 40} {
		m.MaxChunk = chunk
		seq = newSeq(t, m, n)
		st := seq.State.(models.MarkingState)
		if err := st.HoldAt(marks); err != nil {
			t.Fatal(err)
		}
		got, err := m.Forward(seq, ids, models.AllLogits)
		if err != nil {
			t.Fatal(err)
		}
		// A chunk's end is a segment's end too: bit for bit where
		// the chunks end on the pieces' ends only.
		if e := relErr(got, want); chunk == 512 && e != 0 || e > 1e-5 {
			t.Errorf("chunks of %d: logits differ from the pieces' (relative error %.3g)", chunk, e)
		}
		h := st.TakeHeld()
		if len(h) != len(marks) {
			t.Fatalf("chunks of %d: %d held states for %d marks", chunk, len(h), len(marks))
		}
		if chunk == 512 {
			held = h
		}
		// MarkedLogits: the logits before each mark, then the last.
		again := newSeq(t, m, n)
		as := again.State.(models.MarkingState)
		if err := as.HoldAt(marks); err != nil {
			t.Fatal(err)
		}
		ml, err := m.Forward(again, ids, models.MarkedLogits)
		if err != nil {
			t.Fatal(err)
		}
		var wantMarked []float32
		for _, p := range append(slices.Clone(marks), n) {
			wantMarked = append(wantMarked, row(p)...)
		}
		if e := relErr(ml, wantMarked); chunk == 512 && e != 0 || e > 1e-5 {
			t.Errorf("chunks of %d: MarkedLogits differ from the pieces' last rows (relative error %.3g)", chunk, e)
		}
		if len(as.TakeHeld()) != len(marks) {
			t.Errorf("chunks of %d: MarkedLogits pass left no held states", chunk)
		}
	}
	m.MaxChunk = 512
	st := seq.State.(models.MarkingState)
	if len(held) != len(marks) {
		t.Fatalf("%d held states for %d marks", len(held), len(marks))
	}
	for i, h := range held {
		if h.Pos() != marks[i] {
			t.Errorf("held state %d at %d, want %d", i, h.Pos(), marks[i])
		}
		if !slices.Equal(h.(*models.HeldDelta).State.Snapshot(), snaps[i]) {
			t.Errorf("state at %d differs from the piece's", marks[i])
		}
	}
	if st.TakeHeld() != nil {
		t.Error("TakeHeld twice returned the states again")
	}

	// A held state continues as the pieces did from there (marked
	// where they ended, as the engine marks its snapshot positions).
	fork := seq // its KV blocks, a state of its own
	fork.State = m.NewState()
	fs := fork.State.(*models.DeltaState)
	k := len(marks) / 2
	if err := fs.Restore(held[k].(*models.HeldDelta).Data(), marks[k]); err != nil {
		t.Fatal(err)
	}
	if err := fs.HoldAt(marks[k+1:]); err != nil {
		t.Fatal(err)
	}
	fork.Start = marks[k]
	l, err := m.Forward(fork, ids[marks[k]:], models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l, want[len(want)-len(l):]) {
		t.Error("the pass from a held mark differs from the pieces'")
	}
}

// Marks are filled by the passes that reach them: one inside a pass, one
// at its end; none that a pass stopped short of; a Restore forgets them.
func TestHybridMarksChecked(t *testing.T) {
	m, ref := openHybrid(t, "qwen3_5")
	seq := newSeq(t, m, 16)
	st := seq.State.(models.MarkingState)
	if err := st.HoldAt([]int{4, 4}); err == nil {
		t.Error("HoldAt took marks out of order")
	}
	if err := st.HoldAt([]int{0}); err == nil {
		t.Error("HoldAt took a mark at the state's own position")
	}
	if err := st.HoldAt([]int{12}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(seq, ref.ids[:8], models.LastLogits); err != nil {
		t.Fatal(err)
	}
	if st.TakeHeld() != nil {
		t.Error("a pass ending before its mark left held states")
	}
	if err := st.HoldAt([]int{10}); err != nil {
		t.Fatal(err)
	}
	seq.Start = 8
	if _, err := m.Forward(seq, ref.ids[8:12], models.LastLogits); err != nil {
		t.Fatal(err)
	}
	if h := st.TakeHeld(); len(h) != 1 || h[0].Pos() != 10 {
		t.Errorf("held %v, want one state at 10", h)
	}
	// A state restored elsewhere forgets the request.
	if err := st.HoldAt([]int{14}); err != nil {
		t.Fatal(err)
	}
	if err := st.Restore(st.Snapshot(), 12); err != nil {
		t.Fatal(err)
	}
	seq.Start = 12
	if _, err := m.Forward(seq, ref.ids[:4], models.LastLogits); err != nil {
		t.Fatal(err)
	}
	if st.TakeHeld() != nil {
		t.Error("a restored state kept its marks")
	}
}
