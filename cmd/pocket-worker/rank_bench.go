package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// rankBenchResult is what rank-bench prints: the decode rate of each
// round through a rank process, as pocketd drives it.
type rankBenchResult struct {
	Model        string    `json:"model"`
	Backend      string    `json:"backend"`
	Device       string    `json:"device"`
	PromptTokens int       `json:"prompt_tokens"`
	NewTokens    int       `json:"new_tokens"`
	BlockSize    int       `json:"block_size"`
	Temperature  float64   `json:"temperature,omitempty"` // sampled (top-p 0.95); 0: greedy
	Penalties    string    `json:"penalties,omitempty"`   // "device" or "host": see --penalties
	Tokens       []int32   `json:"tokens"`                // the first round's first 16 (to compare runs)
	RoundsPerS   []float64 `json:"rounds_tokens_per_s"`   // one a round
	DecodePerS   float64   `json:"decode_tokens_per_s"`   // the fastest round
	SameTokens   bool      `json:"rounds_same_tokens"`
}

// runRankBench decodes greedily through a rank process the way pocketd
// does: worker.Start spawns this binary's serve-rank, and each token is
// one ForwardArgmax over the socket, its table cut to the blocks the
// step's positions cover (the daemon allocates a block as a sequence
// reaches it). So it measures what bench does not: the protocol, the
// rank's replays and its lookahead (fed steps included: rank_ahead.go),
// without pocketd's HTTP and session layers. A hybrid model decodes on a
// recurrent state of the rank's (a fresh one a round), as a session's.
func runRankBench(args []string) error {
	fs := flag.NewFlagSet("rank-bench", flag.ContinueOnError)
	model := fs.String("model", "", "checkpoint directory or .gguf file")
	backend := fs.String("backend", "cuda", "backend: cpu or cuda")
	device := fs.Int("device", 0, "GPU ordinal")
	promptTokens := fs.Int("prompt-tokens", 128, "random prompt length")
	newTokens := fs.Int("new-tokens", 64, "greedy tokens a round")
	rounds := fs.Int("rounds", 3, "decodes of the same prompt")
	blockSize := fs.Int("block-size", 16, "KV block size (pocketd's default)")
	temperature := fs.Float64("temperature", 0, "sample at this temperature (top-p 0.95) instead of greedy decoding")
	penalties := fs.String("penalties", "", `steps with a repetition penalty of 1.1 (prompt and output) and a `+
		`presence penalty of 0.5: "device" (ForwardSample with the Adjust; greedy: a top-k 1 draw) or "host" (the `+
		`logits shipped, drawn here, as the daemon did before draws took an Adjust)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	P, N, bs := *promptTokens, *newTokens, *blockSize
	if *model == "" || P < 1 || N < 2 || bs < 1 || *rounds < 1 {
		return fmt.Errorf("rank-bench: need --model, --prompt-tokens ≥ 1, --new-tokens ≥ 2, --block-size ≥ 1, --rounds ≥ 1")
	}
	if *penalties != "" && *penalties != "device" && *penalties != "host" {
		return fmt.Errorf(`rank-bench: --penalties is "device" or "host"`)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	p, err := worker.Start(worker.Options{
		Command: worker.DefaultCommand(exe, *backend, *device),
		Hello:   worker.Hello{Backend: *backend, Device: *device, Name: filepath.Base(*model), Path: *model},
	})
	if err != nil {
		return err
	}
	defer p.Close()
	blocks := (P+N+bs-1)/bs + 1
	pool, err := p.NewKVPool(p.KVSpec(blocks, bs))
	if err != nil {
		return err
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	cut := func(end int) []int32 { return table[:(end+bs-1)/bs] }
	vocab := p.ModelConfig().VocabSize
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int32, P)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(vocab))
	}
	r := rankBenchResult{Model: *model, Backend: *backend, Device: p.Device(), PromptTokens: P, NewTokens: N, BlockSize: bs,
		Temperature: *temperature, Penalties: *penalties, SameTokens: true}
	// step is one token's request: ForwardArgmax, or ForwardSample with
	// the round's seeded variates (each step names the next one's, as a
	// session does, so that the rank can run it ahead).
	var vrng *rand.Rand
	u := 0.0
	var pen *session.Sampler // the penalties' counts (its own draws unused)
	var drawer session.Drawer
	step := func(seq models.Seq, toks []int32) (int32, error) {
		if *temperature <= 0 && pen == nil {
			return p.ForwardArgmax(seq, toks)
		}
		d := session.Draw{Temperature: 1, TopK: 1} // greedy with penalties: the session's draw
		if *temperature > 0 {
			next := vrng.Float64()
			d = session.Draw{Temperature: *temperature, TopP: 0.95, U: u, Next: next}
			u = next
		}
		var id int32
		var err error
		switch {
		case pen == nil:
			return p.ForwardSample(seq, toks, d)
		case *penalties == "device":
			d.Adjust = pen.Adjust()
			id, err = p.ForwardSample(seq, toks, d)
		default:
			d.Adjust = pen.Adjust()
			var logits []float32
			if logits, err = p.Forward(seq, toks, models.LastLogits); err == nil {
				id = drawer.Token(logits, d)
			}
		}
		pen.Observe(id)
		return id, err
	}
	var first []int32
	for range *rounds {
		vrng = rand.New(rand.NewPCG(3, 4))
		u = vrng.Float64()
		if *penalties != "" {
			pen = session.NewPromptSampler(session.SamplingParams{Temperature: *temperature, RepetitionPenalty: 1.1,
				PresencePenalty: 0.5}, prompt)
		}
		seq := models.Seq{Pool: pool, Table: cut(P)}
		if st := p.NewState(); st != nil { // a hybrid's recurrent state
			if f, ok := st.(interface{ Free() }); ok {
				defer f.Free() // as the session drops it
			}
			seq.State = st.(models.RecurrentState)
		}
		next, err := step(seq, prompt)
		if err != nil {
			return err
		}
		out := []int32{next}
		var t0 time.Time
		for i := 0; i < N-1; i++ {
			if i == 1 {
				t0 = time.Now() // the first step may record the graph
			}
			pos := P + i
			next, err = step(models.Seq{Pool: pool, Table: cut(pos + 1), Start: pos, State: seq.State}, []int32{next})
			if err != nil {
				return err
			}
			out = append(out, next)
		}
		rate := float64(N-2) / time.Since(t0).Seconds()
		r.RoundsPerS = append(r.RoundsPerS, rate)
		r.DecodePerS = max(r.DecodePerS, rate)
		if first == nil {
			first = out
			r.Tokens = out[:min(len(out), 16)]
		} else if !slices.Equal(out, first) {
			r.SameTokens = false
		}
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}
