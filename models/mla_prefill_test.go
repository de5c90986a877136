package models_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
)

// absorbedOnly is the CPU backend without kernels.MLAPrefillOps and
// kernels.HeadMatMul: their methods are shadowed by fields at the same
// depth, so none is promoted, and every MLA pass takes the absorbed form
// with a product per head (the path of a backend with neither).
type absorbedOnly struct {
	*cpu.Backend
	hideExpanded
}

type hideExpanded struct {
	ReadKV, MLAExpandedAttention, HeadMatMulTakes, MatMulHeads struct{}
}

// countingExpanded is the CPU backend counting its expanded attentions.
type countingExpanded struct {
	*cpu.Backend
	calls *int
}

// MLAExpandSpeedup is the CUDA backend's, so that appends take the
// expanded form (and read the earlier latents back) as they do there.
func (c countingExpanded) MLAExpandSpeedup() float64 { return 8 }

func (c countingExpanded) MLAExpandedAttention(dst, q, qpe, kv, kpe kernels.Buf, a kernels.MLAExpanded) bool {
	*c.calls++
	return c.Backend.MLAExpandedAttention(dst, q, qpe, kv, kpe, a)
}

// TestMLAExpandedPrefillCPU runs passes of the MLA fixtures on the CPU
// with kernels.MLAPrefillOps and kernels.HeadMatMul (the prompt passes
// expanded, the absorbed ones with all heads in one product) and without
// either (absorbed, a product per head): a fresh 40-token prompt, then
// appends of 20 tokens (which read the earlier latents back from the
// cache) and of 16, then of 3 and 1 (absorbed in both models). The logits must agree to float32 rounding,
// and the expanded model must really have taken its path (on
// DeepSeek-V3.2's fixture, whose indexer selects 8 positions, with each
// row masked to its selection: DSAMask).
func TestMLAExpandedPrefillCPU(t *testing.T) {
	var _ kernels.MLAPrefillOps = cpu.New(1)
	if _, ok := any(absorbedOnly{}).(kernels.MLAPrefillOps); ok {
		t.Fatal("absorbedOnly still offers MLAPrefillOps")
	}
	if _, ok := any(absorbedOnly{}).(kernels.HeadMatMul); ok {
		t.Fatal("absorbedOnly still offers HeadMatMul")
	}
	for arch, wantCalls := range map[string]int{"deepseek_v3": 9, "deepseek_v3-fp8": 9, "deepseek_v32": 9} {
		t.Run(arch, func(t *testing.T) {
			ck := openFixture(t, arch)
			var calls int
			ex, err := ck.Model(countingExpanded{cpu.New(2), &calls})
			if err != nil {
				t.Fatal(err)
			}
			ab, err := ck.Model(absorbedOnly{Backend: cpu.New(2)})
			if err != nil {
				t.Fatal(err)
			}
			V := ex.Config.VocabSize
			const n = 80
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32((i*37 + 11) % V)
			}
			se, sa := newSeq(t, ex, n), newSeq(t, ab, n)
			pos := 0
			for _, rows := range []int{40, 20, 16, 3, 1} {
				se.Start, sa.Start = pos, pos
				le, err := ex.Forward(se, ids[pos:pos+rows], models.AllLogits)
				if err != nil {
					t.Fatal(err)
				}
				la, err := ab.Forward(sa, ids[pos:pos+rows], models.AllLogits)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(le, la); e > 2e-5 {
					t.Errorf("%d rows at %d: expanded vs absorbed logits, relative error %.3g", rows, pos, e)
				} else {
					t.Logf("%d rows at %d: relative error %.3g", rows, pos, e)
				}
				pos += rows
			}
			// Three passes of rows ≥ 16, three layers, one head group.
			if calls != wantCalls {
				t.Errorf("%d expanded attentions, want %d", calls, wantCalls)
			}
		})
	}
}

// bf16Heads is the CPU backend whose HeadMatMul takes only bf16 and FP8
// stacks, as the CUDA backend's kernel does, counting its products.
type bf16Heads struct {
	*cpu.Backend
	calls *int
}

func (c bf16Heads) HeadMatMulTakes(w *kernels.Weight) bool {
	return w.DType == kernels.BF16 || w.DType == kernels.F8E4M3
}

func (c bf16Heads) MatMulHeads(dst, x kernels.Buf, w kernels.Tensor, a kernels.HeadProduct) {
	*c.calls++
	c.Backend.MatMulHeads(dst, x, w, a)
}

// f32KVB serves kv_b_proj widened to F32, as GGUF's deepseek2 rejoin of
// block-format attn_k_b/attn_v_b does.
type f32KVB struct{ models.Source }

func (s f32KVB) Weight(name string) (*kernels.Weight, error) {
	w, err := s.Source.Weight(name)
	if err != nil || !strings.HasSuffix(name, "kv_b_proj.weight") {
		return w, err
	}
	if w.DType != kernels.BF16 {
		return nil, fmt.Errorf("%s is %s, the test widens bf16", name, w.DType)
	}
	out := &kernels.Weight{Name: w.Name, DType: kernels.F32, Shape: w.Shape, Data: make([]byte, 2*len(w.Data))}
	for i := 0; i < len(w.Data); i += 2 {
		out.Data[2*i+2], out.Data[2*i+3] = w.Data[i], w.Data[i+1]
	}
	return out, nil
}

// TestMLAHeadsRoundedToBF16 builds deepseek_v3 with an F32 kv_b_proj on a
// backend whose per-head products take bf16 only: the stacked matrices go
// in rounded to bf16 (exact here: the F32 values are the fixture's bf16
// ones), so decode uses the one-call products and equals the bf16 model.
func TestMLAHeadsRoundedToBF16(t *testing.T) {
	ck := openFixture(t, "deepseek_v3")
	ref, err := ck.Model(cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	m, err := models.New("deepseek_v3-f32kvb", ck.Config, f32KVB{ck.Source}, bf16Heads{cpu.New(2), &calls})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{5, 77, 301, 2, 9, 64, 400, 13}
	sr, sm := newSeq(t, ref, len(ids)), newSeq(t, m, len(ids))
	for i := range ids { // one token a pass: the absorbed form throughout
		sr.Start, sm.Start = i, i
		lr, err := ref.Forward(sr, ids[i:i+1], models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		lm, err := m.Forward(sm, ids[i:i+1], models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		if e := relErr(lm, lr); e != 0 {
			t.Fatalf("token %d: logits differ from the bf16 model (relative %.3g)", i, e)
		}
	}
	if want := 2 * len(ids) * ck.Config.NumLayers; calls != want {
		t.Errorf("%d per-head products, want %d (the stacked path)", calls, want)
	}
}
