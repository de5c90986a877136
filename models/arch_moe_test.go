package models_test

import (
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
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
