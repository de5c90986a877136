//go:build cuda

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/pocketllm/pocketllm/internal/kvseq"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cuda"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/session"
)

// runTP measures tensor parallelism on one host: ranks are separate
// processes, one per GPU, joined by an NCCL unique id that rank 0 writes
// to a file and the others wait for (the daemon will hand it over its
// socket instead; across hosts the id carries rank 0's bootstrap address).
//
//	pocket-worker tp --model DIR --tp 2 --devices 0,1 [--prompt-tokens 128] [--steps 256]
//
// The launcher first runs a TP1 rank that greedy-decodes --steps tokens and
// writes every step's logits as the reference, then the --tp ranks, which
// decode the same tokens teacher-forced (input of step i = TP1's token i)
// and compare: logits relative error and top-1 agreement, eager and graph-
// replayed decode speed, decode speed with the all-reduces switched off
// (compute alone), and an all-reduce microbenchmark at the step's message
// sizes. With --rank the command is one rank (what the launcher starts).
//
// The small all-reduces (up to cuda.P2PMaxFloats) use the peer-memory
// one-shot kernel (cuda.P2P) when every rank's GPU can reach the others';
// POCKET_P2P=0 keeps NCCL for all of them (A/B). The all-reduce
// microbenchmark times both where both exist.
func runTP(args []string) error {
	fs := flag.NewFlagSet("tp", flag.ContinueOnError)
	model := fs.String("model", "", "checkpoint directory")
	world := fs.Int("tp", 2, "tensor-parallel ranks")
	devices := fs.String("devices", "", "GPU ordinals, one per rank (default 0..tp-1)")
	promptTokens := fs.Int("prompt-tokens", 128, "random prompt length")
	steps := fs.Int("steps", 256, "decode steps compared and timed")
	graph := fs.Bool("graph", true, "also capture the decode step (NCCL inside) as a CUDA graph")
	timeout := fs.Duration("timeout", 90*time.Second, "a rank that makes no progress for this long aborts its communicator and exits 3")
	rank := fs.Int("rank", -1, "run as this rank (set by the launcher)")
	device := fs.Int("device", 0, "GPU ordinal of this rank")
	idFile := fs.String("id-file", "", "NCCL unique id file (rank 0 writes it)")
	ref := fs.String("ref", "", "reference file prefix (TP1 writes it, ranks of TP>1 read it)")
	result := fs.String("result", "", "write this rank's JSON result here")
	refEnv := fs.String("ref-env", "", "extra environment (K=V,K=V) of the TP1 reference only, e.g. POCKET_FP8_PREFILL=bf16 to compare the group's FP8 prefill against the reference's bf16 one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for k, v := range multicastOff {
		os.Setenv(k, v)
	}
	o := &tpOpts{model: *model, world: *world, rank: *rank, device: *device, idFile: *idFile, ref: *ref,
		result: *result, prompt: *promptTokens, steps: *steps, graph: *graph, timeout: *timeout}
	if *refEnv != "" {
		o.refEnv = strings.Split(*refEnv, ",")
	}
	if *model == "" {
		return errors.New("--model is required")
	}
	if *rank >= 0 {
		return runTPRank(o)
	}
	devs, err := parseDevices(*devices, *world)
	if err != nil {
		return err
	}
	return launchTP(o, devs)
}

// multicastOff keeps NVLink multicast (NVLS) off in every rank: on the
// shared GPU hosts it can take the GPUs out of service (device KINDS.md).
var multicastOff = map[string]string{
	"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
}

type tpOpts struct {
	model               string
	world, rank, device int
	idFile, ref, result string
	prompt, steps       int
	graph               bool
	timeout             time.Duration
	refEnv              []string // K=V entries for the TP1 reference process only
}

func parseDevices(s string, n int) ([]int, error) {
	if s == "" {
		d := make([]int, n)
		for i := range d {
			d[i] = i
		}
		return d, nil
	}
	var d []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--devices %q: %w", s, err)
		}
		d = append(d, v)
	}
	if len(d) < n {
		return nil, fmt.Errorf("--devices lists %d GPUs for %d ranks", len(d), n)
	}
	return d[:n], nil
}

