//go:build cuda

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/session"
)

// draw checks the device's sampled-step draw (cuda.Backend.Draw) against
// the session's own (session.Drawer) on the same logits and variates:
// vocabularies of Qwen3.5's and Qwen3's sizes (the draw over many blocks),
// 20000 ids (one block) and small ones (POCKET_DRAW_GRID=N puts every size
// on N blocks, empty segments and all); peaked, flat, near-uniform, tied
// and zipf-shaped logits; temperature alone and with each filter. The two
// compute the probabilities with their own exponentials and sum them in
// their own orders, so a draw may pick another token than the host's
// where u is within a rounding of a boundary between them; a device token
// the host does not keep, or whose share of the host's cumulative
// distribution lies further than 2e-5 from u, fails. Greedy (top-k 1,
// argmax_mb after the Adjust) has no such margin: any other token fails.
func (c *conf) draw() {
	type dist struct {
		name string
		gen  func(r *rand.Rand, i int) float32
	}
	dists := []dist{
		{"normal σ3", func(r *rand.Rand, _ int) float32 { return float32(r.NormFloat64() * 3) }},
		{"near-uniform σ0.3", func(r *rand.Rand, _ int) float32 { return float32(r.NormFloat64() * 0.3) }},
		{"nine values", func(r *rand.Rand, _ int) float32 { return float32(r.IntN(9)) * 0.25 }},
		{"peaked", func(r *rand.Rand, i int) float32 {
			if i%9973 == 17 {
				return 12 + float32(r.NormFloat64())
			}
			return float32(r.NormFloat64() * 2)
		}},
		// A trained model's shape: probabilities falling as rank⁻² (a
		// rank drawn uniformly from 1 to 10⁵ for each id), so that top-p
		// keeps a handful.
		{"zipf s2", func(r *rand.Rand, _ int) float32 { return float32(-2 * math.Log(1+r.Float64()*1e5)) }},
	}
	rules := []session.Draw{
		{Temperature: 1}, {Temperature: 0.7, TopP: 0.9}, {Temperature: 0.6, TopK: 20, TopP: 0.95},
		{Temperature: 1, TopK: 50}, {Temperature: 0.7, MinP: 0.05}, {Temperature: 1, TopP: 0.9, MinP: 0.1},
		{Temperature: 1.5, TopP: 0.3},
		{Temperature: 1, TopK: 1}, // greedy: the argmax, ties to the lowest id ("nine values")
	}
	var dr session.Drawer
	var scratch drawScratch
	for _, n := range []int{248320, 151936, 20000, 1000, 7} {
		for _, ds := range dists {
			logits := make([]float32, n)
			for i := range logits {
				logits[i] = ds.gen(c.rng, i)
			}
			xg, _ := c.pair(logits)
			for _, rule := range append(slices.Clip(rules), c.adjustedRules(n)...) {
				c.n++
				const draws = 200
				differ, far := 0, ""
				kept, probs := dr.Kept(logits, rule)
				cum := make([]float64, len(probs)+1) // cum[i]: the host's mass before kept[i]
				for i, q := range probs {
					cum[i+1] = cum[i] + q
				}
				var spent time.Duration // the device's draws, each read back
				for range draws {
					d := rule
					d.U = c.rng.Float64()
					want := dr.Token(logits, d)
					t0 := time.Now()
					got := c.g.Draw(xg, n, scratch.args(d))
					spent += time.Since(t0)
					if got == want {
						continue
					}
					differ++
					if d.TopK == 1 && far == "" { // an argmax has no rounding to differ by
						far = fmt.Sprintf("greedy: device %d, host %d", got, want)
					}
					// The host's cumulative may end off 1 by its own rounding (it
					// did by ~1e-5 while its mass was ExpShifted's float32 sum).
					// And a top-p boundary among tied values may keep one token
					// more or less than the host's (each ~6e-6 of the mass here).
					tol := 2e-5 + math.Abs(1-cum[len(probs)])
					j := slices.Index(kept, got)
					if (j < 0 || d.U < cum[j]-tol || d.U > cum[j+1]+tol) && far == "" {
						lo, hi := -1.0, -1.0
						if j >= 0 {
							lo, hi = cum[j], cum[j+1]
						}
						far = fmt.Sprintf("u %.6f: device %d (host's cumulative %.6f..%.6f), host %d of %d kept", d.U, got, lo, hi, want, len(kept))
					}
				}
				status := "ok"
				switch {
				case c.g.Err() != nil:
					status = "FAIL (" + c.g.Err().Error() + ")"
				case far != "":
					status = "FAIL (" + far + ")"
				}
				if status != "ok" {
					c.failed++
				}
				fmt.Printf("%-12s %-40s %3d/%d differ, %5.1f µs a draw  %s\n", "Draw", fmt.Sprintf("n=%d %s %+v", n, ds.name, ruleName(rule)),
					differ, draws, float64(spent.Microseconds())/draws, status)
			}
		}
	}
}

