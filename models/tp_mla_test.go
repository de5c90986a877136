package models_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// TestTensorParallelMLACPU runs the MLA fixtures split by heads over CPU
// ranks: deepseek_v3 (bf16 and FP8 with 16×16 blocks) and deepseek_v32
// (the indexer replicated) with 4 heads at TP2 and TP4, and the variants'
// 6 heads at TP2 (3 heads a rank: FP8 q_b_proj rows cut 16-row blocks at
// 72, which are re-blocked). Each rank keeps the whole latent cache. Every
// rank must equal the single-device model to float32 rounding and the
// reference's greedy tokens.
func TestTensorParallelMLACPU(t *testing.T) {
	for _, c := range []struct {
		dir    string
		worlds []int
	}{
		{filepath.Join("testdata", "models", "deepseek_v3"), []int{2, 4}},
		{filepath.Join("testdata", "models", "deepseek_v3-fp8"), []int{2, 4}},
		{filepath.Join("testdata", "models", "deepseek_v32"), []int{2, 4}},
		{filepath.Join("testdata", "variants", "deepseek_v3"), []int{2}},
		{filepath.Join("testdata", "variants", "deepseek_v3-fp8"), []int{2}},
		{filepath.Join("testdata", "variants", "deepseek_v32"), []int{2}},
	} {
		t.Run(strings.ReplaceAll(c.dir, string(filepath.Separator), "_"), func(t *testing.T) {
			checkTP(t, c.dir, c.worlds...)
		})
	}
}

// TestTensorParallelMLARejects: worlds that do not divide the heads (or
// the expert widths) fail in CheckTP, before anything is loaded, and in
// NewRank.
func TestTensorParallelMLARejects(t *testing.T) {
	for _, c := range []struct {
		dir   string
		world int
		want  string
	}{
		{filepath.Join("testdata", "variants", "deepseek_v3"), 4, "6 attention heads do not divide over 4 ranks"},
		{filepath.Join("testdata", "models", "deepseek_v32"), 3, "4 attention heads do not divide over 3 ranks"},
		{filepath.Join("testdata", "models", "deepseek_v3"), 8, "4 attention heads do not divide over 8 ranks"},
	} {
		checkRefused(t, c.dir, c.world, c.want)
	}
	ck := openFixture(t, "deepseek_v3")
	cfg := *ck.Config
	cfg.MoEIntermediateSize = 30
	if err := models.CheckTP(&cfg, 4); !errors.Is(err, models.ErrTP) || !strings.Contains(err.Error(), "moe_intermediate_size 30") {
		t.Errorf("moe_intermediate_size 30 over 4 ranks: %v, want ErrTP", err)
	}
}
