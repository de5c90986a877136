package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/internal/kvseq"
	"github.com/pocketllm/pocketllm/internal/procstat"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// benchResult is the contract of `pocketd bench --json` (DESIGN.md).
type benchResult struct {
	Model             string  `json:"model"`
	Backend           string  `json:"backend"`
	Threads           int     `json:"threads"`
	SIMD              string  `json:"simd,omitempty"` // the CPU backend's vector loops (cpu.SIMD)
	PromptTokens      int     `json:"prompt_tokens"`
	NewTokens         int     `json:"new_tokens"`
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerS  float64 `json:"decode_tokens_per_s"`
	TTFTms            float64 `json:"ttft_ms"`
	WeightBytes       int64   `json:"weight_bytes"`
	// DecodeReadBytes ("active read bytes", models.Model.DecodeReadBytes)
	// is the weight bytes one decode step reads: everything but an untied
	// embedding table (one row of it) and, in each mixture-of-experts
	// layer, the routed experts a token does not select (top_k of
	// n_routed: that share of the layer's expert bytes; shared experts,
	// routers and dense layers in full). The roofline is the measured read
	// bandwidth over it.
	DecodeReadBytes    int64   `json:"decode_read_bytes"`
	ResidentBytes      int64   `json:"resident_bytes"`
	ReadBandwidthGBps  float64 `json:"read_bandwidth_gbps,omitempty"`
	RooflineTokensPerS float64 `json:"roofline_tokens_per_s,omitempty"`
	// Sampling describes the decode's sampling when it is not greedy
	// (the session's sampler over the whole vocabulary each step).
	Sampling string `json:"sampling,omitempty"`
	// KVHalf reports a float16 KV cache (--kv-dtype f16).
	KVHalf bool `json:"kv_half,omitempty"`
}

func newBenchCmd() *cobra.Command {
	var model, backend string
	var promptTokens, newTokens, threads, device int
	var asJSON, roofline bool
	var cpuProfile, kvDType string
	var sp session.SamplingParams
	cmd := &cobra.Command{
		Use:   "bench --model DIR [--prompt-tokens N] [--new-tokens N] [--json]",
		Short: "Measure single-request prefill and decode speed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if promptTokens < 1 || newTokens < 1 {
				return fmt.Errorf("--prompt-tokens and --new-tokens must be positive")
			}
			if err := daemon.ValidKVDType(kvDType); err != nil {
				return fmt.Errorf("--kv-dtype: %w", err)
			}
			if backend == "cuda" {
				if sp.Temperature > 0 {
					return fmt.Errorf("--temperature: the cuda bench decodes greedily on the device; sampled decoding is measured on the CPU backend or through the daemon")
				}
				return benchOnWorker(cmd, model, device, promptTokens, newTokens, asJSON, kvDType == "f16")
			}
			ck, m, err := loadModel(model, backend, threads)
			if err != nil {
				return err
			}
			defer ck.Close()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			r, err := bench(m, promptTokens, newTokens, sp, kvDType == "f16")
			if err != nil {
				return err
			}
			r.Model = ck.Name
			r.Threads = threads
			if r.Threads == 0 {
				r.Threads = runtime.GOMAXPROCS(0)
			}
			if m.Backend.Name() == "cpu" {
				r.SIMD = cpu.SIMD()
			}
			if roofline && m.Backend.Name() == "cpu" {
				r.ReadBandwidthGBps = readBandwidth(r.Threads) / 1e9
				r.RooflineTokensPerS = r.ReadBandwidthGBps * 1e9 / float64(r.DecodeReadBytes)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
			}
			simd := ""
			if r.SIMD != "" {
				simd = ", " + r.SIMD
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s on %s (%d threads%s): prefill %d tokens at %.1f tok/s, ttft %.1f ms; decode %d tokens at %.2f tok/s; weights %s, resident %s\n",
				r.Model, r.Backend, r.Threads, simd, r.PromptTokens, r.PrefillTokensPerS, r.TTFTms, r.NewTokens, r.DecodeTokensPerS, human(r.WeightBytes), human(r.ResidentBytes))
			if r.RooflineTokensPerS > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "read bandwidth %.1f GB/s over %s read per token → roofline %.2f tok/s; decode reaches %.0f%%\n",
					r.ReadBandwidthGBps, human(r.DecodeReadBytes), r.RooflineTokensPerS, 100*r.DecodeTokensPerS/r.RooflineTokensPerS)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "checkpoint directory or .gguf file")
	f.StringVar(&backend, "backend", "cpu", "backend")
	f.IntVar(&promptTokens, "prompt-tokens", 128, "prompt length")
	f.IntVar(&newTokens, "new-tokens", 32, "tokens to decode")
	f.IntVar(&threads, "threads", 0, "CPU threads (0: all)")
	f.IntVar(&device, "device", 0, "GPU ordinal (backend cuda)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	f.BoolVar(&roofline, "roofline", true, "measure memory read bandwidth and report the decode roofline (CPU)")
	f.StringVar(&kvDType, "kv-dtype", "f32", "KV cache element type: f32 or f16 (cache.kv_dtype)")
	f.Float64Var(&sp.Temperature, "temperature", 0, "sample the decode at this temperature (0: greedy)")
	f.Float64Var(&sp.TopP, "top-p", 0, "nucleus sampling (with --temperature)")
	f.IntVar(&sp.TopK, "top-k", 0, "top-k sampling (with --temperature)")
	f.Float64Var(&sp.MinP, "min-p", 0, "min-p sampling (with --temperature)")
	return cmd
}

