package session

import (
	"math"
	"testing"

	"github.com/pocketllm/pocketllm/models"
)

// TestEmbed: Embed's vectors are the model's final hidden states pooled
// and normalized, for last-token and mean pooling, on an attention model
// and a hybrid, in one scheduler job and in several; a repeated prompt
// (its blocks now in the prefix cache) gives the same vector.
func TestEmbed(t *testing.T) {
	defer func(c int) { embedChunk = c }(embedChunk)
	for _, arch := range []string{"qwen3", "qwen3_5"} {
		t.Run(arch, func(t *testing.T) {
			model := loadFixture(t, arch)
			m := newManager(t, "", ModelConfig{Name: "e", Model: model, BlockSize: archBlock, SnapshotIntervals: testSnapshots})
			p := prompt(40, 3)
			pool, _ := model.Backend.NewKVPool(model.KVSpec(3, 16))
			hidden, err := model.Forward(models.Seq{Pool: pool, Table: []int32{0, 1, 2}, State: model.NewState()}, p, models.AllHidden)
			if err != nil {
				t.Fatal(err)
			}
			H := model.Config.HiddenSize
			want := map[Pooling][]float32{PoolLast: unit(hidden[(len(p)-1)*H:]), PoolMean: unit(meanRows(hidden, H))}
			for _, chunk := range []int{512, 16} {
				embedChunk = chunk
				for _, pool := range []Pooling{PoolLast, PoolMean, ""} {
					for range 2 {
						got, err := m.Embed(t.Context(), 1, "e", p, pool)
						if err != nil {
							t.Fatal(err)
						}
						w := want[pool]
						if pool == "" {
							w = want[PoolLast] // the default
						}
						if len(got) != H || maxDiff(got, w) > 1e-5 {
							t.Fatalf("chunk %d, pooling %q: %d values, off by %g", chunk, pool, len(got), maxDiff(got, w))
						}
					}
				}
			}
			if _, err := m.Embed(t.Context(), 1, "e", nil, ""); err == nil {
				t.Error("an empty prompt embedded")
			}
			if _, err := m.Embed(t.Context(), 1, "e", p, "max"); err == nil {
				t.Error("unknown pooling accepted")
			}
		})
	}
}

func meanRows(x []float32, h int) []float32 {
	out := make([]float32, h)
	for i, v := range x {
		out[i%h] += v
	}
	return out
}

func unit(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) / math.Sqrt(n))
	}
	return out
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
