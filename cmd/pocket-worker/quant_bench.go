//go:build cuda

package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
)

// runQBench times the one-row GEMVs alone on Qwen3-8B's block-format
// matrix shapes, Qwen3.5-27B's FP8 ones (beside bf16 matrices of the same
// shapes) and the bf16 LM heads: 4 different weights per shape (more than
// the L2 holds), 64 launches timed together (eager: the small shapes
// include launch gaps); reports µs per GEMV and the weight-read bandwidth.
// --formats keeps the shapes of the named formats (e.g. F8_E4M3,BF16),
// --shapes those of the named sizes (e.g. 5120x17408): one kernel to
// profile under ncu.
func runQBench(args []string) error {
	fs := flag.NewFlagSet("qbench", flag.ContinueOnError)
	dev := deviceFlag(fs)
	formats := fs.String("formats", "", "comma-separated formats whose shapes run (default all)")
	shapes := fs.String("shapes", "", "comma-separated OUTxIN sizes that run (default all)")
	swiglu := fs.Bool("swiglu", false, "time only Qwen3-8B's Q4_K gate/up GEMV with its norm and SwiGLU (NormSwiGLU)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// runs reports whether a shape passes both filters (an empty one
	// passes all).
	in := func(list, name string) bool { return list == "" || slices.Contains(strings.Split(list, ","), name) }
	runs := func(format, size string) bool { return in(*formats, format) && in(*shapes, size) }
	g, err := openDevice(*dev)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(5, 6))
	if *swiglu {
		return qbenchSwiGLU(g, rng)
	}
	type shape struct {
		dt      kernels.DType
		out, in int
	}
	fmt.Printf("%-6s %-14s %10s %10s\n", "format", "out×in", "µs/GEMV", "GB/s")
	for _, s := range []shape{{kernels.Q4_K, 4096, 4096}, {kernels.Q4_K, 1024, 4096}, {kernels.Q4_K, 12288, 4096},
		{kernels.Q4_K, 4096, 12288}, {kernels.Q6_K, 4096, 12288}, {kernels.Q6_K, 151936, 4096}, {kernels.Q8_0, 12288, 4096},
		// The lattice formats of UD-IQ1_M / UD-Q2_K_XL MoE checkpoints, on
		// an expert's shape and a dense one.
		{kernels.IQ1_M, 1536, 4096}, {kernels.IQ1_S, 1536, 4096}, {kernels.IQ2_XXS, 1536, 4096},
		{kernels.IQ2_XS, 4096, 4096}, {kernels.IQ2_S, 4096, 4096}, {kernels.IQ3_XXS, 4096, 4096},
		{kernels.IQ3_S, 4096, 12288},
		// bf16: the LM heads of Qwen3.5-27B (9% of its decode bytes) and
		// Llama-3-8B, and a Llama layer's down projection.
		{kernels.BF16, 248320, 5120}, {kernels.BF16, 128256, 4096}, {kernels.BF16, 4096, 14336},
		// Qwen3.5-27B's FP8 gate and up (as one matrix), down and out
		// projections (128×128 scale blocks), and bf16 at the same shapes.
		{kernels.F8E4M3, 34816, 5120}, {kernels.F8E4M3, 5120, 17408}, {kernels.F8E4M3, 5120, 6144},
		{kernels.BF16, 34816, 5120}, {kernels.BF16, 5120, 17408}, {kernels.BF16, 5120, 6144}} {
		if !runs(s.dt.String(), fmt.Sprintf("%dx%d", s.out, s.in)) {
			continue
		}
		nw := 4
		if s.out*s.in > 100e6 {
			nw = 1
		}
		var ws []kernels.Tensor
		var bytes int
		for range nw {
			var w *kernels.Weight
			switch s.dt {
			case kernels.BF16, kernels.F8E4M3: // FP8 with Qwen3.5-27B's 128×128 scale blocks
				w = randomWeight(rng, s.dt, []int{s.out, s.in}, [2]int{128, 128})
			default:
				w = &kernels.Weight{Name: "w", DType: s.dt, Shape: []int{s.out, s.in},
					Data: randomBlocks(rng, s.dt, s.out, s.in, 1e-3)}
			}
			t, err := g.LoadWeight(w)
			if err != nil {
				return err
			}
			ws = append(ws, t)
			bytes = len(w.Data)
		}
		// Two inputs, alternated: the CUDA backend launches consecutive
		// bf16 GEMVs of one input as one kernel (up to four), which would
		// time four matrices a launch (the other formats launch each GEMV,
		// its input's rounding included, whatever the input).
		var xs [2]kernels.Buf
		v := make([]float32, s.in)
		for i := range xs {
			for j := range v {
				v[j] = float32(rng.NormFloat64())
			}
			xs[i] = g.NewBuf(s.in)
			g.Write(xs[i], 0, v)
		}
		y := g.NewBuf(s.out)
		us, err := eagerMicros(g, func(i int) { g.MatMul(y, xs[i%2], ws[i%nw], 1) })
		if err != nil {
			return err
		}
		fmt.Printf("%-6s %-14s %10.2f %10.0f\n", s.dt, fmt.Sprintf("%d×%d", s.out, s.in), us, float64(bytes)/us/1e3)
	}
	return nil
}