// tpResult is one rank's measurements.
type tpResult struct {
	Rank      int     `json:"rank"`
	World     int     `json:"world"`
	Device    string  `json:"device"`
	LoadS     float64 `json:"load_s"`
	CommInitS float64 `json:"comm_init_s,omitempty"`
	// P2P is "on" when the small all-reduces use the peer-memory kernel,
	// else why not (NCCL for all).
	P2P           string  `json:"p2p,omitempty"`
	WeightBytes   int64   `json:"weight_bytes"`
	ResidentBytes int64   `json:"resident_bytes"`
	PromptTokens  int     `json:"prompt_tokens"`
	Steps         int     `json:"steps"`
	PrefillTokS   float64 `json:"prefill_tokens_per_s"`
	EagerTokS     float64 `json:"decode_eager_tokens_per_s"`
	GraphTokS     float64 `json:"decode_graph_tokens_per_s,omitempty"`
	GraphError    string  `json:"graph_error,omitempty"`
	// Compared with the TP1 reference (ranks of TP>1).
	PromptRelErr   float64 `json:"prompt_logits_rel_err,omitempty"`
	StepRelErrMax  float64 `json:"step_logits_rel_err_max,omitempty"`
	StepRelErrMean float64 `json:"step_logits_rel_err_mean,omitempty"`
	Top1Eager      string  `json:"top1_agreement_eager,omitempty"`
	Top1Graph      string  `json:"top1_agreement_graph,omitempty"`
	// The graph decode again with the greedy token picked from the
	// group's argmax pairs (models.Model.ForwardGreedy, ranks of TP>1).
	GraphPairsTokS float64 `json:"decode_graph_pairs_tokens_per_s,omitempty"`
	Top1GraphPairs string  `json:"top1_agreement_graph_pairs,omitempty"`
	// Decode with the all-reduces skipped: the step's compute alone.
	NoCommEagerTokS   float64   `json:"decode_eager_no_allreduce_tokens_per_s,omitempty"`
	AllReducesPerStep int       `json:"allreduces_per_step,omitempty"`
	AllReduce         []arBench `json:"allreduce_bench,omitempty"`
}

type arBench struct {
	Floats  int     `json:"floats"`
	Mode    string  `json:"mode"`
	PerOpUs float64 `json:"us_per_allreduce"`
}

// switchable is the rank's collective with an off switch (for timing the
// step without communication; the logits are then wrong).
type switchable struct {
	c   kernels.Collective // *cuda.P2P or *cuda.Comm
	off bool
}

// tpComm is what the watchdog needs of the rank's collective (*cuda.Comm,
// or *cuda.P2P, which adds its kernels' peer timeouts to AsyncError).
type tpComm interface {
	AsyncError() error
	Abort() error
}

func (s *switchable) AllReduceSum(b kernels.Buf, n int) error {
	if s.off {
		return nil
	}
	return s.c.AllReduceSum(b, n)
}

// watchdog exits the rank when no step finishes within the timeout (a
// hung collective) or NCCL reports an asynchronous error, aborting the
// communicator first so that the peers' collectives fail too.
type watchdog struct {
	last atomic.Int64
	what atomic.Value
}

func (w *watchdog) tick(what string) {
	w.last.Store(time.Now().UnixNano())
	w.what.Store(what)
}

func (w *watchdog) start(rank int, timeout time.Duration, comm func() tpComm) {
	w.tick("start")
	go func() {
		for {
			time.Sleep(500 * time.Millisecond)
			var err error
			if c := comm(); c != nil {
				err = c.AsyncError()
			}
			stuck := time.Since(time.Unix(0, w.last.Load())) > timeout
			if err == nil && !stuck {
				continue
			}
			if err == nil {
				err = fmt.Errorf("no progress for %s during %v", timeout, w.what.Load())
			}
			fmt.Fprintf(os.Stderr, "pocket-worker tp rank %d: %v: aborting the communicator\n", rank, err)
			if c := comm(); c != nil {
				c.Abort()
			}
			os.Exit(3)
		}
	}()
}

