package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// Loaded is a model ready to be handed to the session manager.
type Loaded struct {
	Model     *models.Model
	Tokenizer *tokenizer.Tokenizer // nil: token-only sessions
	EOS       []int32
	Info      apitype.Model
	// Close releases the weights once the manager has shut down.
	Close func() error
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

// DefaultEngines are the engines of this binary, by backend name.
func DefaultEngines() map[string]Engine {
	return map[string]Engine{
		"cpu": EngineFunc(loadCPU),
		"cuda": EngineFunc(func(context.Context, ModelConfig) (*Loaded, error) {
			return nil, ErrNoCUDA
		}),
	}
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
	model, err := ck.Model(cpu.New(m.Threads))
	if err != nil {
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
	return &Loaded{Model: model, Tokenizer: tok, EOS: eos, Info: info, Close: ck.Close}, nil
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
