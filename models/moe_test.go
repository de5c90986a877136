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

// bindCounter is the CPU backend counting the expert sets it binds.
type bindCounter struct {
	*cpu.Backend
	sets int
}

func (b *bindCounter) NewExperts(r *kernels.Router, gate, up, down []kernels.Tensor) (kernels.ExpertSet, error) {
	b.sets++
	return b.Backend.NewExperts(r, gate, up, down)
}

// TestMoEBindsAtBuild checks that every MoE layer binds its experts when
// the model is built, before any pass (kernels.MoEOps.NewExperts's
// contract): the CUDA backend marks expert weights then, so that the
// decode copies it makes after the build (PrepareDecode) leave them out.
func TestMoEBindsAtBuild(t *testing.T) {
	for _, arch := range []string{"qwen3_moe", "deepseek_v3", "minimax_m2", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			ck, err := checkpoint.Open(filepath.Join("testdata", "models", arch))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			be := &bindCounter{Backend: cpu.New(0)}
			m, err := ck.Model(be)
			if err != nil {
				t.Fatal(err)
			}
			built := be.sets
			if built == 0 {
				t.Fatalf("no expert set bound at build")
			}
			// A prefill and a decode step bind nothing more.
			seq := newSeq(t, m, 4)
			if _, err := m.Forward(seq, []int32{1, 2, 3}, models.LastLogits); err != nil {
				t.Fatal(err)
			}
			seq.Start = 3
			if _, err := m.Forward(seq, []int32{4}, models.LastLogits); err != nil {
				t.Fatal(err)
			}
			if be.sets != built {
				t.Fatalf("%d expert sets bound at build, %d after two passes", built, be.sets)
			}
		})
	}
}
