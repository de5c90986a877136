package session

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// TestAppendGenerateMatchesCold: append → generate → append → generate
// gives exactly what a cold decode of the same tokens gives, and the second
// append prefills only its tokens plus the last generated one.
func TestAppendGenerateMatchesCold(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen3_moe"} {
		t.Run(arch, func(t *testing.T) {
			model := loadFixture(t, arch)
			m := newManager(t, "", ModelConfig{Name: arch, Model: model})
			id := mustOpen(t, m, arch)
			p1, p2 := prompt(21, 1), prompt(9, 2)
			r := mustAppend(t, m, id, p1)
			if r.Tokens != 21 || r.Prefilled != 21 || r.Reused != 0 {
				t.Fatalf("first append: %+v", r)
			}
			g1 := mustGenerate(t, m, id, 6)
			if g1.Usage != (Usage{PromptTokens: 21, CachedTokens: 21, CompletionTokens: 6}) {
				t.Errorf("first generate usage %+v", g1.Usage)
			}
			equalIDs(t, "first generate", g1.IDs, greedy(t, model, p1, 6))
			r = mustAppend(t, m, id, p2)
			if r.Prefilled != len(p2)+1 || r.Tokens != 21+6+9 {
				t.Errorf("second append prefilled %d (want %d), tokens %d", r.Prefilled, len(p2)+1, r.Tokens)
			}
			g2 := mustGenerate(t, m, id, 5)
			all := slices.Concat(p1, g1.IDs, p2)
			equalIDs(t, "second generate", g2.IDs, greedy(t, model, all, 5))
			if g2.Usage.PromptTokens != len(all) || g2.Usage.CachedTokens != len(all) {
				t.Errorf("second generate usage %+v", g2.Usage)
			}
			toks, _ := m.Tokens(1, id)
			equalIDs(t, "history", toks, slices.Concat(all, g2.IDs))
			// Generate right after generate: the last token is computed once.
			g3 := mustGenerate(t, m, id, 3)
			if g3.Usage.CachedTokens != len(toks)-1 {
				t.Errorf("third generate cached %d, want %d", g3.Usage.CachedTokens, len(toks)-1)
			}
			equalIDs(t, "third generate", g3.IDs, greedy(t, model, toks, 3))
		})
	}
}

