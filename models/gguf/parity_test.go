package gguf_test

import (
	"compress/gzip"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/kernels/quant"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/gguf"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

func unzipFixture(t *testing.T, name string) string {
	t.Helper()
	in, err := os.Open(filepath.Join("testdata", name, "model.gguf.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "model.gguf")
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, zr); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// f32Source serves every weight dequantized to F32: the path for a backend
// without kernels for a block format, and a check of the dequantizers that
// does not depend on any backend's block support.
type f32Source struct{ models.Source }

func (s f32Source) Weight(name string) (*kernels.Weight, error) {
	w, err := s.Source.Weight(name)
	if err != nil || w.DType == kernels.F32 {
		return w, err
	}
	rows, cols := w.Rows(), w.Cols()
	rb, err := w.DType.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4*rows*cols)
	row := make([]float32, cols)
	for r := 0; r < rows; r++ {
		if err := quant.DequantizeRow(w.DType, w.Data[r*rb:(r+1)*rb], row); err != nil {
			return nil, err
		}
		for i, v := range row {
			bits := math.Float32bits(v)
			o := 4 * (r*cols + i)
			out[o], out[o+1], out[o+2], out[o+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
		}
	}
	return &kernels.Weight{Name: w.Name, DType: kernels.F32, Shape: w.Shape, Data: out}, nil
}

type reference struct {
	ids, greedy []int32
	logits      []float32
}

func loadReference(t *testing.T, name string) reference {
	t.Helper()
	f, err := safetensors.OpenFile(filepath.Join("testdata", name, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r reference
	get := func(n string) *safetensors.Tensor {
		tt, ok := f.Tensor(n)
		if !ok {
			t.Fatalf("reference lacks %s", n)
		}
		return tt
	}
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

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// checkParity runs the fixture's prompt and greedy continuation through the
// real model code on the CPU backend.
func checkParity(t *testing.T, name string, cfg *models.Config, src models.Source, ref reference) {
	m, err := models.New(name, cfg, src, cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	n := len(ref.ids) + len(ref.greedy)
	const bs = 8
	blocks := (n + bs - 1) / bs
	pool, err := m.Backend.NewKVPool(m.KVSpec(blocks, bs))
	if err != nil {
		t.Fatal(err)
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	seq := models.Seq{Pool: pool, Table: table, State: m.NewState()}
	logits, err := m.Forward(seq, ref.ids, models.AllLogits)
	if err != nil {
		t.Fatal(err)
	}
	var maxDiff, maxRef float64
	for i := range ref.logits {
		maxDiff = math.Max(maxDiff, math.Abs(float64(logits[i]-ref.logits[i])))
		maxRef = math.Max(maxRef, math.Abs(float64(ref.logits[i])))
	}
	if e := maxDiff / maxRef; e > 1e-4 {
		t.Errorf("prompt logits: relative error %.3g > 1e-4", e)
	} else {
		t.Logf("prompt logits: relative error %.3g", e)
	}
	V := cfg.VocabSize
	next := argmax(logits[(len(ref.ids)-1)*V:])
	var got []int32
	for pos := len(ref.ids); len(got) < len(ref.greedy); pos++ {
		got = append(got, next)
		seq.Start = pos
		l, err := m.Forward(seq, []int32{next}, models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		next = argmax(l)
	}
	for i := range got {
		if got[i] != ref.greedy[i] {
			t.Fatalf("greedy tokens differ at %d: got %v, want %v", i, got, ref.greedy)
		}
	}
}

// TestParity runs every fixture through the model code: once with the
// weights dequantized to F32 at load (always possible), once with the
// stored block formats handed to the CPU backend as they are.
func TestParity(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "qwen3*"))
	ran := 0
	for _, d := range dirs {
		name := filepath.Base(d)
		if strings.HasSuffix(name, "vocab") {
			continue
		}
		ran++
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(unzipFixture(t, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg, err := f.Config()
			if err != nil {
				t.Fatal(err)
			}
			src, err := f.Source()
			if err != nil {
				t.Fatal(err)
			}
			ref := loadReference(t, name)
			t.Run("dequantized", func(t *testing.T) { checkParity(t, name, cfg, f32Source{src}, ref) })
			t.Run("native", func(t *testing.T) {
				be := cpu.New(0)
				for _, n := range src.Names() {
					w, err := src.Weight(n)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := be.LoadWeight(w); errors.Is(err, kernels.ErrUnsupported) {
						t.Skipf("CPU backend has no kernel for %s yet (%v)", w.DType, err)
					}
				}
				checkParity(t, name, cfg, src, ref)
			})
		})
	}
	if ran != 19 {
		t.Fatalf("ran %d fixtures, want 19", ran)
	}
}
