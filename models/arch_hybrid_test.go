package models_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

// The Gated DeltaNet hybrids: prompt logits and KV-cached greedy decode
// against the transformers reference (whose prefill runs the chunked
// delta rule and whose decode runs the recurrent step).
func TestParityHybridCPU(t *testing.T) {
	for _, arch := range []string{"qwen3_5", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			checkParity(t, filepath.Join("testdata", "models", arch), cpu.New(0), 1e-4)
		})
	}
}

func openHybrid(t *testing.T, arch string) (*models.Model, reference) {
	t.Helper()
	dir := filepath.Join("testdata", "models", arch)
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	m, err := ck.Model(cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	if m.NewState() == nil {
		t.Fatal("hybrid model returned no recurrent state")
	}
	return m, loadReference(t, dir)
}

// Prefilling a prompt in two pieces must give the logits of one piece:
// the conv and delta-rule state carry across passes exactly.
func TestHybridSplitPrefill(t *testing.T) {
	for _, arch := range []string{"qwen3_5", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			m, ref := openHybrid(t, arch)
			n := len(ref.ids)
			whole := newSeq(t, m, n)
			want, err := m.Forward(whole, ref.ids, models.AllLogits)
			if err != nil {
				t.Fatal(err)
			}
			for _, split := range []int{1, 2, 3, 5, 11, n - 1} {
				seq := newSeq(t, m, n)
				first, err := m.Forward(seq, ref.ids[:split], models.AllLogits)
				if err != nil {
					t.Fatal(err)
				}
				seq.Start = split
				second, err := m.Forward(seq, ref.ids[split:], models.AllLogits)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(append(first, second...), want); e > 1e-5 {
					t.Errorf("split at %d: relative error %.3g against one piece", split, e)
				}
			}
		})
	}
}

// A long prompt in one pass (the CPU backend's chunked delta rule, over
// 64 tokens) gives the logits of the same prompt in pieces of at most 64
// tokens (the token-by-token recurrence), state carried across chunks
// and passes.
func TestHybridLongPrefill(t *testing.T) {
	for _, arch := range []string{"qwen3_5", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			m, ref := openHybrid(t, arch)
			const n = 200
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = ref.ids[(i*7+i/len(ref.ids))%len(ref.ids)]
			}
			whole := newSeq(t, m, n)
			want, err := m.Forward(whole, ids, models.AllLogits)
			if err != nil {
				t.Fatal(err)
			}
			seq := newSeq(t, m, n)
			var got []float32
			for lo := 0; lo < n; lo += 64 {
				hi := min(lo+64, n)
				seq.Start = lo
				l, err := m.Forward(seq, ids[lo:hi], models.AllLogits)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, l...)
			}
			if e := relErr(got, want); e > 1e-5 {
				t.Errorf("relative error %.3g between one pass and 64-token pieces", e)
			}
		})
	}
}

