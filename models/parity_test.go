package models_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

// reference is a fixture's expected outputs.
type reference struct {
	ids, greedy []int32
	logits      []float32
}

func loadReference(t testing.TB, dir string) reference {
	t.Helper()
	f, err := safetensors.OpenFile(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	get := func(name string) *safetensors.Tensor {
		tt, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("reference lacks %s", name)
		}
		return tt
	}
	var r reference
	if r.ids, err = get("input_ids").Int32s(); err != nil {
		t.Fatal(err)
	}
	if r.greedy, err = get("greedy").Int32s(); err != nil {
		t.Fatal(err)
	}
	if r.logits, err = get("logits").Float32s(); err != nil {
		t.Fatal(err)
	}
	return r
}

// relErr is max|a-b| / max|b|, the parity measure of the fixtures.
func relErr(a, b []float32) float64 {
	var maxDiff, maxRef float64
	for i := range b {
		maxDiff = math.Max(maxDiff, math.Abs(float64(a[i]-b[i])))
		maxRef = math.Max(maxRef, math.Abs(float64(b[i])))
	}
	return maxDiff / maxRef
}

// newSeq gives a sequence a private pool big enough for n tokens.
func newSeq(t testing.TB, m *models.Model, n int) models.Seq {
	const bs = 4 // small blocks exercise the block-table indexing
	blocks := (n + bs - 1) / bs
	pool, err := m.Backend.NewKVPool(m.KVSpec(blocks, bs))
	if err != nil {
		t.Fatal(err)
	}
	table := make([]int32, blocks)
	for i := range table {
		// Reverse order: positions must be found through the table.
		table[i] = int32(blocks - 1 - i)
	}
	return models.Seq{Pool: pool, Table: table, State: m.NewState()}
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// checkParity verifies the prompt logits and the KV-cached greedy decode
// of one fixture directory.
func checkParity(t *testing.T, dir string, be kernels.Backend, tol float64) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := ck.Model(be)
	if err != nil {
		t.Fatal(err)
	}
	ref := loadReference(t, dir)
	V := m.Config.VocabSize
	seq := newSeq(t, m, len(ref.ids)+len(ref.greedy))
	logits, err := m.Forward(seq, ref.ids, models.AllLogits)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(logits, ref.logits); e > tol {
		t.Errorf("prompt logits: relative error %.3g > %.g", e, tol)
	} else {
		t.Logf("prompt logits: relative error %.3g", e)
	}
	// Greedy decode through the KV cache, one token at a time.
	next := argmax(logits[(len(ref.ids)-1)*V:])
	var got []int32
	pos := len(ref.ids)
	for range ref.greedy {
		got = append(got, next)
		seq.Start = pos
		l, err := m.Forward(seq, []int32{next}, models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		next = argmax(l)
		pos++
	}
	for i := range ref.greedy {
		if got[i] != ref.greedy[i] {
			t.Fatalf("greedy tokens differ at %d: got %v, want %v", i, got, ref.greedy)
		}
	}
}

func TestParityCPU(t *testing.T) {
	for _, arch := range []string{"llama", "qwen3", "qwen3-fp8", "qwen3_moe"} {
		t.Run(arch, func(t *testing.T) {
			checkParity(t, filepath.Join("testdata", "models", arch), cpu.New(0), 1e-4)
		})
	}
}
