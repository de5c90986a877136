package synth

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

// TestWriteConfigEveryFixtureArch generates a checkpoint from each
// fixture's config.json (bf16 and FP8, full depth and a two-layer slice),
// validates it against its architecture and runs a prompt through it.
func TestWriteConfigEveryFixtureArch(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("..", "testdata", "models", "*"))
	if len(dirs) == 0 {
		t.Fatal("no fixtures")
	}
	for _, fix := range dirs {
		cfgJSON, err := os.ReadFile(filepath.Join(fix, "config.json"))
		if err != nil {
			continue
		}
		for _, o := range []Options{{Seed: 3}, {FP8: true, Block: 16, Seed: 3}, {Layers: 2, FP8: true, Block: 16, Seed: 4}} {
			name := filepath.Base(fix)
			if o.FP8 {
				name += "/fp8"
			}
			if o.Layers > 0 {
				name += "/slice"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				if _, err := WriteConfig(dir, cfgJSON, o); err != nil {
					t.Fatal(err)
				}
				cfg, err := models.LoadConfig(dir)
				if err != nil {
					t.Fatal(err)
				}
				if o.Layers > 0 && cfg.NumLayers != o.Layers {
					t.Fatalf("%d layers, want %d", cfg.NumLayers, o.Layers)
				}
				src, err := safetensors.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer src.Close()
				if v := models.Validate(cfg, src, cpu.New(1)); !v.OK() || len(v.Unexpected) > 0 {
					t.Fatalf("validation: %+v", v)
				}
				m, err := models.New("synth", cfg, src, cpu.New(1))
				if err != nil {
					t.Fatal(err)
				}
				if m.KVSpec(1, 16).Layers == 0 {
					return // a slice of linear-attention layers only: nothing to attend
				}
				pool, err := m.Backend.NewKVPool(m.KVSpec(1, 16))
				if err != nil {
					t.Fatal(err)
				}
				logits, err := m.Forward(models.Seq{Pool: pool, Table: []int32{0}, State: m.NewState()}, []int32{1, 2, 3}, models.LastLogits)
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range logits {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("non-finite logit %v", v)
					}
				}
			})
		}
	}
}

// TestPresetsPlan checks that every preset's architecture accepts its
// config and that the checkpoint it would write has the expected size,
// without writing gigabytes.
func TestPresetsPlan(t *testing.T) {
	want := map[string][2]float64{ // GB of tensor data, within 10%
		"deepseek-v3-slice":  {17.5, 0.1},
		"deepseek-v32-slice": {17.6, 0.1},
		"minimax-m2-slice":   {17.1, 0.1},
		"glm-4.5-air-slice":  {9.75, 0.1},
		"qwen3.5-27b-fp8":    {29, 0.1},
	}
	for _, name := range PresetNames() {
		p := Presets[name]
		cfgJSON, err := adjustConfig(p.JSON(), Options{Layers: p.Layers, FP8: p.FP8})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := models.ParseConfig(cfgJSON)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		specs, err := models.ExpectedTensors(cfg, cpu.New(1))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var bytes int64
		for _, e := range entriesFor(specs, Options{FP8: p.FP8}) {
			bytes += e.size()
		}
		gb := float64(bytes) / 1e9
		t.Logf("%s: %d tensors, %.2f GB", name, len(specs), gb)
		if w, ok := want[name]; ok && math.Abs(gb-w[0]) > w[0]*w[1] {
			t.Errorf("%s: %.2f GB, want about %.1f", name, gb, w[0])
		}
	}
}