// eagerMicros calls call 8 times to warm up, then 64 times timed, and
// returns the µs a call: eager launches, so the small shapes include
// launch gaps.
func eagerMicros(g *cuda.Backend, call func(i int)) (float64, error) {
	const per = 64
	for i := range 8 {
		call(i)
	}
	if err := g.Sync(); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for i := range per {
		call(i)
	}
	if err := g.Sync(); err != nil {
		return 0, err
	}
	return float64(time.Since(t0).Microseconds()) / per, nil
}

// qbenchSwiGLU times the fused norm, gate/up GEMV and SwiGLU of a
// Qwen3-8B-shaped Q4_K layer (12288×4096 twice) alone, over 4 weight pairs
// (more than the L2 holds): µs a call and the weight-read bandwidth, so
// that a change of the SwiGLU GEMV's kernel can be priced outside the
// decode step's neighbours.
func qbenchSwiGLU(g *cuda.Backend, rng *rand.Rand) error {
	const out, in, nw = 12288, 4096, 4
	var gates, ups []kernels.Tensor
	for range nw {
		for _, into := range []*[]kernels.Tensor{&gates, &ups} {
			data := randomBlocks(rng, kernels.Q4_K, out, in, 1e-3)
			t, err := g.LoadWeight(&kernels.Weight{Name: "w", DType: kernels.Q4_K, Shape: []int{out, in}, Data: data})
			if err != nil {
				return err
			}
			*into = append(*into, t)
		}
	}
	rb, err := kernels.Q4_K.RowBytes(in)
	if err != nil {
		return err
	}
	bytes := 2 * out * rb // a call reads a gate and an up matrix
	norm, err := g.LoadWeight(randomWeight(rng, kernels.F32, []int{in}, [2]int{}))
	if err != nil {
		return err
	}
	x, act := g.NewBuf(in), g.NewBuf(out)
	v := make([]float32, in)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	g.Write(x, 0, v)
	if !g.NormSwiGLU(act, x, norm, 1e-6, gates[0], ups[0], 1) {
		return fmt.Errorf("qbench: NormSwiGLU declined the Q4_K shapes")
	}
	us, err := eagerMicros(g, func(i int) { g.NormSwiGLU(act, x, norm, 1e-6, gates[i%nw], ups[i%nw], 1) })
	if err != nil {
		return err
	}
	fmt.Printf("%-6s %-14s %10.2f %10.0f  (NormSwiGLU, gate and up)\n", kernels.Q4_K, fmt.Sprintf("2×%d×%d", out, in), us,
		float64(bytes)/us/1e3)
	return nil
}
