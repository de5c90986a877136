package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/kernels/quant"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/synth"
)

// TestSynthGGUF writes a small Q4_K_M-style checkpoint (and an
// IQ2_XXS-style one), opens it the way pocketd does and runs a forward pass
// on the CPU backend.
func TestSynthGGUF(t *testing.T) {
	for _, f := range []string{"q4_k_m", "iq2_xxs", "q8_0"} {
		t.Run(f, func(t *testing.T) { synthGGUF(t, f) })
	}
}

func synthGGUF(t *testing.T, format string) {
	s := synth.Shape{Arch: "Qwen3ForCausalLM", Vocab: 512, Hidden: 256, Intermediate: 512, Layers: 8, Heads: 4,
		KVHeads: 2, HeadDim: 64, RopeTheta: 1e6, MaxPositions: 4096}
	dir := t.TempDir()
	if _, err := writeSynthGGUF(dir, s, 3, format); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	counts := map[kernels.DType]int{}
	for _, ti := range ck.GGUF.Tensors() {
		counts[ti.Type]++
	}
	// token_embd, output and 4 of 8 ffn_down in Q6_K; for IQ2_XXS every
	// layer matrix; for Q8_0 every matrix.
	want := map[string]map[kernels.DType]int{
		"q4_k_m":  {kernels.Q6_K: 6, kernels.Q4_K: 8*6 + 4},
		"iq2_xxs": {kernels.Q6_K: 2, kernels.IQ2_XXS: 8 * 7},
		"q8_0":    {kernels.Q8_0: 2 + 8*7},
	}[format]
	for dt, n := range want {
		if counts[dt] != n {
			t.Fatalf("tensor types %v", counts)
		}
	}
	m, err := ck.Model(cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := m.Backend.NewKVPool(m.KVSpec(4, 8))
	if err != nil {
		t.Fatal(err)
	}
	seq := models.Seq{Pool: pool, Table: []int32{0, 1, 2, 3}, State: m.NewState()}
	logits, err := m.Forward(seq, []int32{1, 2, 3, 4, 5}, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	var sq float64
	for _, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite logits")
		}
		sq += float64(v) * float64(v)
	}
	if rms := math.Sqrt(sq / float64(len(logits))); rms < 1e-3 || rms > 1e3 {
		t.Fatalf("logits rms %g", rms)
	}
	// The weights have about the intended spread.
	w, _ := ck.Source.Weight("model.layers.0.mlp.gate_proj.weight")
	row := make([]float32, 256)
	bb, _ := w.DType.RowBytes(256)
	if err := quant.DequantizeRow(w.DType, w.Data[:bb], row); err != nil {
		t.Fatal(err)
	}
	var mean, v2 float64
	for _, x := range row {
		mean += float64(x) / 256
		v2 += float64(x) * float64(x) / 256
	}
	if std := math.Sqrt(v2); std < 0.03 || std > 0.12 || math.Abs(mean) > 0.02 {
		t.Fatalf("gate_proj row: mean %g std %g, want ~0 and ~1/16", mean, std)
	}
}

// TestRandomBlocks checks that the conformance generator's blocks decode to
// finite values for every block format.
func TestRandomBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for d := kernels.DType(0); d.Valid(); d++ {
		if _, ok := f16Fields[d]; !ok && d != kernels.MXFP4 {
			continue // formats the generator does not cover (no CUDA kernels)
		}
		b := randomBlocks(rng, d, 3, 512, 1e-3)
		out := make([]float32, 512)
		rb, _ := d.RowBytes(512)
		for r := 0; r < 3; r++ {
			if err := quant.DequantizeRow(d, b[r*rb:(r+1)*rb], out); err != nil {
				t.Fatal(err)
			}
			for _, v := range out {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Abs(float64(v)) > 1e3 {
					t.Fatalf("%s: value %g", d, v)
				}
			}
		}
	}
}