func runTPRank(o *tpOpts) (err error) {
	runtime.LockOSThread()
	r := &tpResult{Rank: o.rank, World: o.world, PromptTokens: o.prompt, Steps: o.steps}
	var comm atomic.Pointer[cuda.Comm]
	var p2p atomic.Pointer[cuda.P2P]
	var wd watchdog
	wd.start(o.rank, o.timeout, func() tpComm {
		if p := p2p.Load(); p != nil {
			return p
		}
		if c := comm.Load(); c != nil {
			return c
		}
		return nil
	})
	g, err := cuda.NewRank(o.device)
	if err != nil {
		return err
	}
	r.Device = g.DeviceName()
	var sw *switchable
	var plan *models.Plan
	if o.world > 1 {
		wd.tick("communicator init")
		t0 := time.Now()
		id, err := exchangeID(o, &wd)
		if err != nil {
			return err
		}
		c, err := g.NewComm(id, o.rank, o.world)
		if err != nil {
			return err
		}
		comm.Store(c)
		var coll kernels.Collective = c
		wd.tick("p2p join")
		p, err := g.NewP2P(c, filepath.Dir(o.idFile), o.timeout, o.timeout)
		switch {
		case err == nil:
			r.P2P = "on"
			p2p.Store(p)
			coll = p
			defer p.Close() // (closes c too)
			// A quick check of the exchange before the model uses it:
			// a tail that is not a whole float4, the logits' size (the
			// flag kernel), a hidden size (the low-latency kernel).
			for _, n := range []int{4099, 128256, 4096} {
				if err := p.CheckAllReduce(n); err != nil {
					return err
				}
			}
		case errors.Is(err, cuda.ErrP2PUnsupported):
			r.P2P = err.Error()
			fmt.Fprintf(os.Stderr, "pocket-worker tp rank %d: NCCL for every all-reduce: %v\n", o.rank, err)
			defer c.Close()
		default:
			c.Abort() // (a peer that never joined: destroy could wait for it)
			return err
		}
		r.CommInitS = time.Since(t0).Seconds()
		sw = &switchable{c: coll}
		plan = &models.Plan{Rank: o.rank, World: o.world, Comm: sw}
	}
	wd.tick("load")
	t0 := time.Now()
	ck, err := checkpoint.Open(o.model)
	if err != nil {
		return err
	}
	defer ck.Close()
	m, err := models.NewRank(ck.Name, ck.Config, ck.Source, g, plan)
	if err != nil {
		return err
	}
	if _, err := g.PrepareDecode(0); err != nil { // as the daemon's ranks do
		return err
	}
	if err := g.Sync(); err != nil {
		return err
	}
	r.LoadS, r.WeightBytes = time.Since(t0).Seconds(), m.WeightBytes()
	V, P, N := m.Config.VocabSize, o.prompt, o.steps
	m.MaxChunk = max(m.MaxChunk, P)
	rng := rand.New(rand.NewPCG(7, 11))
	prompt := make([]int32, P)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(V))
	}
	seq, err := kvseq.Private(m, P+N+1, 16, false)
	if err != nil {
		return err
	}
	wd.tick("prefill")
	// A hybrid's recurrent state is not rewound by seq.Start: each pass
	// that goes back resets it or restores the snapshot of where it starts.
	if _, err := m.Forward(seq, prompt, models.LastLogits); err != nil { // warm-up
		return err
	}
	if rs, ok := seq.State.(models.RecurrentState); ok {
		rs.Reset()
	}
	t0 = time.Now()
	promptLogits, err := m.Forward(seq, prompt, models.LastLogits)
	if err != nil {
		return err
	}
	r.PrefillTokS = float64(P) / time.Since(t0).Seconds()
	rewindP := rewinder(seq, P) // (a hybrid's snapshot is a device-to-host copy: not prefill time)

	// The reference: TP1 decodes greedily and records every step; the
	// other ranks read it and decode the same tokens.
	var tokens []int32
	var refLogits []float32
	if o.world == 1 {
		tokens = []int32{session.Argmax(promptLogits)}
		refLogits = append(make([]float32, 0, (N+1)*V), promptLogits...)
	} else {
		if tokens, refLogits, err = readRef(o.ref, N, V); err != nil {
			return err
		}
		r.PromptRelErr = tpRelErr(promptLogits, refLogits[:V])
	}
	// Decode, keeping every step's logits; the comparison comes after the
	// timed loop so that it does not count as decode time.
	stepLogits := make([][]float32, 0, N)
	t0 = time.Now()
	for i := range N {
		wd.tick(fmt.Sprintf("eager decode step %d", i))
		seq.Start = P + i
		l, err := m.Forward(seq, []int32{tokens[i]}, models.LastLogits)
		if err != nil {
			return err
		}
		if o.world == 1 {
			tokens = append(tokens, session.Argmax(l))
		}
		stepLogits = append(stepLogits, l)
	}
	r.EagerTokS = float64(N) / time.Since(t0).Seconds()
	if o.world == 1 {
		for _, l := range stepLogits {
			refLogits = append(refLogits, l...)
		}
		if err := writeRef(o.ref, tokens, refLogits); err != nil {
			return err
		}
	} else {
		agree := 0
		var errSum float64
		for i, l := range stepLogits {
			if session.Argmax(l) == tokens[i+1] {
				agree++
			}
			e := tpRelErr(l, refLogits[(i+1)*V:(i+2)*V])
			r.StepRelErrMax = max(r.StepRelErrMax, e)
			errSum += e
		}
		r.Top1Eager = fmt.Sprintf("%d/%d", agree, N)
		r.StepRelErrMean = errSum / float64(N)
	}
	stepLogits = nil
	if err := g.Err(); err != nil {
		return err
	}
	writeResult(o, r) // keep what we have if a later phase hangs

	if sw != nil {
		// The same steps without the all-reduces: what the step's compute
		// costs, hence what the communication adds.
		sw.off = true
		if err := rewindP(); err != nil {
			return err
		}
		t0 = time.Now()
		for i := range N {
			wd.tick(fmt.Sprintf("no-allreduce decode step %d", i))
			seq.Start = P + i
			if _, err := m.Forward(seq, []int32{tokens[i]}, models.LastLogits); err != nil {
				return err
			}
		}
		r.NoCommEagerTokS = float64(N) / time.Since(t0).Seconds()
		sw.off = false // (the graph decode below rewrites the KV of these positions)
		c := comm.Load()
		p := p2p.Load()
		r.AllReducesPerStep = 2*m.Config.NumLayers + 1
		for _, mode := range []string{"eager", "graph", "p2p-eager", "p2p-graph"} {
			isP2P := strings.HasPrefix(mode, "p2p-")
			graph := strings.HasSuffix(mode, "graph")
			if graph && !o.graph || isP2P && p == nil {
				continue
			}
			for _, n := range []int{m.Config.HiddenSize, V} {
				if isP2P && n > cuda.P2PMaxFloats {
					continue
				}
				wd.tick(fmt.Sprintf("all-reduce bench %s %d", mode, n))
				k := 2 * m.Config.NumLayers
				if n == V {
					k = 8
				}
				var d time.Duration
				var err error
				if isP2P {
					d, err = p.BenchAllReduce(n, k, 20, graph)
				} else {
					d, err = c.BenchAllReduce(n, k, 20, graph)
				}
				if err != nil {
					return fmt.Errorf("all-reduce bench (%s, %d floats): %w", mode, n, err)
				}
				r.AllReduce = append(r.AllReduce, arBench{Floats: n, Mode: mode, PerOpUs: float64(d.Nanoseconds()) / 1e3})
			}
		}
		writeResult(o, r)
	}
	if o.graph {
		wd.tick("graph capture")
		if err := rewindP(); err != nil {
			return err
		}
		got, tokS, gerr := tpGraphDecode(g, m, seq, P, tokens, N, false, &wd)
		r.GraphTokS = tokS
		agree := func(got []int32) string {
			n := 0
			for i := range got {
				if got[i] == tokens[i+1] {
					n++
				}
			}
			return fmt.Sprintf("%d/%d", n, N)
		}
		if gerr != nil {
			r.GraphError = gerr.Error()
		} else if o.world > 1 {
			r.Top1Graph = agree(got)
		}
		if gerr == nil && m.PairsArgmax() {
			wd.tick("graph capture (argmax pairs)")
			if err := rewindP(); err != nil {
				return err
			}
			got, tokS, err := tpGraphDecode(g, m, seq, P, tokens, N, true, &wd)
			if err != nil {
				return fmt.Errorf("graph decode with argmax pairs: %w", err)
			}
			r.GraphPairsTokS, r.Top1GraphPairs = tokS, agree(got)
		}
	}
	r.ResidentBytes = g.Resident
	writeResult(o, r)
	return g.Err()
}

