package models_test

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

// composedFused gives the CPU backend kernels.FusedOps made of its own
// unfused ops, so that a model's fused one-token path (models/fused.go)
// can be checked in CI without a GPU: it must take the fused calls and
// produce exactly the unfused logits. With decline set it refuses every
// call, which must also change nothing; with declineAttn set it refuses
// only RoPEAttention (the backend's shape limits), so that the model runs
// RoPEStoreKV and Attention instead.
type composedFused struct {
	*cpu.Backend
	decline, declineAttn bool
	calls                map[string]int
}

func (c *composedFused) NormMatMul(dst []kernels.Buf, x kernels.Buf, norm kernels.Tensor, eps float32, ws []kernels.Tensor, rows int) bool {
	c.calls["NormMatMul"]++
	if len(ws) == 3 && strings.Contains(ws[1].Weight().Name, "kv_a_proj") {
		c.calls["NormMatMul(MLA)"]++ // q_a (or q), the KV latent and the rope key
	}
	if c.decline {
		return false
	}
	in := ws[0].Weight().Cols()
	normed := c.NewBuf(rows * in)
	c.RMSNorm(normed, x, norm, rows, in, eps)
	for i, w := range ws {
		c.MatMul(dst[i], normed, w, rows)
	}
	return true
}

func (c *composedFused) NormSwiGLU(act, x kernels.Buf, norm kernels.Tensor, eps float32, gate, up kernels.Tensor, rows int) bool {
	c.calls["NormSwiGLU"]++
	if c.decline {
		return false
	}
	in, out := gate.Weight().Cols(), gate.Weight().Rows()
	normed, u := c.NewBuf(rows*in), c.NewBuf(rows*out)
	c.RMSNorm(normed, x, norm, rows, in, eps)
	c.MatMul(act, normed, gate, rows)
	c.MatMul(u, normed, up, rows)
	c.SwiGLU(act, act, u, rows*out)
	return true
}

func (c *composedFused) MatMulAdd(acc, x kernels.Buf, w kernels.Tensor, rows int) bool {
	c.calls["MatMulAdd"]++
	if c.decline {
		return false
	}
	out := w.Weight().Rows()
	y := c.NewBuf(rows * out)
	c.MatMul(y, x, w, rows)
	c.Add(acc, acc, y, rows*out)
	return true
}

func (c *composedFused) RoPEStoreKV(q, k, v kernels.Buf, qNorm, kNorm kernels.Tensor, eps float32, p kernels.KVPool, layer int,
	pos, slots []int32, heads, kvHeads, headDim int, r *kernels.RoPE) bool {
	c.calls["RoPEStoreKV"]++
	if c.decline || qNorm != nil && qNorm.Weight().Shape[0] != headDim { // per-head norms only, as CUDA's
		return false
	}
	c.normRopeStore(q, k, v, qNorm, kNorm, eps, p, layer, pos, slots, heads, kvHeads, headDim, r)
	return true
}

// normRopeStore is RoPEStoreKV with q/k norms per head or, where the norm
// vectors are longer than a head, over the whole rows (MiniMax-M2's).
func (c *composedFused) normRopeStore(q, k, v kernels.Buf, qNorm, kNorm kernels.Tensor, eps float32, p kernels.KVPool,
	layer int, pos, slots []int32, heads, kvHeads, headDim int, r *kernels.RoPE) {
	rows := len(pos)
	switch {
	case qNorm == nil:
	case qNorm.Weight().Shape[0] == headDim:
		c.RMSNorm(q, q, qNorm, rows*heads, headDim, eps)
		c.RMSNorm(k, k, kNorm, rows*kvHeads, headDim, eps)
	default:
		c.RMSNorm(q, q, qNorm, rows, heads*headDim, eps)
		c.RMSNorm(k, k, kNorm, rows, kvHeads*headDim, eps)
	}
	c.RoPE(q, pos, heads, headDim, r)
	c.RoPE(k, pos, kvHeads, headDim, r)
	c.StoreKV(p, layer, k, v, slots)
}

func (c *composedFused) RoPEAttention(dst, q, k, v kernels.Buf, qNorm, kNorm kernels.Tensor, eps float32, p kernels.KVPool,
	layer int, pos, slots []int32, seq kernels.AttnSeq, heads, kvHeads, headDim int, r *kernels.RoPE, scale float32) bool {
	c.calls["RoPEAttention"]++
	if c.decline || c.declineAttn {
		return false
	}
	c.normRopeStore(q, k, v, qNorm, kNorm, eps, p, layer, pos, slots, heads, kvHeads, headDim, r)
	c.Attention(dst, q, p, layer, seq, 1, heads, scale)
	return true
}

// MoEExpertsNorm composes kernels.MoEFusedOps from the CPU's RMSNorm,
// MoEExperts and Add.
func (c *composedFused) MoEExpertsNorm(set kernels.ExpertSet, dst, x kernels.Buf, norm kernels.Tensor, eps float32,
	sel kernels.Buf, add bool) bool {
	c.calls["MoEExpertsNorm"]++
	if c.decline {
		return false
	}
	hid := norm.Weight().Shape[0]
	n := c.NewBuf(hid)
	c.RMSNorm(n, x, norm, 1, hid, eps)
	if !add {
		c.MoEExperts(set, dst, n, sel, 1)
		return true
	}
	y := c.NewBuf(hid)
	c.MoEExperts(set, y, n, sel, 1)
	c.Add(dst, dst, y, hid)
	return true
}

