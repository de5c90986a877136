//go:build cuda

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/pocketllm/pocketllm/internal/kvseq"
	"github.com/pocketllm/pocketllm/internal/procstat"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/session"
)

// benchResult is DESIGN.md's bench contract plus the GPU's own numbers.
type benchResult struct {
	Model             string  `json:"model"`
	Backend           string  `json:"backend"`
	Device            string  `json:"device"`
	DecodeWeights     string  `json:"decode_weights"` // PrepareDecode's copies (fp8tiles.go)
	PromptTokens      int     `json:"prompt_tokens"`
	NewTokens         int     `json:"new_tokens"`
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerS  float64 `json:"decode_tokens_per_s"`
	TTFTms            float64 `json:"ttft_ms"`
	// MarkedTTFTms is the same prefill taking a hybrid's snapshots inside
	// the pass every --marks-every tokens (models.MarkingState, as the
	// daemon does), with the logits before each.
	MarkedTTFTms float64 `json:"ttft_marked_ms,omitempty"`
	WeightBytes  int64   `json:"weight_bytes"`
	// DecodeReadBytes ("active read bytes", models.Model.DecodeReadBytes)
	// is the weight bytes one decode step reads: everything but an untied
	// embedding table (one row of it) and, in each mixture-of-experts
	// layer, the routed experts a token does not select (top_k of
	// n_routed: that share of the layer's expert bytes; shared experts,
	// routers and dense layers in full). RooflineTokS is 4.26 TB/s
	// (GPU.md's measured read bandwidth) over it.
	DecodeReadBytes int64   `json:"decode_read_bytes"`
	RooflineTokS    float64 `json:"roofline_tokens_per_s"`
	// ResidentBytes is device memory this process allocated (weights,
	// KV, activations); HostResidentBytes is the process's VmRSS.
	ResidentBytes     int64   `json:"resident_bytes"`
	HostResidentBytes int64   `json:"host_resident_bytes"`
	LoadSeconds       float64 `json:"load_s"`
	EagerDecodePerS   float64 `json:"decode_eager_tokens_per_s"`
	GraphDecodePerS   float64 `json:"decode_graph_tokens_per_s,omitempty"`
	GraphAgreement    string  `json:"graph_eager_token_agreement,omitempty"`
	GraphCaptureMs    float64 `json:"graph_capture_ms,omitempty"`
	GraphFirstStepMs  float64 `json:"graph_first_step_ms,omitempty"`
	GraphError        string  `json:"graph_error,omitempty"`
	// The same replays fed by their own tokens on the device, queued
	// back to back (cuda.Backend.CaptureFeed).
	GraphFedDecodePerS float64 `json:"decode_graph_fed_tokens_per_s,omitempty"`
	GraphFedAgreement  string  `json:"graph_fed_eager_token_agreement,omitempty"`
	GraphFedError      string  `json:"graph_fed_error,omitempty"`
	DecodeMode         string  `json:"decode_mode"`
	KVHalf             bool    `json:"kv_half"` // the KV cache in float16 (--kv-dtype)
	GEMM               string  `json:"prefill_gemm"`
	// FP8Decode names the one-row FP8 GEMVs' kernels (cuda.Backend.FP8Rings):
	// a number on the fallback is not comparable with one on the rings.
	FP8Decode string `json:"fp8_decode_gemv"`
}