// tpGraphDecode captures the decode step at position start (all-reduces
// inside) and replays it with the teacher-forced tokens, taking the top-1
// on the device; with pairs the step is ForwardGreedy's (the group's
// argmax pairs, read back and picked as a rank does). Tokens 2..n are
// timed.
func tpGraphDecode(g *cuda.Backend, m *models.Model, seq models.Seq, start int, tokens []int32, n int, pairs bool, wd *watchdog) ([]int32, float64, error) {
	if err := g.BeginCapture(); err != nil {
		return nil, 0, err
	}
	seq.Start = start
	ferr := recordStep(m, seq, tokens[0], pairs)
	gr, err := g.EndCapture()
	if ferr != nil {
		return nil, 0, ferr
	}
	if err != nil {
		return nil, 0, err
	}
	defer gr.Close()
	bs := seq.Pool.Spec().BlockSize
	out := make([]int32, 0, n)
	var t0 time.Time
	for i := range n {
		wd.tick(fmt.Sprintf("graph decode step %d", i))
		if i == 1 {
			t0 = time.Now()
		}
		pos := start + i
		st := cuda.Step{ID: tokens[i], Pos: int32(pos), Slot: seq.Table[pos/bs]*int32(bs) + int32(pos%bs), Table: seq.Table}
		if err := gr.Launch(st); err != nil {
			return out, 0, err
		}
		out = append(out, graphGreedy(g, gr))
	}
	return out, float64(n-1) / time.Since(t0).Seconds(), g.Err()
}

