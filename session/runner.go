package session

import (
	"errors"

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
