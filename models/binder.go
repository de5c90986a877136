package models

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

// ErrUnknownArch is returned for an architecture without a constructor.
var ErrUnknownArch = errors.New("unknown architecture")

// ErrShape marks a tensor whose shape differs from what the architecture
// expects.
var ErrShape = errors.New("wrong tensor shape")

// binder loads the tensors an architecture asks for, checking each shape
// and remembering the first error, so that architecture files read as a
// plain list of tensors. It also records what was expected, which is how
// `pocketd inspect` validates a checkpoint against its architecture.
type binder struct {
	cfg      *Config
	src      Source
	be       kernels.Backend
	errs     []error
	expected map[string]bool
	bytes    int64
	maxErrs  int
	// plan, when set, makes the binder load one tensor-parallel rank's
	// slice of each tensor (tp.go); nil loads whole tensors.
	plan *Plan
	// record, when set, sees every tensor the architecture asks for with
	// the shape it expects (ExpectedTensors).
	record func(name string, shape []int)
}

func newBinder(cfg *Config, src Source, be kernels.Backend) *binder {
	return &binder{cfg: cfg, src: src, be: be, expected: map[string]bool{}, maxErrs: 64}
}

func (b *binder) fail(err error) {
	if len(b.errs) < b.maxErrs {
		b.errs = append(b.errs, err)
	}
}

// err joins the problems found while binding.
func (b *binder) err() error { return errors.Join(b.errs...) }

// tensor loads a required tensor of the given shape.
func (b *binder) tensor(name string, shape ...int) kernels.Tensor {
	w := b.sharded(name, shape)
	if w == nil {
		return nil
	}
	return b.load(w)
}

// tensorSplit loads a required tensor of the given shape as the parts
// split makes of it (of this rank's shard under a TP plan), each a
// tensor of its own; nil on a failure, which is recorded.
func (b *binder) tensorSplit(name string, shape []int, split func(*kernels.Weight) ([]*kernels.Weight, error)) []kernels.Tensor {
	w := b.sharded(name, shape)
	if w == nil {
		return nil
	}
	parts, err := split(w)
	if err != nil {
		b.fail(fmt.Errorf("%s: %w", name, err))
		return nil
	}
	ts := make([]kernels.Tensor, len(parts))
	for i, p := range parts {
		if ts[i] = b.load(p); ts[i] == nil {
			return nil
		}
	}
	return ts
}

// sharded reads a required tensor and applies the TP plan, if any; nil on
// a failure, which is recorded.
func (b *binder) sharded(name string, shape []int) *kernels.Weight {
	b.expected[name] = true
	w, err := b.weight(name, shape)
	if err == nil && b.plan != nil {
		w, err = b.plan.shard(b.cfg, w)
	}
	if err != nil {
		b.fail(err)
		return nil
	}
	return w
}

// load puts w on the backend; nil on a failure, which is recorded.
func (b *binder) load(w *kernels.Weight) kernels.Tensor {
	t, err := b.be.LoadWeight(w)
	if err != nil {
		b.fail(fmt.Errorf("%s: %w", w.Name, err))
		return nil
	}
	b.bytes += int64(len(w.Data)) + int64(len(w.Scale))*4
	return t
}

// optional loads a tensor if the source has it, else returns nil.
func (b *binder) optional(name string, shape ...int) kernels.Tensor {
	if b.record != nil { // listing what a full checkpoint holds
		return b.tensor(name, shape...)
	}
	if _, err := b.src.Weight(name); errors.Is(err, ErrMissingTensor) {
		return nil
	}
	return b.tensor(name, shape...)
}

func (b *binder) weight(name string, shape []int) (*kernels.Weight, error) {
	if b.record != nil {
		b.record(name, shape)
	}
	w, err := b.src.Weight(name)
	if err != nil {
		return nil, err
	}
	// A checkpoint may store a [1, n] or [n, 1] where [n] is meant; compare
	// element layouts, not just ranks, for those.
	if !slices.Equal(w.Shape, shape) && !(len(shape) == 1 && w.Elems() == shape[0] && w.Cols() == shape[0]) {
		return nil, fmt.Errorf("%s: %w: have %v, want %v", name, ErrShape, w.Shape, shape)
	}
	if w.DType == kernels.F8E4M3 {
		if err := b.attachScale(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// attachScale finds weight_scale_inv for an FP8 weight and converts it to
// float32 (it is tiny: one value per 128×128 block in real checkpoints).
func (b *binder) attachScale(w *kernels.Weight) error {
	q := b.cfg.Quantization
	if q == nil || len(q.WeightBlockSize) != 2 || q.WeightBlockSize[0] <= 0 || q.WeightBlockSize[1] <= 0 {
		return fmt.Errorf("%s: FP8 weight but quantization_config.weight_block_size is missing", w.Name)
	}
	name := w.Name + "_scale_inv"
	b.expected[name] = true
	s, err := b.src.Weight(name)
	if err != nil {
		return err
	}
	w.ScaleBlock = [2]int{q.WeightBlockSize[0], q.WeightBlockSize[1]}
	want := []int{ceilDiv(w.Rows(), w.ScaleBlock[0]), ceilDiv(w.Cols(), w.ScaleBlock[1])}
	if s.Elems() != want[0]*want[1] {
		return fmt.Errorf("%s: %w: have %v, want %v", name, ErrShape, s.Shape, want)
	}
	w.Scale = make([]float32, s.Elems())
	switch s.DType {
	case kernels.F32:
		copy(w.Scale, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s.Data))), len(w.Scale)))
	case kernels.BF16:
		for i := range w.Scale {
			w.Scale[i] = math.Float32frombits(uint32(s.Data[2*i])<<16 | uint32(s.Data[2*i+1])<<24)
		}
	default:
		return fmt.Errorf("%s: unsupported scale dtype %s", name, s.DType)
	}
	return w.Validate()
}

// Unexpected lists the source's tensors that the architecture did not ask
// for (excluding ones it knowingly ignores, such as rotary caches).
func (b *binder) unexpected() []string {
	var out []string
	for _, n := range b.src.Names() {
		if !b.expected[n] && !ignoredTensor(n) {
			out = append(out, n)
		}
	}
	return out
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
