package worker

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// TestLookaheadReplay drives a rank as serve does — each reply followed
// by runAhead — over the fake recorder: a greedy chain is answered from
// the steps replayed ahead (every step but those after a block's last
// position, whose next block the request did not carry) with exactly the
// cold tokens; a request for another token at the guessed position is
// answered by its own step, as it would be without the guess; a prefill
// drops the guess; and a rank with NoLookahead runs nothing ahead.
func TestLookaheadReplay(t *testing.T) {
	const bs, blocks = 4, 64
	toks := prompt(30, 9)
	const n = 24
	m := inProcess(t, "qwen3")
	want := greedy(t, m, toks, n)
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(blocks - 1 - i)
	}
	// serveStep is a ForwardArgmax request as serve answers it: the reply,
	// then the step run ahead.
	serveStep := func(rk *rank, start int, tok []int32) (int32, error) {
		id, _, err := step(rk, msgForwardArgmax, table, start, tok, models.LastLogits)
		if err != nil {
			return 0, err
		}
		return id, rk.runAhead()
	}
	decode := func(rk *rank) []int32 {
		t.Helper()
		return decodeChain(t, rk, table, toks, n, func(start int, tok []int32) (int32, error) {
			return serveStep(rk, start, tok)
		})
	}

	rk, f := newGraphRank(t, blocks, bs)
	if got := decode(rk); !slices.Equal(got, want) {
		t.Fatalf("greedy with lookahead %v,\ncold %v", got, want)
	}
	// Steps at positions 30..52; a guess for position p+1 is made after
	// each of them but those ending a block (p+1 % 4 == 0: 31, 35, ...).
	guessed := 0
	for p := len(toks); p < len(toks)+n-2; p++ {
		if (p+1)%bs != 0 {
			guessed++
		}
	}
	if rk.aheadHits != int64(guessed) {
		t.Fatalf("%d requests answered ahead, want %d", rk.aheadHits, guessed)
	}
	// A step answered ahead (p % bs != 0) queues its successor, fed on
	// the device by its token, where the successor exists (it is not past
	// the request's last block: (p+1) % bs != 0). Within a block the
	// table's bucket, and so the recording, stays the same.
	fed := 0
	for p := len(toks) + 1; p < len(toks)+n-1; p++ {
		if p%bs != 0 && (p+1)%bs != 0 {
			fed++
		}
	}
	if f.fed != fed {
		t.Fatalf("%d steps fed on the device, want %d", f.fed, fed)
	}
	// The last step's guess is pending: ask for another token there.
	pos := len(toks) + n - 1
	if rk.ahead == nil {
		t.Fatal("no step run ahead after the chain")
	}
	other := (want[n-1] + 1) % int32(m.Config.VocabSize)
	got, err := serveStep(rk, pos, []int32{other})
	if err != nil {
		t.Fatal(err)
	}
	ref := append(append(slices.Clone(toks), want[:n-1]...), other)
	if cold := greedy(t, m, ref, 1)[0]; got != cold {
		t.Fatalf("another token at the guessed position: %d, cold %d", got, cold)
	}
	hits := rk.aheadHits
	// And a prefill pass drops the next guess.
	if _, _, err := step(rk, msgForward, table, 0, toks, models.NoLogits); err != nil || rk.ahead != nil {
		t.Fatalf("prefill: %v, guess kept %v", err, rk.ahead != nil)
	}
	if rk.aheadHits != hits {
		t.Fatal("a dropped guess answered a request")
	}

	if f.launched == 0 {
		t.Fatal("no step was replayed")
	}

	off, _ := newGraphRank(t, blocks, bs)
	off.opts.NoLookahead = true
	if got := decode(off); !slices.Equal(got, want) || off.aheadHits != 0 || off.ahead != nil {
		t.Fatalf("without lookahead: %v (%d answered ahead)", got, off.aheadHits)
	}
}

// TestHybridLookahead: a hybrid's greedy chain served as serve serves it
// (each reply, then runAhead) runs its next step ahead where it is
// replayed, with steps fed on the device, and gives exactly the cold
// tokens; where replay is off, nothing runs ahead and the tokens are the
// same. A step run ahead moves the recurrent state, so whatever drops the
// guess must find the state as the answered steps left it: another token
// at the guessed position, a snapshot, a fork, a truncation.
func TestHybridLookahead(t *testing.T) {
	for _, arch := range hybrids {
		for _, replay := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/replay=%v", arch, replay), func(t *testing.T) {
				h := newHybridGraphs(t, arch, 64)
				if !replay {
					h.rk.graphs.off = errors.New("replay off for the test")
				}
				vocab := int32(h.model.Config.VocabSize)
				s := h.open(1, 0, 16)
				h.prefill(s, prompt(18, 3))
				serve := func(s *hseq, tok int32) int32 {
					t.Helper()
					id, _, err := stateStep(h.rk, msgForwardArgmax, s.id, s.table, len(s.hist), []int32{tok}, models.LastLogits)
					if err != nil {
						t.Fatal(err)
					}
					if err := h.rk.runAhead(); err != nil {
						t.Fatal(err)
					}
					s.hist = append(s.hist, tok)
					s.next = id
					return id
				}
				chain := func(s *hseq, n int) {
					t.Helper()
					from := len(s.hist)
					for range n {
						serve(s, s.next)
					}
					got := append(slices.Clone(s.hist[from+1:]), s.next)
					if want := greedy(t, h.model, s.hist[:from+1], n); !slices.Equal(got, want) {
						t.Fatalf("from position %d: %v, cold %v", from, got, want)
					}
				}
				chain(s, 13) // the last step not at a block's end: its successor is guessed
				switch {
				case !replay && (h.rk.aheadHits != 0 || h.rk.ahead != nil):
					t.Fatalf("an eager hybrid step ran ahead (%d answered)", h.rk.aheadHits)
				case replay && h.rk.aheadHits == 0:
					t.Fatal("no request was answered by a step run ahead")
				case replay && h.f.fed == 0:
					t.Fatal("no step was fed on the device")
				case replay && h.rk.ahead == nil:
					t.Fatal("no step run ahead after the chain")
				}
				// Another token where the next step was guessed.
				other := (s.next + 1) % vocab
				got := serve(s, other)
				if want := greedy(t, h.model, s.hist, 1)[0]; got != want {
					t.Fatalf("another token at the guessed position: %d, cold %d", got, want)
				}
				chain(s, 5)
				// A snapshot drops the guess: the state is where the answers left it.
				snap, snapPos := h.snapshot(s), len(s.hist)
				if pos := h.rk.states[s.id].Pos(); pos != len(s.hist) {
					t.Fatalf("state at %d after a dropped step, sequence at %d", pos, len(s.hist))
				}
				chain(s, 5)
				// A fork after a guess, decoded beside its source.
				f := h.fork(s, 2, 16, 16)
				chain(f, 6)
				chain(s, 6)
				// And the snapshot, restored (a truncation), decodes on as
				// the sequence did from there.
				next := s.hist[snapPos]
				h.truncate(s, snap, snapPos)
				s.next = next
				chain(s, 4)
			})
		}
	}
}
