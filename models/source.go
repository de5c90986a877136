package models

import (
	"errors"

	"github.com/pocketllm/pocketllm/kernels"
)

// ErrMissingTensor is returned by a Source for a name it does not hold.
var ErrMissingTensor = errors.New("missing tensor")

// Source is where a model's weights come from: a safetensors checkpoint or
// a GGUF file mapped onto transformers' tensor names, so that one model
// file per architecture serves both formats.
type Source interface {
	// Weight returns the named tensor (transformers naming, e.g.
	// "model.layers.0.self_attn.q_proj.weight"), or an error wrapping
	// ErrMissingTensor.
	Weight(name string) (*kernels.Weight, error)
	// Names lists every tensor the source holds.
	Names() []string
	// Close releases the mapping; weights must not be used afterwards.
	Close() error
}
