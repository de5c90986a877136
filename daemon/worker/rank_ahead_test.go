package worker

import (
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
