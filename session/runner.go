package session

import (
	"errors"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
)

// Runner is the model a per-model scheduler drives: a *models.Model in
// this process (the CPU backend), or a proxy for a group of GPU worker
// processes that hold the weights and the KV pool. The scheduler needs
// only these methods, so sessions, forks and the prefix cache work the
// same over either.
type Runner interface {
	// ModelConfig is the checkpoint's hyper-parameters.
	ModelConfig() *models.Config
	// Forward runs tokens at positions seq.Start.. and returns logits.
	Forward(seq models.Seq, tokens []int32, want models.Logits) ([]float32, error)
	// NewState returns fresh recurrent state, or nil for attention-only models.
	NewState() any
	// KVSpec is the pool shape for blocks blocks of blockSize tokens.
	KVSpec(blocks, blockSize int) kernels.KVSpec
	// KVOps allocates and moves the KV blocks the cache package manages.
	KVOps() kernels.KVOps
}

var _ Runner = (*models.Model)(nil)

// ErrKVLost is wrapped by a Runner's Forward error when the KV memory the
// runner holds was lost, e.g. because a worker process restarted: every
// block's contents are gone, not only this call's. The scheduler then drops
// all KV state and rebuilds it from the sessions' token histories.
var ErrKVLost = errors.New("kv memory lost")

// GreedyRunner is a Runner that can return, instead of the logits, only
// the argmax of the last token's logits (Argmax's rule). A generation
// whose steps need nothing else (greedy decoding without penalties or
// logprobs) asks for that, e.g. so that a worker process does not ship a
// vocabulary of floats per token.
type GreedyRunner interface {
	Runner
	// ForwardArgmax is Forward(seq, tokens, models.LastLogits) followed
	// by Argmax of the logits.
	ForwardArgmax(seq models.Seq, tokens []int32) (int32, error)
}

// Argmax is the index of the largest logit, the lowest index on ties,
// as greedy sampling picks it (vmath.Argmax). A NaN never wins, not even
// the first logit (before, a NaN there beat every later value, where the
// device's argmax skipped it); with nothing but NaN it is 0, so that a
// broken model's next step still embeds a token of the vocabulary.
// Runners implementing GreedyRunner and the CUDA argmax kernel pick the
// same token.
func Argmax(logits []float32) int32 { return vmath.Argmax(logits) }
