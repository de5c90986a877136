package session

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/cache"
	"github.com/pocketllm/pocketllm/models"
)

// The session exactness tests (append, fork, truncate, prefix reuse,
// restart) on the seed architectures beyond qwen3: the Gated DeltaNet
// hybrids, whose recurrent state is resumed from snapshots, and the MLA
// and MoE models, whose latent or plain KV takes the ordinary paged path.

var seedArchs = []string{"qwen3_5", "qwen3_next", "deepseek_v3", "deepseek_v32", "glm4_moe", "minimax_m2"}

// testSnapshots snapshots hybrids at 8, 16, 24, 40, 56, 72, …: both
// regimes of the policy within the tests' 20-80-token sequences.
var testSnapshots = cache.Intervals{Dense: 8, Until: 24, Sparse: 16}

const archBlock = 8

func archConfig(arch string, model *models.Model) ModelConfig {
	return ModelConfig{Name: arch, Model: model, BlockSize: archBlock, SnapshotIntervals: testSnapshots}
}

// resumable is the longest prefix of n tokens that a sequence can resume
// from without computing: whole blocks for attention models, the last
// snapshot position for hybrids.
func resumable(model *models.Model, n int) int {
	if model.NewState() == nil {
		return n / archBlock * archBlock
	}
	iv := testSnapshots.Aligned(archBlock)
	q := 0
	for p := iv.Next(0); p <= n; p = iv.Next(p) {
		q = p
	}
	return q
}

func forArchs(t *testing.T, fn func(t *testing.T, arch string, model *models.Model)) {
	for _, arch := range seedArchs {
		t.Run(arch, func(t *testing.T) {
			model := loadFixture(t, arch)
			if hybrid := arch == "qwen3_5" || arch == "qwen3_next"; hybrid != (model.NewState() != nil) {
				t.Fatalf("recurrent state: %v", model.NewState() != nil)
			}
			fn(t, arch, model)
		})
	}
}

func TestArchAppendGenerate(t *testing.T) {
	forArchs(t, func(t *testing.T, arch string, model *models.Model) {
		m := newManager(t, "", archConfig(arch, model))
		id := mustOpen(t, m, arch)
		p1, p2 := prompt(21, 1), prompt(9, 2)
		if r := mustAppend(t, m, id, p1); r.Tokens != 21 || r.Prefilled != 21 || r.Reused != 0 {
			t.Fatalf("first append: %+v", r)
		}
		g1 := mustGenerate(t, m, id, 6)
		if g1.Usage != (Usage{PromptTokens: 21, CachedTokens: 21, CompletionTokens: 6}) {
			t.Errorf("first generate usage %+v", g1.Usage)
		}
		equalIDs(t, "first generate", g1.IDs, greedy(t, model, p1, 6))
		if r := mustAppend(t, m, id, p2); r.Prefilled != len(p2)+1 || r.Tokens != 21+6+9 {
			t.Errorf("second append: %+v, want %d prefilled", r, len(p2)+1)
		}
		g2 := mustGenerate(t, m, id, 5)
		all := slices.Concat(p1, g1.IDs, p2)
		equalIDs(t, "second generate", g2.IDs, greedy(t, model, all, 5))
		toks, _ := m.Tokens(1, id)
		g3 := mustGenerate(t, m, id, 3)
		if g3.Usage.CachedTokens != len(toks)-1 {
			t.Errorf("third generate cached %d, want %d", g3.Usage.CachedTokens, len(toks)-1)
		}
		equalIDs(t, "third generate", g3.IDs, greedy(t, model, toks, 3))
	})
}

