package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/pocketllm/pocketllm/models/synth"
)

// runSynth writes a random bf16 checkpoint of a named shape (the tensor
// list and config.json of models/synth), filling the bytes in parallel with
// a counter-based generator: an 8B model takes seconds instead of the
// minutes a sequential generator needs, which matters on a leased GPU
// machine. The values differ from synth.Write's (same distribution family).
func runSynth(args []string) error {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	shape := fs.String("shape", "llama3-8b", fmt.Sprint("model shape: ", synth.Names()))
	out := fs.String("out", "", "output directory")
	seed := fs.Uint64("seed", 1, "random seed")
	format := fs.String("format", "bf16", "bf16 (config.json + model.safetensors) or q4_k_m (one model.gguf)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, ok := synth.Shapes[*shape]
	if !ok {
		return fmt.Errorf("unknown shape %q (known: %v)", *shape, synth.Names())
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	start := time.Now()
	var n int64
	var err error
	switch *format {
	case "bf16":
		n, err = writeSynth(*out, s, *seed)
	case "q4_k_m":
		n, err = writeSynthGGUF(*out, s, *seed)
	default:
		return fmt.Errorf("unknown --format %q (bf16, q4_k_m)", *format)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "synth: %s: %.2f GB in %.1fs\n", *out, float64(n)/1e9, time.Since(start).Seconds())
	return nil
}

func writeSynth(dir string, s synth.Shape, seed uint64) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	cfg, err := s.Config()
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		return 0, err
	}
	ts := s.Tensors()
	header := map[string]any{"__metadata__": map[string]string{"format": "pt", "generator": "pocket-worker synth"}}
	var off int64
	for _, t := range ts {
		n := int64(2)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		header[t.Name] = map[string]any{"dtype": "BF16", "shape": t.Shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return 0, err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n8 [8]byte
	binary.LittleEndian.PutUint64(n8[:], uint64(len(h)))
	if _, err := f.Write(append(n8[:], h...)); err != nil {
		return 0, err
	}
	const chunk = 64 << 20
	buf := make([]byte, chunk)
	var ctr uint64
	for ti, t := range ts {
		elems := int64(1)
		for _, d := range t.Shape {
			elems *= int64(d)
		}
		std := float32(1 / math.Sqrt(float64(t.Shape[len(t.Shape)-1])))
		norm := len(t.Shape) == 1
		for done := int64(0); done < elems; {
			n := min(elems-done, chunk/2)
			fillBF16(buf[:2*n], seed^uint64(ti)<<40, ctr, std, norm)
			ctr += uint64(n)
			if _, err := f.Write(buf[:2*n]); err != nil {
				return 0, err
			}
			done += n
		}
	}
	return off, f.Close()
}

// fillBF16 writes len(b)/2 values: uniform(±1.7·std) for matrices (std =
// 1/sqrt(fan_in), as synth does), 1±0.05 for norm scales.
func fillBF16(b []byte, seed, ctr uint64, std float32, norm bool) {
	n := len(b) / 2
	workers := runtime.GOMAXPROCS(0)
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w < n; w += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				x := splitmix(seed + ctr + uint64(i))
				u := float32(x>>40) / (1 << 24) // [0,1)
				var v float32
				if norm {
					v = 1 + 0.1*(u-0.5)
				} else {
					v = (u*2 - 1) * std * 1.7
				}
				binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
			}
		}(w, min(w+per, n))
	}
	wg.Wait()
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