// drawCaptured checks whether the grid draw (a cooperative launch) can be
// recorded into a graph and replayed, drawing what the launched kernel
// draws (cuda.Backend.DrawCaptured): what a sampled step fed on the device
// would need. A recording the driver refuses is reported, not failed.
func (c *conf) drawCaptured() {
	for _, n := range []int{248320, 151936} {
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(c.rng.NormFloat64() * 3)
		}
		xg, _ := c.pair(logits)
		var scratch drawScratch
		d := session.Draw{Temperature: 0.7, TopP: 0.9, U: c.rng.Float64()}
		want := c.g.Draw(xg, n, scratch.args(d))
		got, err := c.g.DrawCaptured(xg, n, scratch.args(d))
		c.n++
		status := "ok"
		switch {
		case err != nil:
			status = "not recordable here: " + err.Error()
		case got != want:
			status = fmt.Sprintf("FAIL (replayed %d, launched %d)", got, want)
			c.failed++
		}
		fmt.Printf("%-12s %-40s %s\n", "DrawCaptured", fmt.Sprintf("n=%d T0.7 p0.9", n), status)
	}
}

// adjustedRules are draws with penalties and bias (session.Adjust) over
// n ids: a repetition penalty on a few hundred ids, count penalties on
// some of them, and biases, one of +8 that makes its token likely and
// some of -100 that all but ban theirs.
func (c *conf) adjustedRules(n int) []session.Draw {
	ids := map[int32]session.AdjustEntry{}
	for range min(400, n) {
		id := int32(c.rng.IntN(n))
		e := ids[id]
		e.ID = id
		switch c.rng.IntN(4) {
		case 0:
			e.Flags |= session.AdjustRepeat
		case 1:
			e.Flags |= session.AdjustSub
			e.Sub = 0.4*float64(1+c.rng.IntN(5)) + 0.3
		case 2:
			e.Flags |= session.AdjustRepeat | session.AdjustSub
			e.Sub = 0.7
		default:
			e.Flags |= session.AdjustBias
			e.Bias = -100
		}
		ids[id] = e
	}
	boost := ids[int32(n/2)]
	boost.ID, boost.Flags, boost.Bias = int32(n/2), boost.Flags|session.AdjustBias, 8
	ids[boost.ID] = boost
	adj := &session.Adjust{Repetition: 1.3}
	for _, e := range ids {
		adj.Entries = append(adj.Entries, e)
	}
	slices.SortFunc(adj.Entries, func(a, b session.AdjustEntry) int { return int(a.ID) - int(b.ID) })
	return []session.Draw{{Temperature: 1, Adjust: adj}, {Temperature: 0.7, TopP: 0.9, Adjust: adj},
		{Temperature: 0.8, TopK: 40, Adjust: adj}, {Temperature: 1, TopK: 1, Adjust: adj}}
}

func ruleName(d session.Draw) string {
	s := fmt.Sprintf("T%g", d.Temperature)
	if d.TopK > 0 {
		s += fmt.Sprintf(" k%d", d.TopK)
	}
	if d.TopP > 0 {
		s += fmt.Sprintf(" p%g", d.TopP)
	}
	if d.MinP > 0 {
		s += fmt.Sprintf(" minp%g", d.MinP)
	}
	if d.Adjust != nil {
		s += fmt.Sprintf(" adjust%d", len(d.Adjust.Entries))
	}
	return s
}

