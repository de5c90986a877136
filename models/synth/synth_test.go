package synth

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

// TestTinyCheckpointLoadsAndRuns writes the tiny shape, checks that the
// same seed gives the same bytes, and runs it through the real loader.
func TestTinyCheckpointLoadsAndRuns(t *testing.T) {
	s := Shapes["tiny"]
	var a, b bytes.Buffer
	if _, err := Encode(&a, s, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := Encode(&b, s, 7); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("same seed, different bytes")
	}
	dir := t.TempDir()
	if _, err := Write(dir, s, 7); err != nil {
		t.Fatal(err)
	}
	cfg, err := models.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := models.New(filepath.Base(dir), cfg, src, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := m.Backend.NewKVPool(m.KVSpec(1, 16))
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.Forward(models.Seq{Pool: pool, Table: []int32{0}}, []int32{1, 2, 3}, models.LastLogits)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range logits {
		if v != v {
			t.Fatal("NaN logits")
		}
	}
}
