package models_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// TestTensorParallelMoEArchsCPU runs GLM-4.5 (q/k/v biases, per-head q/k
// norms, partial rotary, a dense first layer, shared and routed experts)
// and MiniMax-M2 (q/k norms over all heads, completed by an all-reduce of
// the sums of squares) with 4 heads over 2 KV heads at TP2 and TP4 (at
// TP4 two ranks hold each KV head, so MiniMax's k sum counts it twice).
// Every rank must equal the single-device model to float32 rounding and
// the reference's greedy tokens.
func TestTensorParallelMoEArchsCPU(t *testing.T) {
	for _, arch := range []string{"glm4_moe", "minimax_m2"} {
		t.Run(arch, func(t *testing.T) { checkTP(t, filepath.Join("testdata", "models", arch), 2, 4) })
	}
}

// TestTensorParallelMoEArchsRejects: worlds that do not divide the KV
// heads, the heads or the expert widths fail in CheckTP, before anything
// is loaded. The variants' 3 KV heads refuse 2 ranks, their 32-wide
// experts 3.
func TestTensorParallelMoEArchsRejects(t *testing.T) {
	for _, c := range []struct {
		dir   string
		world int
		want  string
	}{
		{filepath.Join("testdata", "variants", "glm4_moe"), 2, "3 KV heads and 2 ranks"},
		{filepath.Join("testdata", "variants", "minimax_m2"), 2, "3 KV heads and 2 ranks"},
		{filepath.Join("testdata", "variants", "glm4_moe"), 3, "moe_intermediate_size 32 does not divide over 3 ranks"},
		{filepath.Join("testdata", "variants", "minimax_m2"), 3, "expert intermediate_size 32 does not divide over 3 ranks"},
		{filepath.Join("testdata", "models", "glm4_moe"), 8, "4 attention heads do not divide over 8 ranks"},
		{filepath.Join("testdata", "models", "minimax_m2"), 3, "4 attention heads do not divide over 3 ranks"},
	} {
		checkRefused(t, c.dir, c.world, c.want)
	}
	ck := openFixture(t, "glm4_moe")
	cfg := *ck.Config
	cfg.IntermediateSize = 130 // the dense first layer
	if err := models.CheckTP(&cfg, 4); !errors.Is(err, models.ErrTP) || !strings.Contains(err.Error(), "intermediate_size 130") {
		t.Errorf("dense intermediate_size 130 over 4 ranks: %v, want ErrTP", err)
	}
}
