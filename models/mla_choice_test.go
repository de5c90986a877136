package models

import "testing"

// TestMLAExpandPays pins the choice of form for DeepSeek-V3's widths: the
// CPU expands fresh prompts and appends to short contexts, CUDA's speedup
// every pass the row minimum lets through.
func TestMLAExpandPays(t *testing.T) {
	m := &MLA{R: 512, Dn: 128, Dr: 64, Dv: 128}
	for _, c := range []struct {
		rows, ctx int
		speedup   float64
		want      bool
	}{
		{16, 16, 1, true}, {4096, 4096, 1, true}, // fresh prompts
		{100, 200, 1, true}, {100, 300, 1, false}, {16, 8000, 1, false}, // appends on the CPU
		{16, 8000, 8, true}, {100, 32768, 8, true}, // appends on CUDA
		{1, 8000, 8, false}, // a decode step
	} {
		if got := m.expandPays(c.rows, c.ctx, c.ctx, c.speedup); got != c.want {
			t.Errorf("expandPays(%d rows, %d positions, ×%g) = %v, want %v", c.rows, c.ctx, c.speedup, got, c.want)
		}
	}
}

// TestMLAExpandPaysSparse: under DSA (top 2048) the absorbed form attends
// to 2048 positions a row: the CPU keeps long prompts absorbed, CUDA
// expands them with a mask.
func TestMLAExpandPaysSparse(t *testing.T) {
	m := &MLA{R: 512, Dn: 128, Dr: 64, Dv: 128}
	if m.expandPays(8192, 8192, 2048, 1) {
		t.Error("the CPU expands an 8192-token V3.2 prompt")
	}
	if !m.expandPays(8192, 8192, 2048, 8) {
		t.Error("CUDA keeps an 8192-token V3.2 prompt absorbed")
	}
	if !m.expandPays(1000, 1000, 2048, 1) {
		t.Error("the CPU keeps a 1000-token V3.2 prompt (dense: under top-k) absorbed")
	}
}
