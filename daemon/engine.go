package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/daemon/worker"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// Loaded is a model ready to be handed to the session manager.
type Loaded struct {
	// Model runs the forward passes: a *models.Model in process, or a
	// *worker.Proxy for a model held by a worker process.
	Model     session.Runner
	Tokenizer *tokenizer.Tokenizer // nil: token-only sessions
	EOS       []int32
	Info      apitype.Model
	// Close releases the weights once the manager has shut down.
	Close func() error
	// Worker, when set, is the model's worker process (for /health).
	Worker WorkerStatus
}

// WorkerStatus is what /health and systemd's STATUS show of a model's
// worker process (*worker.Proxy implements it).
type WorkerStatus interface {
	// Health is nil while the worker serves, and says why not otherwise.
	Health() error
	PID() int
	Restarts() int
	// Ranks lists every rank process of the model's group (one for a
	// single worker).
	Ranks() []worker.RankStatus
}

// An Engine loads a model for one kind of backend. The in-process CPU
// engine is built in; the CUDA worker-group engine (rank processes, see
// DESIGN.md) slots in under "cuda" with the same signature.
type Engine interface {
	Load(ctx context.Context, m ModelConfig) (*Loaded, error)
}

// EngineFunc adapts a function to Engine.
type EngineFunc func(ctx context.Context, m ModelConfig) (*Loaded, error)

// Load implements Engine.
func (f EngineFunc) Load(ctx context.Context, m ModelConfig) (*Loaded, error) { return f(ctx, m) }

// ErrNoCUDA is returned for backend "cuda" by a binary without the CUDA
// worker engine.
var ErrNoCUDA = errors.New("cuda backend not built into this binary")

// DefaultEngines are the engines of this binary, by backend name: "cpu"
// in process, "cuda" and "cpu-worker" in pocket-worker processes (see
// package daemon/worker).
func DefaultEngines() map[string]Engine {
	return map[string]Engine{
		"cpu":        EngineFunc(loadCPU),
		"cuda":       EngineFunc(loadWorker),
		"cpu-worker": EngineFunc(loadWorker),
	}
}

// loadWorker starts the pocket-worker serve-rank process that loads the
// model (or, with tensor_parallel = N, the N rank processes of a
// tensor-parallel group, each loading its shard) and serves it to the
// scheduler through a worker.Proxy.
func loadWorker(_ context.Context, m ModelConfig) (*Loaded, error) {
	backend := m.Backend
	if backend == "cpu-worker" {
		backend = "cpu"
	}
	n := m.Ranks()
	var devices []int // one per rank; CPU ranks have none
	if backend == "cuda" {
		devices = m.Devices
		if len(devices) == 0 {
			for r := range n {
				devices = append(devices, r)
			}
		}
		if len(devices) != n {
			return nil, fmt.Errorf("tensor_parallel = %d, but devices lists %d GPUs (one per rank)", n, len(devices))
		}
	}
	threads := m.Threads
	if n > 1 {
		if err := checkTP(m, n); err != nil {
			return nil, err
		}
		if backend == "cpu" && threads == 0 {
			// CPU ranks share the cores rather than each taking them all.
			threads = max(1, runtime.NumCPU()/n)
		}
	}
	bin, err := worker.FindBinary(m.Worker)
	if err != nil {
		if backend == "cuda" {
			err = fmt.Errorf("%w: %w", ErrNoCUDA, err)
		}
		return nil, err
	}
	var tok *tokenizer.Tokenizer
	if m.demo {
		tok, err = demo.Tokenizer()
	} else {
		tok, err = loadTokenizer(m.Path)
	}
	if err != nil {
		return nil, err
	}
	p, err := worker.Start(worker.Options{
		Command: worker.DefaultCommand(bin, backend, devices...),
		Hello:   worker.Hello{Backend: backend, Threads: threads, Name: m.ModelName(), Path: m.Path, Demo: m.demo},
		World:   n,
		Devices: devices,
		Logger:  m.logger,
	})
	if err != nil {
		return nil, err
	}
	cfg := p.ModelConfig()
	eos := p.EOS()
	if tok != nil {
		for _, id := range tok.EOS() {
			if !containsID(eos, id) {
				eos = append(eos, id)
			}
		}
	}
	info := apitype.Model{Name: m.ModelName(), Architecture: cfg.Arch(), Backend: m.Backend, Path: m.Path,
		VocabSize: cfg.VocabSize, ContextLength: cfg.MaxPositions,
		Tokenizer: tok != nil, ChatTemplate: tok != nil && tok.HasChatTemplate()}
	return &Loaded{Model: p, Tokenizer: tok, EOS: eos, Info: info, Close: p.Close, Worker: p}, nil
}

// checkTP refuses, before any rank starts, a model that cannot be divided
// over n ranks: an architecture without a sharding plan (MLA) or heads
// that do not divide (attention, or a hybrid's linear-attention heads).
func checkTP(m ModelConfig, n int) error {
	var ck *checkpoint.Checkpoint
	var err error
	if m.demo {
		ck, err = demo.Open()
	} else {
		ck, err = checkpoint.Open(m.Path)
	}
	if err != nil {
		return err
	}
	defer ck.Close()
	if err := models.CheckTP(ck.Config, n); err != nil {
		return fmt.Errorf("tensor_parallel = %d: %s (%s) cannot be split over %d ranks: %w", n, m.ModelName(), ck.Config.Arch(), n, err)
	}
	return nil
}

// loadCPU opens a checkpoint (or the built-in demo) and binds it to the
// pure-Go backend, in process.
func loadCPU(_ context.Context, m ModelConfig) (*Loaded, error) {
	var ck *checkpoint.Checkpoint
	var tok *tokenizer.Tokenizer
	var err error
	if m.demo {
		if ck, err = demo.Open(); err != nil {
			return nil, err
		}
		if tok, err = demo.Tokenizer(); err != nil {
			return nil, err
		}
	} else {
		if ck, err = checkpoint.Open(m.Path); err != nil {
			return nil, err
		}
		if tok, err = loadTokenizer(m.Path); err != nil {
			ck.Close()
			return nil, err
		}
	}
	ck.Name = m.ModelName()
	be := cpu.New(m.Threads)
	model, err := ck.Model(be)
	if err != nil {
		be.Close()
		ck.Close()
		return nil, err
	}
	eos := ck.EOS()
	if tok != nil {
		for _, id := range tok.EOS() {
			if !containsID(eos, id) {
				eos = append(eos, id)
			}
		}
	}
	info := apitype.Model{Name: ck.Name, Architecture: ck.Config.Arch(), Backend: "cpu", Path: ck.Path,
		VocabSize: ck.Config.VocabSize, ContextLength: ck.Config.MaxPositions,
		Tokenizer: tok != nil, ChatTemplate: tok != nil && tok.HasChatTemplate()}
	return &Loaded{Model: model, Tokenizer: tok, EOS: eos, Info: info, Close: func() error {
		be.Close() // the backend's worker goroutines; nothing runs on it by now
		return ck.Close()
	}}, nil
}

// loadTokenizer loads the checkpoint's tokenizer (tokenizer.json or a GGUF
// vocabulary); a checkpoint without one serves token-only sessions.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	tok, err := checkpoint.LoadTokenizer(path)
	if errors.Is(err, checkpoint.ErrNoTokenizer) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	return tok, nil
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
