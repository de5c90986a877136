package models

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
)

// Validation is the result of checking a checkpoint's tensors against what
// its architecture expects.
type Validation struct {
	Arch       string
	Supported  bool
	Missing    []string // expected tensors the source lacks
	Problems   []string // wrong shapes, bad data, unsupported formats
	Unexpected []string // tensors the architecture does not read
}

// OK reports whether the checkpoint can be served.
func (v *Validation) OK() bool {
	return v.Supported && len(v.Missing) == 0 && len(v.Problems) == 0
}

// Validate builds the architecture against src on be, collecting every
// problem rather than stopping at the first.
func Validate(cfg *Config, src Source, be kernels.Backend) *Validation {
	v := &Validation{Arch: cfg.Arch()}
	ctor, ok := architectures[cfg.Arch()]
	if !ok {
		v.Problems = append(v.Problems, fmt.Sprintf("architecture %q is not supported (known: %v)", cfg.Arch(), sortedArchitectures()))
		return v
	}
	v.Supported = true
	b := newBinder(cfg, src, be)
	b.maxErrs = 1 << 20
	_, err := ctor(cfg, b)
	if err != nil && len(b.errs) == 0 {
		v.Problems = append(v.Problems, err.Error())
	}
	for _, e := range b.errs {
		if errors.Is(e, ErrMissingTensor) {
			v.Missing = append(v.Missing, e.Error())
		} else {
			v.Problems = append(v.Problems, e.Error())
		}
	}
	v.Unexpected = b.unexpected()
	return v
}

func sortedArchitectures() []string {
	a := Architectures()
	slices.Sort(a)
	return a
}