func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	dev := deviceFlag(fs)
	model := fs.String("model", "", "checkpoint directory")
	promptTokens := fs.Int("prompt-tokens", 512, "prompt length")
	newTokens := fs.Int("new-tokens", 128, "tokens to decode")
	asJSON := fs.Bool("json", false, "print one JSON object")
	marksEvery := fs.Int("marks-every", 0, "also time the prefill with a hybrid's snapshots every N tokens inside it")
	maxChunk := fs.Int("max-chunk", 0, "rows a prefill pass runs at once (default: the whole prompt)")
	tokensOut := fs.String("tokens-out", "", "write the eager decode's tokens to PATH, one a line (to compare settings' continuations)")
	kvDType := fs.String("kv-dtype", "f32", "KV cache element type: f32 or f16 (the daemon's cache.kv_dtype)")
	probeOut := fs.String("probe-out", "", "write the in-graph probe records to PATH.log and PATH.bin (PTX built by scripts/probe-build.sh)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *promptTokens < 1 || *newTokens < 2 {
		return fmt.Errorf("--prompt-tokens must be ≥1 and --new-tokens ≥2")
	}
	if *kvDType != "f16" && *kvDType != "f32" {
		return fmt.Errorf("--kv-dtype: %q is not f32 or f16", *kvDType)
	}
	g, err := openDevice(*dev)
	if err != nil {
		return err
	}
	t0 := time.Now()
	ck, err := checkpoint.Open(*model)
	if err != nil {
		return err
	}
	defer ck.Close()
	m, err := ck.Model(g)
	if err != nil {
		return err
	}
	// The decode copies a daemon's rank makes (rank.go makes them after its
	// KV pool; this bench's pool is small, made after).
	tiles, err := g.PrepareDecode(0)
	if err != nil {
		return err
	}
	if err := g.Sync(); err != nil {
		return err
	}
	r := &benchResult{Model: ck.Name, Backend: g.Name(), Device: g.DeviceName(), DecodeWeights: tiles,
		PromptTokens: *promptTokens, NewTokens: *newTokens, WeightBytes: m.WeightBytes(), LoadSeconds: time.Since(t0).Seconds(), GEMM: g.GEMMLibrary()}
	r.FP8Decode, _ = g.FP8Rings()
	r.DecodeReadBytes = m.DecodeReadBytes()
	r.RooflineTokS = 4.26e12 / float64(r.DecodeReadBytes)
	P, N := *promptTokens, *newTokens
	m.MaxChunk = max(m.MaxChunk, P)
	if *maxChunk > 0 {
		m.MaxChunk = *maxChunk
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int32, P)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(m.Config.VocabSize))
	}
	seq, err := kvseq.PrivateHalf(m, P+N, 16, false, *kvDType == "f16")
	if err != nil {
		return err
	}
	r.KVHalf = seq.Pool.Spec().Half
	// Warm-up prefill (module JIT, scratch buffers), then the timed one.
	if _, err := m.Forward(seq, prompt, models.LastLogits); err != nil {
		return err
	}
	if rs, ok := seq.State.(models.RecurrentState); ok {
		rs.Reset() // the warm-up advanced a hybrid's recurrent state
	}
	start := time.Now()
	logits, err := m.Forward(seq, prompt, models.LastLogits)
	if err != nil {
		return err
	}
	first := session.Argmax(logits)
	prefill := time.Since(start)
	r.PrefillTokensPerS = float64(P) / prefill.Seconds()
	r.TTFTms = float64(prefill.Microseconds()) / 1000
	if ms, ok := seq.State.(models.MarkingState); ok && *marksEvery > 0 {
		snap := ms.Snapshot() // as the prompt left it, for the decode below
		var marks []int
		for p := *marksEvery; p < P; p += *marksEvery {
			marks = append(marks, p)
		}
		ms.Reset()
		if err := ms.HoldAt(marks); err != nil {
			return err
		}
		start := time.Now()
		if _, err := m.Forward(seq, prompt, models.MarkedLogits); err != nil {
			return err
		}
		if err := g.Sync(); err != nil {
			return err
		}
		r.MarkedTTFTms = float64(time.Since(start).Microseconds()) / 1000
		if len(ms.TakeHeld()) != len(marks) {
			return fmt.Errorf("marked prefill: the marks were not all held")
		}
		if err := ms.Restore(snap, P); err != nil {
			return err
		}
	}
	rewind := rewinder(seq, P)
	// Eager decode: one Forward per token, logits read back.
	eager := make([]int32, 0, N)
	next := first
	start = time.Now()
	for i := range N {
		eager = append(eager, next)
		seq.Start = P + i
		l, err := m.Forward(seq, []int32{next}, models.LastLogits)
		if err != nil {
			return err
		}
		next = session.Argmax(l)
	}
	r.EagerDecodePerS = float64(N) / time.Since(start).Seconds()
	r.DecodeTokensPerS, r.DecodeMode = r.EagerDecodePerS, "eager"
	if *tokensOut != "" {
		var sb strings.Builder
		for _, t := range eager {
			fmt.Fprintln(&sb, t)
		}
		if err := os.WriteFile(*tokensOut, []byte(sb.String()), 0o644); err != nil {
			return err
		}
	}
	// Graph decode: the same continuation, one graph launch per token.
	// The first replay is a warm-up (graph upload) and is not timed.
	if err := rewind(); err != nil {
		return err
	}
	graphTok, run, gerr := graphDecode(g, m, seq, P, first, N, false)
	r.GraphDecodePerS = run.perS
	r.GraphCaptureMs = float64(run.capture.Microseconds()) / 1e3
	r.GraphFirstStepMs = float64(run.firstStep.Microseconds()) / 1e3
	// take reports a replayed decode's agreement with the eager tokens
	// and makes it the decode rate where it agrees and is faster.
	take := func(tok []int32, perS float64, mode string) string {
		same := 0
		for i := range eager {
			if tok[i] == eager[i] {
				same++
			}
		}
		if same == N && perS > r.DecodeTokensPerS {
			r.DecodeTokensPerS, r.DecodeMode = perS, mode
		}
		return fmt.Sprintf("%d/%d", same, N)
	}
	if gerr != nil {
		r.GraphError = gerr.Error()
	} else {
		r.GraphAgreement = take(graphTok, r.GraphDecodePerS, "cuda-graph")
	}
	// Fed graph decode: the same again, each replay embedding the token
	// the one before it left on the device, queued back to back. Not
	// under --probe-out: probe-summary.py lays out the host-fed replays
	// (it does not align the fed ones' records yet).
	if gerr == nil && *probeOut == "" {
		if err := rewind(); err != nil {
			return err
		}
		fedTok, fed, ferr := graphDecode(g, m, seq, P, first, N, true)
		if ferr != nil {
			r.GraphFedError = ferr.Error()
		} else {
			r.GraphFedDecodePerS = fed.perS
			r.GraphFedAgreement = take(fedTok, fed.perS, "cuda-graph-fed")
		}
	}
	if *probeOut != "" {
		if err := g.Sync(); err != nil {
			return err
		}
		if err := g.ProbeDump(*probeOut); err != nil {
			return err
		}
	}
	r.ResidentBytes = g.Resident
	r.HostResidentBytes = procstat.ResidentBytes()
	if err := g.Err(); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("decode reads %.2f GB of weights per token: roofline %.0f tok/s at 4.26 TB/s; decode at %.1f%% of it\n",
		float64(r.DecodeReadBytes)/1e9, r.RooflineTokS, 100*r.DecodeTokensPerS/r.RooflineTokS)
	fmt.Printf("%s on %s: prefill %d tokens at %.0f tok/s (ttft %.1f ms); decode %d tokens at %.1f tok/s (%s; eager %.1f, graph %.1f, agreement %s %s; fed %.1f, agreement %s %s)\n",
		r.Model, r.Device, P, r.PrefillTokensPerS, r.TTFTms, N, r.DecodeTokensPerS, r.DecodeMode, r.EagerDecodePerS,
		r.GraphDecodePerS, r.GraphAgreement, r.GraphError, r.GraphFedDecodePerS, r.GraphFedAgreement, r.GraphFedError)
	return nil
}