// A Clone()d state, and a state restored from a Snapshot, continue
// exactly as the original does; the state refuses a pass that does not
// start where it stands.
func TestHybridStateCloneSnapshot(t *testing.T) {
	for _, arch := range []string{"qwen3_5", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			m, ref := openHybrid(t, arch)
			n, split := len(ref.ids), 10
			seq := newSeq(t, m, n)
			if _, err := m.Forward(seq, ref.ids[:split], models.NoLogits); err != nil {
				t.Fatal(err)
			}
			st := seq.State.(models.RecurrentState)
			if st.Pos() != split {
				t.Fatalf("state at %d after %d tokens", st.Pos(), split)
			}
			snap := st.Snapshot()
			if len(snap) != st.Len() || st.SizeBytes() != int64(4*st.Len()) {
				t.Fatalf("snapshot of %d values, Len %d, SizeBytes %d", len(snap), st.Len(), st.SizeBytes())
			}
			clone := st.Clone() // on the device: the CPU backend's CopyBuf
			restored := m.NewState().(models.RecurrentState)
			if err := restored.Restore(snap, split); err != nil {
				t.Fatal(err)
			}
			copied := m.NewState().(*models.DeltaState)
			if err := copied.CopyFrom(st); err != nil || copied.Pos() != split {
				t.Fatalf("CopyFrom: %v, at %d", err, copied.Pos())
			}
			if err := copied.CopyFrom(restored.Clone()); err != nil { // into its own buffers again
				t.Fatal(err)
			}
			// The original continues first: the copies must not share memory with it.
			seq.Start = split
			want, err := m.Forward(seq, ref.ids[split:], models.AllLogits)
			if err != nil {
				t.Fatal(err)
			}
			for name, s := range map[string]models.RecurrentState{"clone": clone, "restored": restored, "copied": copied} {
				seq2 := seq
				seq2.State = s
				got, err := m.Forward(seq2, ref.ids[split:], models.AllLogits)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(got, want); e != 0 {
					t.Errorf("%s state: relative error %.3g against the original", name, e)
				}
			}
			// The original now stands at n: a pass from split must be refused.
			if _, err := m.Forward(seq, ref.ids[split:], models.AllLogits); !errors.Is(err, models.ErrState) {
				t.Errorf("pass from a stale position: err = %v, want ErrState", err)
			}
			if err := restored.Restore(snap[1:], split); !errors.Is(err, models.ErrState) {
				t.Errorf("short snapshot: err = %v, want ErrState", err)
			}
			other, _ := openHybrid(t, map[string]string{"qwen3_5": "qwen3_next", "qwen3_next": "qwen3_5"}[arch])
			if err := copied.CopyFrom(other.NewState().(models.RecurrentState)); !errors.Is(err, models.ErrState) {
				t.Errorf("copy from another model's state: err = %v, want ErrState", err)
			}
			st.Reset()
			seq.Start = 0
			again, err := m.Forward(seq, ref.ids, models.AllLogits)
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr(again[split*m.Config.VocabSize:], want); e > 1e-5 {
				t.Errorf("after Reset: relative error %.3g", e)
			}
		})
	}
}

// dropSource hides some tensors of a checkpoint.
type dropSource struct {
	models.Source
	drop []string
}

func (d dropSource) Weight(name string) (*kernels.Weight, error) {
	if slices.Contains(d.drop, name) {
		return nil, fmt.Errorf("%s: %w", name, models.ErrMissingTensor)
	}
	return d.Source.Weight(name)
}

func (d dropSource) Names() []string {
	return slices.DeleteFunc(d.Source.Names(), func(n string) bool { return slices.Contains(d.drop, n) })
}

// plainBackend hides the CPU backend's optional hybrid ops.
type plainBackend struct{ kernels.Backend }

// Every tensor of the fixtures is expected and read; a missing one is
// reported by name (also through the zero-centred norm path), and a
// backend without the hybrid ops is refused at build time.
func TestHybridValidate(t *testing.T) {
	for _, arch := range []string{"qwen3_5", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			ck := openFixture(t, arch)
			be := cpu.New(1)
			if v := models.Validate(ck.Config, ck.Source, be); !v.OK() || len(v.Unexpected) > 0 {
				t.Errorf("fixture: %+v", v)
			}
			drop := []string{"model.layers.0.linear_attn.conv1d.weight", "model.layers.3.self_attn.q_norm.weight", "model.norm.weight"}
			v := models.Validate(ck.Config, dropSource{ck.Source, drop}, be)
			if v.OK() || len(v.Missing) != len(drop) {
				t.Errorf("dropped %v: %+v", drop, v)
			}
			if _, err := models.New(arch, ck.Config, ck.Source, plainBackend{be}); !errors.Is(err, kernels.ErrUnsupported) {
				t.Errorf("backend without hybrid ops: err = %v, want ErrUnsupported", err)
			}
		})
	}
}
