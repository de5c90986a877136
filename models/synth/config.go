package synth

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
)

// Options shape a checkpoint generated from a config.json.
type Options struct {
	// Layers keeps the first Layers decoder layers at full width (a
	// "slice" of a model too big to hold); 0 keeps them all.
	Layers int
	// FP8 stores the layers' linear projections as FP8 E4M3 with a
	// float32 weight_scale_inv per Block×Block block, as DeepSeek-V3 and the
	// Qwen3 -FP8 checkpoints do; embeddings, norms and routers stay bf16.
	FP8 bool
	// Block is the FP8 scale block edge (0: 128, the released
	// checkpoints'); tiny test shapes need smaller ones.
	Block int
	Seed  uint64
	// Set overrides top-level config fields (head counts, widths), keeping
	// every other: e.g. a fixture's config widened to divide over 4 ranks.
	Set map[string]any
}

func (o Options) block() int {
	if o.Block > 0 {
		return o.Block
	}
	return 128
}

// WriteConfig writes dir/config.json and dir/model.safetensors: a random
// checkpoint of whatever registered architecture config names, with the
// tensors (names and shapes) that architecture expects. It returns the
// bytes of tensor data written.
func WriteConfig(dir string, config []byte, o Options) (int64, error) {
	cfgJSON, err := adjustConfig(config, o)
	if err != nil {
		return 0, err
	}
	cfg, err := models.ParseConfig(cfgJSON)
	if err != nil {
		return 0, err
	}
	specs, err := models.ExpectedTensors(cfg, cpu.New(1))
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		return 0, err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := encode(f, entriesFor(specs, o), o.Seed)
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return n, f.Close()
}

// adjustConfig applies the options to config.json, keeping every field it
// does not touch.
func adjustConfig(config []byte, o Options) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(config))
	d.UseNumber()
	var raw map[string]any
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if o.Layers > 0 {
		raw["num_hidden_layers"] = o.Layers
		// Per-layer lists follow the layer count.
		for _, k := range []string{"layer_types", "mlp_layer_types"} {
			if l, ok := raw[k].([]any); ok && len(l) > o.Layers {
				raw[k] = l[:o.Layers]
			}
		}
	}
	for k, v := range o.Set {
		raw[k] = v
	}
	if o.FP8 {
		raw["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
			"weight_block_size": []int{o.block(), o.block()}}
	} else {
		delete(raw, "quantization_config")
	}
	return json.MarshalIndent(raw, "", "  ")
}

// quantized reports whether a tensor is stored as FP8 in an FP8
// checkpoint: the 2-D linear projections and experts of the decoder
// layers (not routers, gates of shared experts, norms or embeddings).
func quantized(t models.TensorSpec) bool {
	return len(t.Shape) == 2 && strings.HasPrefix(t.Name, "model.layers.") &&
		(strings.Contains(t.Name, "_proj") || strings.Contains(t.Name, ".experts."))
}

// entry is one tensor of the file and how its values are drawn.
type entry struct {
	name  string
	dtype string // BF16, F8_E4M3, F32
	shape []int
	std   float32 // matrices: values within ±1.7·std; FP8 scales: the scale
	norm  bool    // 1-D: values near 1
}

func (e entry) elems() int64 {
	n := int64(1)
	for _, d := range e.shape {
		n *= int64(d)
	}
	return n
}

func (e entry) size() int64 {
	switch e.dtype {
	case "F8_E4M3":
		return e.elems()
	case "F32":
		return 4 * e.elems()
	}
	return 2 * e.elems()
}

// initStd scales like an initialiser: std ~ 1/sqrt(fan_in), so
// activations stay in range through many layers.
func initStd(shape []int) float32 { return float32(1 / math.Sqrt(float64(shape[len(shape)-1]))) }

func entriesFor(specs []models.TensorSpec, o Options) []entry {
	var out []entry
	bs := o.block()
	for _, s := range specs {
		std := initStd(s.Shape)
		if !o.FP8 || !quantized(s) {
			out = append(out, entry{name: s.Name, dtype: "BF16", shape: s.Shape, std: std, norm: len(s.Shape) == 1})
			continue
		}
		r, c := s.Shape[0], s.Shape[1]
		out = append(out, entry{name: s.Name, dtype: "F8_E4M3", shape: s.Shape},
			// fillFP8's values average ~3 in magnitude.
			entry{name: s.Name + "_scale_inv", dtype: "F32", shape: []int{ceil(r, bs), ceil(c, bs)}, std: std / 3})
	}
	return out
}

func ceil(a, b int) int { return (a + b - 1) / b }

// encode streams the safetensors bytes of entries to w (see Encode for the
// generator).
func encode(w io.Writer, es []entry, seed uint64) (int64, error) {
	header := map[string]any{"__metadata__": map[string]string{"format": "pt", "generator": "pocketllm synth"}}
	var off int64
	for _, e := range es {
		n := e.size()
		header[e.name] = map[string]any{"dtype": e.dtype, "shape": e.shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return 0, err
	}
	for (len(h)+8)%8 != 0 {
		h = append(h, ' ')
	}
	var n8 [8]byte
	binary.LittleEndian.PutUint64(n8[:], uint64(len(h)))
	if _, err := w.Write(append(n8[:], h...)); err != nil {
		return 0, err
	}
	const chunk = 64 << 20
	buf := make([]byte, chunk)
	for ti, e := range es {
		per := e.size() / e.elems() // bytes per element
		elems := e.elems()
		for done := int64(0); done < elems; {
			n := min(elems-done, chunk/per)
			b := buf[:n*per]
			s, ctr := seed^uint64(ti)<<40, uint64(done)
			switch e.dtype {
			case "F8_E4M3":
				fillFP8(b, s, ctr)
			case "F32":
				fillF32(b, s, ctr, e.std)
			default:
				fillBF16(b, s, ctr, e.std, e.norm)
			}
			if _, err := w.Write(b); err != nil {
				return 0, err
			}
			done += n
		}
	}
	return off, nil
}

// parallelFill runs fn over [0, n) on all cores.
func parallelFill(n int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+per, n))
	}
	wg.Wait()
}

// fillFP8 writes E4M3 bytes of random sign and mantissa with exponents
// 2^-1..2^2 (magnitudes 0.5 to 7.5, never NaN); the block scale brings
// them to the initialiser's range.
func fillFP8(b []byte, seed, ctr uint64) {
	parallelFill(len(b), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			u := Splitmix(seed + ctr + uint64(i))
			b[i] = byte(u>>63)<<7 | byte(6+(u>>40)%4)<<3 | byte(u>>32)&7
		}
	})
}

// fillF32 writes scales within ±10% of v.
func fillF32(b []byte, seed, ctr uint64, v float32) {
	parallelFill(len(b)/4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			u := float32(Splitmix(seed+ctr+uint64(i))>>40) / (1 << 24)
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v*(0.9+0.2*u)))
		}
	})
}
