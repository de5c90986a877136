//go:build cuda

package cuda

//go:generate nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o sample.ptx sample.cu

import (
	_ "embed"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Sampling on the device (sample.cu): a sampled decode step's token drawn
// from the logits where the step left them, reading back one int32.

//go:embed sample.ptx
var samplePTX string

type sampleMod struct {
	draw     cFunc
	probs    cu.DevicePtr // scratch for the probabilities (probsCap bytes)
	probsCap int64
	outWord  cu.DevicePtr
}

// DrawArgs is a sampled step's rule and uniform variate as sample_draw
// takes them: InvT is float32(1/temperature), TopK ≤ 0, TopP outside
// (0, 1) and MinP ≤ 0 are off, U is in [0, 1).
type DrawArgs struct {
	InvT float32
	TopK int
	TopP float64
	MinP float32
	U    float64
}

// Draw returns the token drawn from the first n floats of x by the
// session's sampling rule (session.Drawer; sample.cu says where a draw
// may differ by a rounding), or -1 after a failure (b.Err says which).
func (b *Backend) Draw(x kernels.Buf, n int, a DrawArgs) int32 {
	if !b.enter() {
		b.exit()
		return -1
	}
	defer b.exit()
	m := b.sampleModule()
	if m == nil {
		return -1
	}
	probs := b.scratch(&m.probs, &m.probsCap, int64(4*n))
	b.launchFn(m.draw, 1, 1, 1024, ptr(m.outWord), ptr(probs), ptr(dptr(x)), i32(n),
		f32(a.InvT), i32(a.TopK), math.Float64bits(a.TopP), f32(a.MinP), math.Float64bits(a.U))
	var out int32 = -1
	b.fail(cu.MemcpyDtoHAsync(unsafe.Pointer(&out), m.outWord, 4, b.stream))
	b.fail(b.stream.Synchronize())
	if b.err != nil {
		return -1
	}
	return out
}

// PrepareDraw loads the draw's module now (the driver compiles its PTX,
// ~0.5 s), so that a process's first sampled step does not wait for it.
func (b *Backend) PrepareDraw() error {
	if b.enter() {
		b.sampleModule()
	}
	defer b.exit()
	return b.err
}

// sampleModule is the loaded module, or nil after a failure (context
// current).
func (b *Backend) sampleModule() *sampleMod {
	if b.sample == nil {
		m := &sampleMod{}
		if _, err := loadModule(samplePTX, "sample", map[string]*cFunc{"sample_draw": &m.draw}); err != nil {
			b.fail(err)
			return nil
		}
		m.outWord = b.alloc(4)
		b.sample = m
	}
	return b.sample
}