// TestArchForkTruncate: fork at k and truncate to k continue like a cold
// session on the first k tokens, and compute only the tokens after the
// last resumable position ≤ k (for hybrids: the last snapshot), not k.
func TestArchForkTruncate(t *testing.T) {
	forArchs(t, func(t *testing.T, arch string, model *models.Model) {
		m := newManager(t, "", archConfig(arch, model))
		id := mustOpen(t, m, arch)
		p := prompt(60, 3)
		mustAppend(t, m, id, p)
		g := mustGenerate(t, m, id, 4)
		full := slices.Concat(p, g.IDs)
		// computed checks what the generation after a fork or truncate to
		// k prefilled, by its usage and by the manager's counter.
		computed := func(what string, k int, before int64, u Usage) {
			t.Helper()
			n := u.PromptTokens - u.CachedTokens
			if got := m.Stats().PrefilledTokens - before - int64(u.CompletionTokens-1); got != int64(n) {
				t.Errorf("%s %d: stats count %d prefilled, usage %d", what, k, got, n)
			}
			if limit := max(k-resumable(model, k), 1); n > limit {
				t.Errorf("%s %d: prefilled %d tokens, want ≤ %d", what, k, n, limit)
			}
		}
		for _, k := range []int{1, 8, 16, 23, 32, 40, 45, 57, 63, 64} {
			f, err := m.Fork(1, id, k)
			if err != nil {
				t.Fatal(err)
			}
			if f.Tokens != k {
				t.Fatalf("fork at %d has %d tokens", k, f.Tokens)
			}
			before := m.Stats().PrefilledTokens
			g := mustGenerate(t, m, f.ID, 4)
			equalIDs(t, "fork", g.IDs, greedy(t, model, full[:k], 4))
			computed("fork at", k, before, g.Usage)
			if err := m.Close(1, f.ID); err != nil {
				t.Fatal(err)
			}
		}
		equalIDs(t, "original", mustGenerate(t, m, id, 3).IDs, greedy(t, model, full, 3))
		if arch == "deepseek_v32" {
			// DeepSeek sparse attention selects top-k indexer scores with
			// torch.topk's tie order, and ReLU makes exact ties common; that
			// order depends on the pass's candidate count, so KV written by a
			// 60-token pass legitimately differs from a cold 30-token pass
			// once a tie straddles the cut. (The CPU matmuls themselves are
			// batch-invariant: kernels/cpu TestDot2BitIdenticalToDot.)
			t.Skip("deepseek_v32: top-k tie order depends on the pass length, as in the reference")
		}
		for _, k := range []int{50, 30, 17, 16, 12} {
			info, err := m.Truncate(1, id, k)
			if err != nil || info.Tokens != k {
				t.Fatalf("truncate to %d: %+v %v", k, info, err)
			}
			toks, _ := m.Tokens(1, id)
			equalIDs(t, "truncated history", toks, full[:k])
			before := m.Stats().PrefilledTokens
			g := mustGenerate(t, m, id, 4)
			equalIDs(t, fmt.Sprint("after truncate to ", k), g.IDs, greedy(t, model, full[:k], 4))
			computed("truncate to", k, before, g.Usage)
			if _, err := m.Truncate(1, id, k); err != nil {
				t.Fatal(err)
			}
		}
		// The editor case: truncate, then append different tokens.
		if _, err := m.Truncate(1, id, 10); err != nil {
			t.Fatal(err)
		}
		r := mustAppend(t, m, id, prompt(7, 9))
		want := 7
		if model.NewState() != nil {
			want = 17 - resumable(model, 10)
		}
		if r.Prefilled != want {
			t.Errorf("append after truncate prefilled %d, want %d", r.Prefilled, want)
		}
		equalIDs(t, "editor", mustGenerate(t, m, id, 4).IDs, greedy(t, model, slices.Concat(full[:10], prompt(7, 9)), 4))
	})
}