// exchangeID: rank 0 makes the group id and publishes it atomically
// (write, then rename); the others wait for the file.
func exchangeID(o *tpOpts, wd *watchdog) (cuda.UniqueID, error) {
	var id cuda.UniqueID
	if o.idFile == "" {
		return id, errors.New("--id-file is required with --tp > 1")
	}
	if o.rank == 0 {
		id, err := cuda.NewUniqueID()
		if err != nil {
			return id, err
		}
		tmp := o.idFile + ".tmp"
		if err := os.WriteFile(tmp, id[:], 0o600); err != nil {
			return id, err
		}
		return id, os.Rename(tmp, o.idFile)
	}
	deadline := time.Now().Add(o.timeout)
	for {
		b, err := os.ReadFile(o.idFile)
		if err == nil && len(b) == len(id) {
			copy(id[:], b)
			return id, nil
		}
		if time.Now().After(deadline) {
			return id, fmt.Errorf("no NCCL id in %s after %s", o.idFile, o.timeout)
		}
		wd.tick("waiting for the NCCL id")
		time.Sleep(20 * time.Millisecond)
	}
}

// The reference is PREFIX.json (the tokens) and PREFIX.f32 ((1+steps)×V
// float32 logits: the prompt's last position, then each decode step).
func writeRef(prefix string, tokens []int32, logits []float32) error {
	j, err := json.Marshal(tokens)
	if err != nil {
		return err
	}
	if err := os.WriteFile(prefix+".json", j, 0o644); err != nil {
		return err
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(logits))), len(logits)*4)
	return os.WriteFile(prefix+".f32", b, 0o644)
}

func readRef(prefix string, steps, vocab int) ([]int32, []float32, error) {
	j, err := os.ReadFile(prefix + ".json")
	if err != nil {
		return nil, nil, err
	}
	var tokens []int32
	if err := json.Unmarshal(j, &tokens); err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(prefix + ".f32")
	if err != nil {
		return nil, nil, err
	}
	if len(tokens) != steps+1 || len(b) != (steps+1)*vocab*4 {
		return nil, nil, fmt.Errorf("reference %s: %d tokens, %d bytes; want %d and %d", prefix, len(tokens), len(b), steps+1, (steps+1)*vocab*4)
	}
	logits := make([]float32, (steps+1)*vocab)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(logits))), len(b)), b)
	return tokens, logits, nil
}