// TestForkTruncate: forking at k and truncating to k both continue like a
// cold session on the first k tokens, and the original is unaffected.
func TestForkTruncate(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model})
	id := mustOpen(t, m, "qwen3")
	p := prompt(40, 3)
	mustAppend(t, m, id, p)
	g := mustGenerate(t, m, id, 4)
	full := slices.Concat(p, g.IDs)
	for _, k := range []int{1, 16, 23, 32, 40, 44} {
		f, err := m.Fork(1, id, k)
		if err != nil {
			t.Fatal(err)
		}
		if f.Tokens != k {
			t.Fatalf("fork at %d has %d tokens", k, f.Tokens)
		}
		equalIDs(t, "fork", mustGenerate(t, m, f.ID, 4).IDs, greedy(t, model, full[:k], 4))
		if err := m.Close(1, f.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The original still continues as before.
	equalIDs(t, "original", mustGenerate(t, m, id, 3).IDs, greedy(t, model, full, 3))
	for _, k := range []int{30, 17, 16} {
		info, err := m.Truncate(1, id, k)
		if err != nil || info.Tokens != k {
			t.Fatalf("truncate to %d: %+v %v", k, info, err)
		}
		toks, _ := m.Tokens(1, id)
		equalIDs(t, "truncated history", toks, full[:k])
		g := mustGenerate(t, m, id, 4)
		equalIDs(t, "after truncate", g.IDs, greedy(t, model, full[:k], 4))
		if g.Usage.CachedTokens < k-1 {
			t.Errorf("truncate to %d: only %d tokens cached", k, g.Usage.CachedTokens)
		}
		if _, err := m.Truncate(1, id, k); err != nil {
			t.Fatal(err)
		}
	}
	// The editor case: truncate, then append different tokens.
	if _, err := m.Truncate(1, id, 10); err != nil {
		t.Fatal(err)
	}
	r := mustAppend(t, m, id, prompt(7, 9))
	if r.Prefilled != 7 {
		t.Errorf("append after truncate prefilled %d, want 7", r.Prefilled)
	}
	equalIDs(t, "editor", mustGenerate(t, m, id, 4).IDs, greedy(t, model, slices.Concat(full[:10], prompt(7, 9)), 4))
}

// TestPrefixReuse: a second session (and a stateless request) starting
// with the same full blocks reuses them.
func TestPrefixReuse(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model})
	shared := prompt(37, 4)
	a := mustOpen(t, m, "qwen3")
	mustAppend(t, m, a, shared)
	b := mustOpen(t, m, "qwen3")
	r := mustAppend(t, m, b, slices.Concat(shared, prompt(5, 5)))
	if r.Reused != 32 || r.Prefilled != 42-32 {
		t.Fatalf("second session: %+v, want 32 reused", r)
	}
	want := greedy(t, model, slices.Concat(shared, prompt(5, 5)), 5)
	equalIDs(t, "reusing session", mustGenerate(t, m, b, 5).IDs, want)

	// Another owner does not share the cache.
	c, err := m.Open(2, "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	r, err = m.Append(context.Background(), 2, c.ID, AppendInput{Tokens: shared})
	if err != nil || r.Reused != 0 {
		t.Fatalf("other owner: %+v %v", r, err)
	}

	// Stateless: a repeated prompt plus more reports the first prompt's
	// whole blocks as cached, including blocks of generated tokens.
	p1 := prompt(50, 6)
	res, err := m.Complete(context.Background(), 1, "qwen3", p1, GenerateParams{MaxTokens: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.CachedTokens != 0 {
		t.Errorf("cold completion cached %d", res.Usage.CachedTokens)
	}
	p2 := slices.Concat(p1, res.IDs, prompt(3, 7))
	res2, err := m.Complete(context.Background(), 1, "qwen3", p2, GenerateParams{MaxTokens: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := 64; res2.Usage.CachedTokens < want {
		t.Errorf("second completion cached %d, want ≥ %d", res2.Usage.CachedTokens, want)
	}
	equalIDs(t, "cached completion", res2.IDs, greedy(t, model, p2, 4))
	if st := m.Stats(); st.CachedTokens == 0 || st.PromptTokens == 0 || st.CompletionTokens != 5+20+4 {
		t.Errorf("stats %+v", st)
	}
}

func TestErrors(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model})
	ctx := context.Background()
	if _, err := m.Open(1, "nope"); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("open unknown model: %v", err)
	}
	id := mustOpen(t, m, "qwen3")
	if _, err := m.Get(2, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("other owner: %v", err)
	}
	if _, err := m.Append(ctx, 2, id, AppendInput{Tokens: []int32{1}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("other owner append: %v", err)
	}
	if _, err := m.Append(ctx, 1, id, AppendInput{Text: "hi"}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("text without tokenizer: %v", err)
	}
	if _, err := m.Append(ctx, 1, id, AppendInput{Tokens: []int32{512}}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("token outside vocabulary: %v", err)
	}
	if _, err := m.Generate(ctx, 1, id, GenerateParams{MaxTokens: 1}, nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("generate on empty session: %v", err)
	}
	if _, err := m.Append(ctx, 1, id, AppendInput{Tokens: make([]int32, 4097)}); !errors.Is(err, ErrContextLength) {
		t.Errorf("too long: %v", err)
	}
	if _, err := m.Fork(1, id, 3); !errors.Is(err, ErrBadRequest) {
		t.Errorf("fork past the end: %v", err)
	}
	if err := m.Close(1, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(1, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("closed session: %v", err)
	}
	if len(m.List(1)) != 0 {
		t.Errorf("list after close: %v", m.List(1))
	}
}

// TestTextStartsWithBOS: the text that starts a session gets the special
// tokens the tokenizer puts before a text (here a Llama-class tokenizer's
// BOS, the demo vocabulary's <|endoftext|>), as a prompt encoded on its
// own does; text appended after it, and a session started from tokens,
// get none.
func TestTextStartsWithBOS(t *testing.T) {
	model, _ := loadDemo(t)
	tok, err := tokenizer.New(demo.TokenizerJSON(),
		[]byte(`{"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "tokenizer_class": "LlamaTokenizerFast"}`))
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, "", ModelConfig{Name: "demo", Model: model, Tokenizer: tok})
	ctx := context.Background()
	id := mustOpen(t, m, "demo")
	for _, text := range []string{"Once", " upon"} {
		if _, err := m.Append(ctx, 1, id, AppendInput{Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := m.Tokens(1, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat([]int32{demo.EndOfText}, tok.Encode("Once"), tok.Encode(" upon")); !slices.Equal(got, want) {
		t.Errorf("tokens %v, want %v", got, want)
	}
	id = mustOpen(t, m, "demo")
	mustAppend(t, m, id, []int32{'A'})
	if _, err := m.Append(ctx, 1, id, AppendInput{Text: "B"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Tokens(1, id); !slices.Equal(got, []int32{'A', 'B'}) {
		t.Errorf("after tokens: %v, want [65 66]", got)
	}
}

// TestHalfKVMatchesCold: with a float16 KV pool (ModelConfig.KVHalf),
// appends, generations and a fork continue exactly as a cold run of the
// model on a float16 pool of its own: prefill and decode read the same
// rounded keys and values.
func TestHalfKVMatchesCold(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model, KVHalf: true})
	cold := func(toks []int32, n int) []int32 {
		t.Helper()
		spec := model.KVSpec(8, 16)
		spec.Half = true
		pool, err := model.Backend.NewKVPool(spec)
		if err != nil {
			t.Fatal(err)
		}
		if !pool.Spec().Half {
			t.Fatal("the CPU backend made no float16 pool")
		}
		seq := models.Seq{Pool: pool, Table: []int32{0, 1, 2, 3, 4, 5, 6, 7}}
		logits, err := model.Forward(seq, toks, models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		var out []int32
		for i := range n {
			next := Argmax(logits)
			out = append(out, next)
			if i == n-1 {
				break
			}
			seq.Start = len(toks) + i
			if logits, err = model.Forward(seq, []int32{next}, models.LastLogits); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	id := mustOpen(t, m, "qwen3")
	p1, p2 := prompt(21, 1), prompt(9, 2)
	mustAppend(t, m, id, p1)
	g1 := mustGenerate(t, m, id, 6)
	equalIDs(t, "first generate", g1.IDs, cold(p1, 6))
	mustAppend(t, m, id, p2)
	g2 := mustGenerate(t, m, id, 5)
	all := slices.Concat(p1, g1.IDs, p2)
	equalIDs(t, "second generate", g2.IDs, cold(all, 5))
	f, err := m.Fork(1, id, 25)
	if err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "fork", mustGenerate(t, m, f.ID, 4).IDs, cold(all[:25], 4))
}
