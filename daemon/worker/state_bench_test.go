package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/synth"
)

// BenchmarkSnapshotOverWorker prices a hybrid's state snapshot and restore
// through a worker: the qwen3_5 fixture widened to Qwen3.5-27B's
// linear-attention heads (16 key, 48 value heads of 128) over 48 DeltaNet
// layers, so that one snapshot is that model's ~151 MB, on a model whose
// weights are small (hidden 64). The daemon snapshots a hybrid every 256
// tokens up to 4K, so a 4096-token prompt pays 16 of these. Sub-benchmarks
// by shared-memory region (the default, and none: frames only), and held
// by the worker (models.HoldingState) instead of sent.
func BenchmarkSnapshotOverWorker(b *testing.B) {
	dir := b.TempDir()
	cfg, err := os.ReadFile(filepath.Join(fixture("qwen3_5"), "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	layers := make([]string, 64)
	for i := range layers {
		layers[i] = "linear_attention"
		if i%4 == 3 {
			layers[i] = "full_attention"
		}
	}
	if _, err := synth.WriteConfig(dir, cfg, synth.Options{Seed: 1, Set: map[string]any{"num_hidden_layers": 64,
		"layer_types": layers, "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
		"linear_value_head_dim": 128}}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		shared        int64
		restore, held bool
	}{{-1, false, false}, {-1, true, false}, {0, false, false}, {0, true, false}, {0, false, true}, {0, true, true}} {
		shared := c.shared
		b.Run(fmt.Sprintf("shared=%d/restore=%v/held=%v", shared, c.restore, c.held), func(b *testing.B) {
			o := Options{World: 1, Timeout: time.Minute, SharedBytes: shared, MaxBackoff: 200 * time.Millisecond,
				Command: DefaultCommand(workerBinary(b), "cpu"), Hello: Hello{Backend: "cpu", Threads: 1, Name: "wide", Path: dir}}
			px, err := Start(o)
			if err != nil {
				b.Fatal(err)
			}
			defer px.Close()
			st := px.NewState().(models.RecurrentState)
			pool, err := px.KVOps().NewKVPool(px.KVSpec(4, 16))
			if err != nil {
				b.Fatal(err)
			}
			seq := models.Seq{Pool: pool, Table: []int32{0}, State: st}
			if _, err := px.Forward(seq, []int32{1, 2, 3}, models.LastLogits); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(st.SizeBytes())
			if c.held { // kept by the worker: a clone, restored by a copy
				hs := st.(models.HoldingState)
				h, err := hs.Hold()
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if !c.restore {
						h.Release()
						if h, err = hs.Hold(); err != nil {
							b.Fatal(err)
						}
					} else if err := hs.RestoreHeld(h); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			data := st.Snapshot()
			b.ResetTimer()
			for range b.N {
				if !c.restore {
					data = st.Snapshot()
					if data == nil {
						b.Fatal("no snapshot")
					}
				} else if err := st.Restore(data, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
