package models_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

// TestHiddenModes: the final hidden states (LastHidden, AllHidden: the
// embeddings' source) are what the LM head turns into the logits: each
// row times lm_head.weight gives AllLogits' row, on an attention model
// and on a hybrid, in one pass and in chunks; LastHidden is AllHidden's
// last row.
func TestHiddenModes(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen3_5"} {
		t.Run(arch, func(t *testing.T) {
			dir := filepath.Join("testdata", "models", arch)
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			m, err := ck.Model(cpu.New(0))
			if err != nil {
				t.Fatal(err)
			}
			head := bf16Tensor(t, dir, "lm_head.weight")
			ids := loadReference(t, dir).ids
			T, V, H := len(ids), m.Config.VocabSize, m.Config.HiddenSize
			logits, err := m.Forward(newSeq(t, m, T), ids, models.AllLogits)
			if err != nil {
				t.Fatal(err)
			}
			for _, chunk := range []int{T, 5} { // one pass, and passes of 5 rows
				m.MaxChunk = chunk
				hidden, err := m.Forward(newSeq(t, m, T), ids, models.AllHidden)
				if err != nil {
					t.Fatal(err)
				}
				if len(hidden) != T*H {
					t.Fatalf("chunk %d: %d hidden values, want %d", chunk, len(hidden), T*H)
				}
				got := make([]float32, T*V)
				for r := range T {
					for v := range V {
						var s float64
						for k := range H {
							s += float64(hidden[r*H+k]) * float64(head[v*H+k])
						}
						got[r*V+v] = float32(s)
					}
				}
				if e := relErr(got, logits); e > 1e-4 {
					t.Errorf("chunk %d: hidden × lm_head against the logits: relative error %.3g", chunk, e)
				}
				last, err := m.Forward(newSeq(t, m, T), ids, models.LastHidden)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(last, hidden[(T-1)*H:]); len(last) != H || e > 1e-6 {
					t.Errorf("chunk %d: LastHidden (%d values) differs from AllHidden's last row by %.3g", chunk, len(last), e)
				}
			}
		})
	}
}

// bf16Tensor reads a BF16 tensor of dir's checkpoint as float32s.
func bf16Tensor(t *testing.T, dir, name string) []float32 {
	t.Helper()
	f, err := safetensors.OpenFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tt, ok := f.Tensor(name)
	if !ok || tt.DType != "BF16" {
		t.Fatalf("%s: missing or not BF16", name)
	}
	out := make([]float32, len(tt.Data)/2)
	for i := range out {
		out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(tt.Data[2*i:])) << 16)
	}
	return out
}
