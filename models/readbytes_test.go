package models_test

import (
	"regexp"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
)

// TestDecodeReadBytesQwen3MoE checks the fixture against bytes counted by
// hand from its config (bf16, hidden 64, vocab 512, untied, 2 layers of 4
// q heads and 2 kv heads of 16, 8 experts of width 32, top 2).
func TestDecodeReadBytesQwen3MoE(t *testing.T) {
	ck := openFixture(t, "qwen3_moe")
	m, err := ck.Model(cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	const (
		embed  = 512 * 64 * 2
		expert = 3 * 32 * 64 * 2
		// norms, q/k/v/o, q/k norms, router
		layerDense = 2*64*2 + (64*64+32*64+32*64+64*64)*2 + 2*16*2 + 8*64*2
		total      = 2*embed + 64*2 + 2*(layerDense+8*expert)
		// one embedding row, the whole LM head, and 2 of 8 experts
		read = 64*2 + embed + 64*2 + 2*(layerDense+2*expert)
	)
	if got := m.WeightBytes(); got != total {
		t.Fatalf("WeightBytes %d, want %d", got, total)
	}
	if got := m.DecodeReadBytes(); got != read {
		t.Errorf("DecodeReadBytes %d, want %d", got, read)
	}
}

// routedExpert matches a routed expert's tensor name in the HF layouts
// (not shared_experts, which every token reads).
var routedExpert = regexp.MustCompile(`\.experts\.\d+\.`)

// TestDecodeReadBytesMoEFixtures checks every MoE fixture against a count
// from the checkpoint's tensor names: all weights, less the unselected
// share of the routed experts and all but one row of an untied embedding.
func TestDecodeReadBytesMoEFixtures(t *testing.T) {
	for _, arch := range []string{"qwen3_moe", "glm4_moe", "minimax_m2", "deepseek_v3"} {
		t.Run(arch, func(t *testing.T) {
			ck := openFixture(t, arch)
			m, err := ck.Model(cpu.New(1))
			if err != nil {
				t.Fatal(err)
			}
			var routed int64
			for _, n := range ck.Source.Names() {
				if !routedExpert.MatchString(n) {
					continue
				}
				w, err := ck.Source.Weight(n)
				if err != nil {
					t.Fatal(err)
				}
				routed += int64(len(w.Data))
			}
			if routed == 0 {
				t.Fatal("no routed expert tensors found")
			}
			c := ck.Config
			k, e := int64(c.NumExpertsPerTok), int64(c.NumExperts)
			want := m.WeightBytes() - (routed - routed*k/e)
			if _, err := ck.Source.Weight("lm_head.weight"); err == nil && !c.TieEmbeddings {
				emb, err := ck.Source.Weight("model.embed_tokens.weight")
				if err != nil {
					t.Fatal(err)
				}
				b := int64(len(emb.Data))
				want -= b - b/int64(c.VocabSize)
			}
			got := m.DecodeReadBytes()
			if got != want {
				t.Errorf("DecodeReadBytes %d, want %d (weights %d)", got, want, m.WeightBytes())
			}
			if got >= m.WeightBytes() {
				t.Errorf("DecodeReadBytes %d not below WeightBytes %d", got, m.WeightBytes())
			}
		})
	}
}