// TestArchPrefixReuse: sessions and stateless requests starting with the
// same tokens reuse them, for hybrids up to the last snapshot position.
func TestArchPrefixReuse(t *testing.T) {
	forArchs(t, func(t *testing.T, arch string, model *models.Model) {
		m := newManager(t, "", archConfig(arch, model))
		shared := prompt(37, 4)
		a := mustOpen(t, m, arch)
		mustAppend(t, m, a, shared)
		b := mustOpen(t, m, arch)
		long := slices.Concat(shared, prompt(5, 5))
		r := mustAppend(t, m, b, long)
		if want := resumable(model, 37); r.Reused != want || r.Prefilled != 42-want || want < 16 {
			t.Fatalf("second session: %+v, want %d reused", r, want)
		}
		equalIDs(t, "reusing session", mustGenerate(t, m, b, 5).IDs, greedy(t, model, long, 5))

		// A prompt that ends on a snapshot needs no computation at all: the
		// snapshot keeps the logits. Attention models recompute the last
		// block, whose last token's logits they need.
		c := mustOpen(t, m, arch)
		r = mustAppend(t, m, c, shared[:24])
		want := 16
		if model.NewState() != nil {
			want = 24
		}
		if r.Reused != want || r.Prefilled != 24-want {
			t.Errorf("prompt on a boundary: %+v, want %d reused", r, want)
		}
		equalIDs(t, "boundary session", mustGenerate(t, m, c, 4).IDs, greedy(t, model, shared[:24], 4))

		// Another owner does not share the cache.
		o, err := m.Open(2, arch)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := m.Append(context.Background(), 2, o.ID, AppendInput{Tokens: shared}); err != nil || r.Reused != 0 {
			t.Fatalf("other owner: %+v %v", r, err)
		}

		// Stateless: a repeated prompt plus its completion reuses both,
		// including the snapshots taken while decoding.
		p1 := prompt(50, 6)
		res, err := m.Complete(context.Background(), 1, arch, p1, GenerateParams{MaxTokens: 20}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p2 := slices.Concat(p1, res.IDs, prompt(3, 7))
		res2, err := m.Complete(context.Background(), 1, arch, p2, GenerateParams{MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := resumable(model, 69); res2.Usage.CachedTokens != want {
			t.Errorf("second completion cached %d, want %d", res2.Usage.CachedTokens, want)
		}
		equalIDs(t, "cached completion", res2.IDs, greedy(t, model, p2, 4))
	})
}

// TestArchRestart: a new Manager on the same state dir continues sessions
// and forks exactly (their KV and snapshots rebuilt from the tokens).
func TestArchRestart(t *testing.T) {
	forArchs(t, func(t *testing.T, arch string, model *models.Model) {
		dir := t.TempDir()
		m, err := NewManager(Options{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AddModel(archConfig(arch, model)); err != nil {
			t.Fatal(err)
		}
		id := mustOpen(t, m, arch)
		p := prompt(30, 8)
		mustAppend(t, m, id, p)
		g := mustGenerate(t, m, id, 5)
		f, err := m.Fork(1, id, 20)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		m2 := newManager(t, dir, archConfig(arch, model))
		full := slices.Concat(p, g.IDs)
		toks, err := m2.Tokens(1, id)
		if err != nil {
			t.Fatal(err)
		}
		equalIDs(t, "restored history", toks, full)
		g2 := mustGenerate(t, m2, id, 4)
		if g2.Usage.CachedTokens != 0 {
			t.Errorf("KV survived the restart: %+v", g2.Usage)
		}
		equalIDs(t, "continued", g2.IDs, greedy(t, model, full, 4))
		// The fork's prefix was rebuilt by its parent: it reuses it.
		gf := mustGenerate(t, m2, f.ID, 3)
		equalIDs(t, "fork continued", gf.IDs, greedy(t, model, full[:20], 3))
		if want := min(resumable(model, 20), 16); gf.Usage.CachedTokens < want {
			t.Errorf("fork after restart cached %d, want ≥ %d", gf.Usage.CachedTokens, want)
		}
	})
}

// TestHybridWithoutSnapshots: with no snapshot memory a hybrid stays exact
// by recomputing, and reuses nothing.
func TestHybridWithoutSnapshots(t *testing.T) {
	model := loadFixture(t, "qwen3_5")
	cfg := archConfig("q", model)
	cfg.SnapshotBytes = -1
	m := newManager(t, "", cfg)
	id := mustOpen(t, m, "q")
	p := prompt(40, 3)
	mustAppend(t, m, id, p)
	f, err := m.Fork(1, id, 33)
	if err != nil {
		t.Fatal(err)
	}
	g := mustGenerate(t, m, f.ID, 3)
	equalIDs(t, "fork", g.IDs, greedy(t, model, p[:33], 3))
	if g.Usage.CachedTokens != 0 {
		t.Errorf("fork reused %d tokens without snapshots", g.Usage.CachedTokens)
	}
	if _, err := m.Truncate(1, id, 17); err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "truncated", mustGenerate(t, m, id, 3).IDs, greedy(t, model, p[:17], 3))
	b := mustOpen(t, m, "q")
	if r := mustAppend(t, m, b, p); r.Reused != 0 {
		t.Errorf("reused %d tokens without snapshots", r.Reused)
	}
	if st := m.engines["q"].pool.SnapshotStats(); st.Count != 0 || st.Limit != 0 {
		t.Errorf("snapshot store %+v", st)
	}
}

// TestSnapshotMemoryBound: the store holds at most its bytes; sequences
// whose snapshots were evicted still resume exactly (from an older one or
// from the start).
func TestSnapshotMemoryBound(t *testing.T) {
	model := loadFixture(t, "qwen3_next")
	st := model.NewState().(models.RecurrentState)
	V := model.Config.VocabSize
	per := st.SizeBytes() + 4*int64(V)
	cfg := archConfig("q", model)
	cfg.SnapshotBytes = 3 * per
	m := newManager(t, "", cfg)
	id := mustOpen(t, m, "q")
	p := prompt(75, 11)
	mustAppend(t, m, id, p) // snapshots at 8, 16, 24, 40, 56, 72: the last three stay
	ss := m.engines["q"].pool.SnapshotStats()
	if ss.Count != 3 || ss.Bytes > cfg.SnapshotBytes || ss.Stores != 6 {
		t.Fatalf("snapshot store %+v", ss)
	}
	for _, k := range []int{60, 45, 20} {
		if _, err := m.Truncate(1, id, k); err != nil {
			t.Fatal(err)
		}
		g := mustGenerate(t, m, id, 3)
		equalIDs(t, "truncated", g.IDs, greedy(t, model, p[:k], 3))
		want := map[int]int{60: 56, 45: 40, 20: 0}[k]
		if g.Usage.CachedTokens != want {
			t.Errorf("truncate to %d resumed from %d, want %d", k, g.Usage.CachedTokens, want)
		}
		if _, err := m.Truncate(1, id, k); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHybridUnderPressure: in a pool too small for two sequences, blocks
// are evicted (to the host tier, or lost with their snapshots) and
// sequences' KV dropped; everything stays exact, and with a host tier a
// prefix comes back from it together with its snapshot.
func TestHybridUnderPressure(t *testing.T) {
	model := loadFixture(t, "qwen3_5")
	for _, host := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprint("host=", host), func(t *testing.T) {
			cfg := archConfig("q", model)
			cfg.KVBlocks, cfg.HostTierBytes = 10, host
			m := newManager(t, "", cfg)
			pa, pb := prompt(60, 12), prompt(60, 13)
			a, b := mustOpen(t, m, "q"), mustOpen(t, m, "q")
			mustAppend(t, m, a, pa)
			mustAppend(t, m, b, pb) // drops a's KV: 8 + 8 blocks do not fit in 10
			for round := range 2 {
				for _, s := range []struct {
					id string
					p  []int32
				}{{a, pa}, {b, pb}} {
					if _, err := m.Truncate(1, s.id, 60); err != nil {
						t.Fatal(err)
					}
					g := mustGenerate(t, m, s.id, 3)
					equalIDs(t, fmt.Sprint("round ", round), g.IDs, greedy(t, model, s.p, 3))
					if host > 0 && g.Usage.CachedTokens < 56 {
						t.Errorf("round %d: with a host tier only %d tokens came back", round, g.Usage.CachedTokens)
					}
				}
			}
			// Another session with a's prefix.
			c := mustOpen(t, m, "q")
			r := mustAppend(t, m, c, pa[:45])
			if host > 0 && r.Reused != 40 {
				t.Errorf("prefix from the host tier: %+v", r)
			}
			equalIDs(t, "third session", mustGenerate(t, m, c, 3).IDs, greedy(t, model, pa[:45], 3))
		})
	}
}

// TestHybridDefaultPolicy: with the default configuration a hybrid session
// is snapshotted every 256 tokens, and a truncation resumes from there.
func TestHybridDefaultPolicy(t *testing.T) {
	model := loadFixture(t, "qwen3_next")
	m := newManager(t, "", ModelConfig{Name: "q", Model: model})
	id := mustOpen(t, m, "q")
	p := prompt(600, 14)
	mustAppend(t, m, id, p)
	if info := m.Models()[0]; info.Snapshots != 2 || info.SnapshotBytes == 0 {
		t.Fatalf("snapshots %+v, want 2 (at 256 and 512)", info)
	}
	if _, err := m.Truncate(1, id, 300); err != nil {
		t.Fatal(err)
	}
	g := mustGenerate(t, m, id, 3)
	equalIDs(t, "truncated", g.IDs, greedy(t, model, p[:300], 3))
	if g.Usage.CachedTokens != 256 {
		t.Errorf("resumed from %d, want 256", g.Usage.CachedTokens)
	}
}