// argmax checks greedy sampling on the device (cuda.Backend.Argmax, the
// kernel a fed step records too) against session.Argmax: one block's
// worth and fewer, vocabulary sizes, more than the kernel's 256 blocks
// cover in one pass, lengths not a multiple of four; ties (the lowest
// index wins), NaN (never wins, also first) and a maximum at either end.
func (c *conf) argmax() {
	type fill struct {
		name string
		gen  func(i, n int) float32
	}
	fills := []fill{
		{"normal", func(int, int) float32 { return float32(c.rng.NormFloat64()) }},
		{"nine values", func(int, int) float32 { return float32(c.rng.IntN(9)) }},
		{"all equal", func(int, int) float32 { return -3 }},
		{"NaN beside", func(i, _ int) float32 {
			if i%7 == 3 {
				return float32(math.NaN())
			}
			return float32(c.rng.NormFloat64())
		}},
		// A NaN first never wins either (the host's rule since the
		// first logit's NaN no longer beats the rest).
		{"NaN first", func(i, _ int) float32 {
			if i == 0 {
				return float32(math.NaN())
			}
			return float32(c.rng.NormFloat64())
		}},
		// Nothing wins: 0, as the host's argmax answers (a NaN model's
		// next step must still embed a token of the vocabulary).
		{"all NaN", func(int, int) float32 { return float32(math.NaN()) }},
		{"last largest", func(i, n int) float32 {
			if i == n-1 {
				return 100
			}
			return float32(c.rng.NormFloat64())
		}},
	}
	for _, n := range []int{1, 3, 4095, 4097, 151936, 248322, 1 << 21} {
		for _, f := range fills {
			v := make([]float32, n)
			for i := range v {
				v[i] = f.gen(i, n)
			}
			if f.name == "NaN beside" && n > 3 {
				v[3] = float32(math.Inf(1)) // NaN at 3 already; +Inf must win
			}
			xg, _ := c.pair(v)
			got, want := c.g.Argmax(xg, n), session.Argmax(v)
			c.n++
			status := "ok"
			if err := c.g.Err(); err != nil {
				status = "FAIL (" + err.Error() + ")"
			} else if got != want {
				status = fmt.Sprintf("FAIL (got %d, want %d)", got, want)
			}
			if status != "ok" {
				c.failed++
			}
			fmt.Printf("%-12s %-40s %s\n", "Argmax", fmt.Sprintf("n=%d %s", n, f.name), status)
			if n <= 248322 {
				c.argmaxPair(xg, v, f.name)
			}
		}
	}
}

// argmaxPair checks a rank's half of the distributed argmax
// (kernels.ArgmaxOps: argmax_pair) against the CPU backend's, every float
// of the 2·slots, bit for bit (NaN where both are NaN): the vocabulary
// slice x of n values as rank slot of a group of slots, its token ids
// from offset.
func (c *conf) argmaxPair(xg kernels.Buf, v []float32, fill string) {
	n := len(v)
	xh := c.c.NewBuf(n)
	c.c.Write(xh, 0, v)
	for _, s := range []struct{ slot, slots int }{{0, 1}, {1, 2}, {3, 4}} {
		offset := s.slot * n
		dg, dh := c.outPair(2 * s.slots)
		c.g.Write(dg, 0, []float32{7, 7}) // stale values the op must overwrite
		c.g.ArgmaxPair(dg, xg, n, offset, s.slot, s.slots)
		c.c.ArgmaxPair(dh, xh, n, offset, s.slot, s.slots)
		got, want := make([]float32, 2*s.slots), make([]float32, 2*s.slots)
		c.g.Read(dg, 0, got)
		c.c.Read(dh, 0, want)
		c.n++
		status := "ok"
		if err := c.g.Err(); err != nil {
			status = "FAIL (" + err.Error() + ")"
		}
		for i := range got {
			if status == "ok" && got[i] != want[i] && (got[i] == got[i] || want[i] == want[i]) {
				status = fmt.Sprintf("FAIL (got %v, want %v)", got, want)
			}
		}
		if status != "ok" {
			c.failed++
		}
		fmt.Printf("%-12s %-40s %s\n", "ArgmaxPair", fmt.Sprintf("n=%d %s slot %d/%d", n, fill, s.slot, s.slots), status)
	}
}
