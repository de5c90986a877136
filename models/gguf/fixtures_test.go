package gguf

import (
	"compress/gzip"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/quant"
)

// fixture decompresses testdata/<name>/<file>.gz into a temporary file and
// returns its path.
func fixture(t testing.TB, name, file string) string {
	t.Helper()
	in, err := os.Open(filepath.Join("testdata", name, file+".gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), file)
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

func modelFixtures(t testing.TB) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "qwen3*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "model.gguf.gz")); err == nil {
			names = append(names, filepath.Base(d))
		}
	}
	if len(names) != 19 {
		t.Fatalf("found %d model fixtures, want 19", len(names))
	}
	return names
}

// dequant returns the whole tensor as float32.
func dequant(t testing.TB, f *File, ti TensorInfo) []float32 {
	t.Helper()
	cols := ti.Shape[len(ti.Shape)-1]
	rows := 1
	for _, d := range ti.Shape[:len(ti.Shape)-1] {
		rows *= d
	}
	rb, err := ti.Type.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := f.Data(ti)
	out := make([]float32, rows*cols)
	for r := 0; r < rows; r++ {
		if err := quant.DequantizeRow(ti.Type, data[r*rb:(r+1)*rb], out[r*cols:(r+1)*cols]); err != nil {
			t.Fatalf("%s row %d: %v", ti.Name, r, err)
		}
	}
	return out
}

func TestFixturesOpenAndDequantize(t *testing.T) {
	for _, name := range modelFixtures(t) {
		t.Run(name, func(t *testing.T) {
			f, err := Open(fixture(t, name, "model.gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors()) == 0 {
				t.Fatal("no tensors")
			}
			typ := strings.ToUpper(strings.TrimPrefix(strings.TrimPrefix(name, "qwen3-"), "qwen3moe-"))
			seen := false
			for _, ti := range f.Tensors() {
				if ti.Type.String() == typ {
					seen = true
				}
				w, err := f.Weight(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				if w.Validate() != nil {
					t.Fatal(w.Validate())
				}
				for i, v := range dequant(t, f, ti) {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("%s[%d] = %v", ti.Name, i, v)
					}
				}
			}
			if !strings.Contains(name, "moe") && !seen {
				t.Errorf("no tensor of type %s", typ)
			}
			cfg, err := f.Config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.NumLayers != 2 || cfg.HiddenSize != 256 || cfg.NumHeads != 4 || cfg.NumKVHeads != 2 ||
				cfg.HeadDim != 64 || cfg.VocabSize != 512 || cfg.RopeTheta != 1e6 || cfg.RMSNormEps != 1e-6 {
				t.Errorf("config %+v", cfg)
			}
			src, err := f.Source()
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range src.Names() {
				w, err := src.Weight(n)
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				if !strings.HasPrefix(n, "model.") && n != "lm_head.weight" {
					t.Errorf("unmapped tensor %s", n)
				}
				if err := w.Validate(); err != nil {
					t.Error(err)
				}
			}
			if strings.Contains(name, "moe") {
				if cfg.Arch() != "Qwen3MoeForCausalLM" || cfg.NumExperts != 8 || cfg.NumExpertsPerTok != 2 || !cfg.NormTopKProb {
					t.Errorf("moe config %+v", cfg)
				}
				w, err := src.Weight("model.layers.1.mlp.experts.7.down_proj.weight")
				if err != nil {
					t.Fatal(err)
				}
				if w.Rows() != cfg.HiddenSize || w.Cols() != cfg.MoEIntermediateSize {
					t.Errorf("expert shape %v", w.Shape)
				}
			} else if cfg.Arch() != "Qwen3ForCausalLM" {
				t.Errorf("arch %s", cfg.Arch())
			}
		})
	}
}