// bench runs one prefill of a random prompt and a decode, greedy unless
// sp has a temperature (then each step's token is drawn by the session's
// sampler, as a sampled generation does, seed 1).
func bench(m *models.Model, promptTokens, newTokens int, sp session.SamplingParams, halfKV bool) (*benchResult, error) {
	pick := session.Argmax
	sampling := ""
	if sp.Temperature > 0 {
		seed := uint64(1)
		sp.Seed = &seed
		pick = session.NewSampler(sp).Sample
		sampling = fmt.Sprintf("temperature %g, top_p %g, top_k %d, min_p %g", sp.Temperature, sp.TopP, sp.TopK, sp.MinP)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int32, promptTokens)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(m.Config.VocabSize))
	}
	seq, err := kvseq.PrivateHalf(m, promptTokens+newTokens, 16, false, halfKV)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	logits, err := m.Forward(seq, prompt, models.LastLogits)
	if err != nil {
		return nil, err
	}
	prefill := time.Since(start)
	next := pick(logits)
	decodeStart := time.Now()
	var ttft time.Duration
	for i := range newTokens {
		seq.Start = promptTokens + i
		l, err := m.Forward(seq, []int32{next}, models.LastLogits)
		if err != nil {
			return nil, err
		}
		next = pick(l)
		if i == 0 {
			ttft = time.Since(start)
		}
	}
	decode := time.Since(decodeStart)
	return &benchResult{
		Backend:           m.Backend.Name(),
		PromptTokens:      promptTokens,
		NewTokens:         newTokens,
		PrefillTokensPerS: float64(promptTokens) / prefill.Seconds(),
		DecodeTokensPerS:  float64(newTokens) / decode.Seconds(),
		TTFTms:            float64(ttft.Microseconds()) / 1000,
		WeightBytes:       m.WeightBytes(),
		DecodeReadBytes:   m.DecodeReadBytes(),
		ResidentBytes:     procstat.ResidentBytes(),
		Sampling:          sampling,
		KVHalf:            seq.Pool.Spec().Half,
	}, nil
}

// readBandwidth measures how fast threads goroutines can stream a buffer
// much larger than the caches: the ceiling for a memory-bound decode.
func readBandwidth(threads int) float64 {
	const size = 1 << 30
	buf := make([]uint64, size/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	best := 0.0
	for range 3 {
		start := time.Now()
		var wg sync.WaitGroup
		chunk := len(buf) / threads
		sums := make([]uint64, threads*8)
		for t := range threads {
			wg.Add(1)
			go func(t int) {
				defer wg.Done()
				part := buf[t*chunk : (t+1)*chunk]
				var s0, s1, s2, s3 uint64
				for i := 0; i+4 <= len(part); i += 4 {
					s0 += part[i]
					s1 += part[i+1]
					s2 += part[i+2]
					s3 += part[i+3]
				}
				sums[t*8] = s0 + s1 + s2 + s3
			}(t)
		}
		wg.Wait()
		bw := float64(size) / time.Since(start).Seconds()
		best = max(best, bw)
	}
	_ = unsafe.Sizeof(buf)
	return best
}

// kvDTypeName names the KV element type for pocket-worker's --kv-dtype.
func kvDTypeName(half bool) string {
	if half {
		return "f16"
	}
	return "f32"
}

// benchOnWorker runs the benchmark in pocket-worker, the binary that links
// CUDA (pocketd itself stays cgo-free): same flags, same JSON contract,
// measured where the weights live.
func benchOnWorker(cmd *cobra.Command, model string, device, promptTokens, newTokens int, asJSON, kvHalf bool) error {
	bin, err := worker.FindBinary("")
	if err != nil {
		return fmt.Errorf("backend cuda: %w", err)
	}
	args := []string{"bench", "--model", model, "--device", strconv.Itoa(device),
		"--prompt-tokens", strconv.Itoa(promptTokens), "--new-tokens", strconv.Itoa(newTokens), "--kv-dtype", kvDTypeName(kvHalf)}
	if asJSON {
		args = append(args, "--json")
	}
	c := exec.CommandContext(cmd.Context(), bin, args...)
	c.Stdout, c.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s bench: %w", bin, err)
	}
	return nil
}
