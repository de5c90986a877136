package models_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

// hostRouted is the CPU backend with its MoEOps refused, so MoE layers
// take the host-routing path.
type hostRouted struct{ *cpu.Backend }

func (hostRouted) NewExperts(*kernels.Router, []kernels.Tensor, []kernels.Tensor, []kernels.Tensor) (kernels.ExpertSet, error) {
	return nil, kernels.ErrUnsupported
}

// TestMoEOpsMatchHostRouting checks that the CPU's MoEOps (the reference
// for device routing) give bit-identical logits to host routing on every
// MoE fixture, for a prefill and single-token decode steps.
func TestMoEOpsMatchHostRouting(t *testing.T) {
	for _, arch := range []string{"qwen3_moe", "glm4_moe", "minimax_m2", "deepseek_v3", "deepseek_v3-fp8", "deepseek_v32", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			dir := filepath.Join("testdata", "models", arch)
			ref := loadReference(t, dir)
			dev := runLogits(t, dir, cpu.New(0), ref.ids)
			host := runLogits(t, dir, hostRouted{cpu.New(0)}, ref.ids)
			for i := range host {
				if math.Float32bits(dev[i]) != math.Float32bits(host[i]) {
					t.Fatalf("logit %d: MoEOps %v, host routing %v", i, dev[i], host[i])
				}
			}
		})
	}
}

// runLogits prefills all but the last two ids, then decodes those one at
// a time, returning every logit computed.
func runLogits(t *testing.T, dir string, be kernels.Backend, ids []int32) []float32 {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := ck.Model(be)
	if err != nil {
		t.Fatal(err)
	}
	seq := newSeq(t, m, len(ids))
	n := len(ids) - 2
	out, err := m.Forward(seq, ids[:n], models.AllLogits)
	if err != nil {
		t.Fatal(err)
	}
	out = append([]float32(nil), out...)
	for i := n; i < len(ids); i++ {
		seq.Start = i
		l, err := m.Forward(seq, ids[i:i+1], models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l...)
	}
	return out
}
