package models_test

import (
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
)

// TestParityVariantsCPU runs every architecture at a second shape, prompt
// length and weight seed (testdata/variants, made by tools/make_variants.py
// with transformers on the GPU machine), so that parity is not a property
// of one shape: prompt logits within 1e-4 of the float32 reference and the
// KV-cached greedy tokens equal.
func TestParityVariantsCPU(t *testing.T) {
	for _, arch := range []string{"llama", "qwen3", "qwen3-fp8", "qwen3_moe", "glm4_moe", "minimax_m2", "deepseek_v3",
		"deepseek_v3-fp8", "deepseek_v32", "qwen3_5", "qwen3_next"} {
		t.Run(arch, func(t *testing.T) {
			checkParity(t, filepath.Join("testdata", "variants", arch), cpu.New(0), 1e-4)
		})
	}
}
