package models_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
)

// TestParityMoEArchsCPU checks the MoE and latent-attention architectures
// against their transformers references: prompt logits within 1e-4 and the
// KV-cached greedy continuation token for token.
func TestParityMoEArchsCPU(t *testing.T) {
	for _, arch := range []string{"glm4_moe", "minimax_m2", "deepseek_v3", "deepseek_v3-fp8", "deepseek_v32"} {
		t.Run(arch, func(t *testing.T) {
			checkParity(t, filepath.Join("testdata", "models", arch), cpu.New(0), 1e-4)
		})
	}
}

// mtpSource adds the tensors of a multi-token-prediction layer (index
// num_hidden_layers, as DeepSeek-V3 checkpoints store them) and one
// stray tensor to a real checkpoint.
type mtpSource struct {
	models.Source
	extra []string
}

func (s mtpSource) Names() []string { return append(s.Source.Names(), s.extra...) }

func TestMTPLayersIgnoredExplicitly(t *testing.T) {
	for _, arch := range []string{"deepseek_v3", "deepseek_v32", "glm4_moe"} {
		t.Run(arch, func(t *testing.T) {
			ck := openFixture(t, arch)
			mtp := fmt.Sprintf("model.layers.%d.", ck.Config.NumLayers)
			src := mtpSource{ck.Source, []string{mtp + "eh_proj.weight", mtp + "enorm.weight", "model.stray.weight"}}
			v := models.Validate(ck.Config, src, cpu.New(1))
			if !v.OK() {
				t.Fatalf("validation failed: %+v", v)
			}
			if !slices.Equal(v.Unexpected, []string{"model.stray.weight"}) {
				t.Errorf("unexpected tensors %v, want only the stray one", v.Unexpected)
			}
		})
	}
}