func writeResult(o *tpOpts, r *tpResult) {
	if o.result == "" {
		return
	}
	b, _ := json.Marshal(r)
	os.WriteFile(o.result, b, 0o644)
}

// tpRelErr is max|a-b| / max|b|.
func tpRelErr(a, b []float32) float64 {
	var d, m float64
	for i := range b {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
		m = math.Max(m, math.Abs(float64(b[i])))
	}
	return d / m
}

// launchTP runs the TP1 reference rank, then the group's ranks as
// separate processes, and prints one JSON summary.
func launchTP(o *tpOpts, devs []int) error {
	dir, err := os.MkdirTemp("", "pocket-tp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ref := filepath.Join(dir, "ref")
	rankCmd := func(world, rank, dev int, result string) *exec.Cmd {
		cmd := exec.Command(self, "tp", "--model", o.model, "--tp", strconv.Itoa(world), "--rank", strconv.Itoa(rank),
			"--device", strconv.Itoa(dev), "--id-file", filepath.Join(dir, "nccl.id"), "--ref", ref, "--result", result,
			"--prompt-tokens", strconv.Itoa(o.prompt), "--steps", strconv.Itoa(o.steps),
			"--graph="+strconv.FormatBool(o.graph), "--timeout", o.timeout.String())
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.Env = os.Environ()
		for k, v := range multicastOff {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		return cmd
	}
	summary := map[string]any{"model": o.model, "tp": o.world, "devices": devs, "ref_env": o.refEnv}
	one := filepath.Join(dir, "tp1.json")
	fmt.Fprintf(os.Stderr, "tp: TP1 reference on GPU %d %v\n", devs[0], o.refEnv)
	refCmd := rankCmd(1, 0, devs[0], one)
	refCmd.Env = append(refCmd.Env, o.refEnv...)
	if err := refCmd.Run(); err != nil {
		return fmt.Errorf("TP1 rank: %w", err)
	}
	var r1 tpResult
	if err := readJSON(one, &r1); err != nil {
		return err
	}
	summary["tp1"] = r1
	fmt.Fprintf(os.Stderr, "tp: TP%d on GPUs %v\n", o.world, devs)
	cmds := make([]*exec.Cmd, o.world)
	done := make(chan error, o.world)
	for r := range o.world {
		cmds[r] = rankCmd(o.world, r, devs[r], filepath.Join(dir, fmt.Sprintf("tp%d-%d.json", o.world, r)))
		if err := cmds[r].Start(); err != nil {
			return err
		}
		go func() {
			err := cmds[r].Wait()
			if err != nil {
				err = fmt.Errorf("rank %d: %w", r, err)
			}
			done <- err
		}()
	}
	var errs []error
	for range o.world {
		if err := <-done; err != nil {
			errs = append(errs, err)
			// A failed rank breaks the group: stop the others (our own
			// children) rather than wait for their watchdogs.
			for _, c := range cmds {
				c.Process.Kill() // an error for those already gone
			}
		}
	}
	var rn []tpResult
	for r := range o.world {
		var x tpResult
		if readJSON(filepath.Join(dir, fmt.Sprintf("tp%d-%d.json", o.world, r)), &x) == nil {
			rn = append(rn, x)
		}
	}
	summary["tpn"] = rn
	if len(rn) > 0 {
		if r1.EagerTokS > 0 {
			summary["speedup_eager"] = rn[0].EagerTokS / r1.EagerTokS
		}
		if r1.GraphTokS > 0 && rn[0].GraphTokS > 0 {
			summary["speedup_graph"] = rn[0].GraphTokS / r1.GraphTokS
		}
		if r1.GraphTokS > 0 && rn[0].GraphPairsTokS > 0 {
			summary["speedup_graph_pairs"] = rn[0].GraphPairsTokS / r1.GraphTokS
		}
		if rn[0].NoCommEagerTokS > 0 {
			summary["allreduce_ms_per_step_eager_in_situ"] = 1e3/rn[0].EagerTokS - 1e3/rn[0].NoCommEagerTokS
		}
	}
	if len(errs) > 0 {
		summary["error"] = errors.Join(errs...).Error()
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(summary); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
