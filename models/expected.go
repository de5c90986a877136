package models

import (
	"fmt"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
)

// TensorSpec is one tensor an architecture reads: its checkpoint name and
// the shape it expects.
type TensorSpec struct {
	Name  string
	Shape []int
}

// ExpectedTensors lists the tensors the architecture of cfg reads, in the
// order it asks for them, with the shapes it checks (what `pocketd
// inspect` validates against). The constructor runs against an empty
// source on be, so nothing is loaded; tensors it reads when present
// (an untied lm_head) are listed, FP8 scale tensors are not.
func ExpectedTensors(cfg *Config, be kernels.Backend) ([]TensorSpec, error) {
	ctor, ok := architectures[cfg.Arch()]
	if !ok {
		return nil, fmt.Errorf("%s: %w", cfg.Arch(), ErrUnknownArch)
	}
	b := newBinder(cfg, emptySource{}, be)
	var out []TensorSpec
	seen := map[string]bool{}
	b.record = func(name string, shape []int) {
		if !seen[name] {
			seen[name] = true
			out = append(out, TensorSpec{name, slices.Clone(shape)})
		}
	}
	ctor(cfg, b) // every tensor is missing: the errors are the point
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the architecture asked for no tensors", cfg.Arch())
	}
	return out, nil
}

// emptySource holds no tensors.
type emptySource struct{}

func (emptySource) Weight(name string) (*kernels.Weight, error) {
	return nil, fmt.Errorf("%s: %w", name, ErrMissingTensor)
}
func (emptySource) Names() []string { return nil }
func (emptySource) Close() error    { return nil }