// decodeLogits prefills the fixture's prompt, then decodes steps tokens
// greedily, returning every step's logits.
func decodeLogits(t *testing.T, dir string, be kernels.Backend, steps int) []float32 {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := ck.Model(be)
	if err != nil {
		t.Fatal(err)
	}
	ref := loadReference(t, dir)
	seq := newSeq(t, m, len(ref.ids)+steps)
	l, err := m.Forward(seq, ref.ids, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	var all []float32
	for i := range steps {
		seq.Start = len(ref.ids) + i
		if l, err = m.Forward(seq, []int32{argmax(l)}, models.LastLogits); err != nil {
			t.Fatal(err)
		}
		all = append(all, l...)
	}
	return all
}

func TestFusedDecodePath(t *testing.T) {
	for _, tc := range []struct {
		arch    string
		fused   []string // calls the fused path must make
		perStep int      // NormMatMul calls per decode step, if checked (one per mixer layer, and the LM head's)
		// tol is the largest |logit - unfused| allowed, relative to the
		// largest |unfused logit|; 0: bit for bit. The fused MoE adds a
		// shared expert to the residual after the routed sum, not with it.
		tol float64
	}{
		{"llama", []string{"NormMatMul", "NormSwiGLU", "MatMulAdd", "RoPEAttention"}, 0, 0},
		{"qwen3", []string{"NormMatMul", "NormSwiGLU", "MatMulAdd", "RoPEAttention"}, 0, 0}, // per-head q/k norms
		{"qwen3_moe", []string{"NormMatMul", "MatMulAdd", "RoPEAttention", "MoEExpertsNorm"}, 0, 0},
		{"minimax_m2", []string{"NormMatMul", "MatMulAdd", "RoPEAttention", "MoEExpertsNorm"}, 0, 0},                // whole-row q/k norms
		{"glm4_moe", []string{"NormMatMul", "NormSwiGLU", "MatMulAdd", "RoPEAttention", "MoEExpertsNorm"}, 0, 1e-5}, // q/k/v biases, a shared expert
		{"deepseek_v3", []string{"NormMatMul(MLA)", "NormSwiGLU", "MatMulAdd", "MoEExpertsNorm"}, 0, 1e-5},          // a shared expert
		{"deepseek_v32", []string{"NormSwiGLU", "MatMulAdd", "MoEExpertsNorm"}, 0, 1e-5},                            // the indexer keeps MLA unfused
		// hybrids: DeltaNet projections in one NormMatMul, gated attention;
		// Qwen3-Next's MoE layers add the router's (and its shared expert
		// gate's) NormMatMul.
		{"qwen3_5", []string{"NormMatMul", "NormSwiGLU", "MatMulAdd", "RoPEAttention"}, 5, 0},
		{"qwen3_next", []string{"NormMatMul", "NormSwiGLU", "MatMulAdd", "RoPEAttention", "MoEExpertsNorm"}, 9, 1e-5},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			dir := filepath.Join("testdata", "models", tc.arch)
			const steps = 6
			want := decodeLogits(t, dir, cpu.New(0), steps)
			for _, mode := range []struct{ decline, declineAttn bool }{{false, false}, {false, true}, {true, false}} {
				fb := &composedFused{Backend: cpu.New(0), decline: mode.decline, declineAttn: mode.declineAttn, calls: map[string]int{}}
				got := decodeLogits(t, dir, fb, steps)
				scale := 0.0
				for _, v := range want {
					scale = max(scale, math.Abs(float64(v)))
				}
				for i := range want {
					if tc.tol == 0 && math.Float32bits(got[i]) != math.Float32bits(want[i]) ||
						math.Abs(float64(got[i]-want[i])) > tc.tol*scale {
						t.Fatalf("%+v: logit %d = %v, unfused %v", mode, i, got[i], want[i])
					}
				}
				fused := tc.fused
				if mode.declineAttn && slices.Contains(fused, "RoPEAttention") && tc.arch != "minimax_m2" {
					// The fallback (RoPEStoreKV norms per head only: MiniMax's
					// run unfused).
					fused = append(slices.Clone(fused), "RoPEStoreKV")
				}
				for _, name := range fused {
					if fb.calls[name] == 0 {
						t.Errorf("%+v: the fused path never called %s (calls %v)", mode, name, fb.calls)
					}
				}
				if n := fb.calls["NormMatMul"]; tc.perStep > 0 && n != tc.perStep*steps {
					t.Errorf("%+v: NormMatMul called %d times in %d steps, want %d per step", mode, n, steps, tc.perStep)
				}
				if !mode.decline && !mode.declineAttn && fb.calls["RoPEStoreKV"] != 0 {
					t.Errorf("RoPEStoreKV called %d times beside an accepted RoPEAttention", fb.calls["RoPEStoreKV"])
				}
			}
		})
	}
}
