//go:build cuda

package cuda

//go:generate nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o tpnorm.ptx tpnorm.cu

import (
	_ "embed"
	"fmt"
	"sync"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The split RMSNorm (kernels.TPNormOps) on the GPU, kernels in tpnorm.cu:
// MiniMax-M2's q/k norm over all heads when the heads are split over a
// tensor-parallel group. Neither op uploads or reads back, so a decode
// step that runs them (with the all-reduce between them queued on the
// same stream) stays graph-capturable.

//go:embed tpnorm.ptx
var tpnormPTX string

var _ kernels.TPNormOps = (*Backend)(nil)

type tpnormMod struct {
	sum, norm cFunc
}

// tpnormMods holds each backend's module, loaded on first use so that
// models without a split norm never JIT it. It lives beside the Backend
// rather than in it because only this file uses it.
var tpnormMods sync.Map // *Backend → *tpnormMod

// tpnormEnter is enter plus the module (context current); false means
// skip the op (the failure, if any, is recorded in b.err).
func (b *Backend) tpnormEnter() (*tpnormMod, bool) {
	if !b.enter() {
		return nil, false
	}
	if m, ok := tpnormMods.Load(b); ok {
		return m.(*tpnormMod), true
	}
	mod, err := cu.LoadData(tpnormPTX)
	if err != nil {
		b.fail(fmt.Errorf("cuda: load tpnorm PTX: %w", err))
		return nil, false
	}
	m := &tpnormMod{}
	for name, f := range map[string]*cFunc{"tp_sum_squares": &m.sum, "tp_rms_norm_sum": &m.norm} {
		fn, err := mod.Function(name)
		if err != nil {
			b.fail(fmt.Errorf("cuda: kernel %s: %w", name, err))
			return nil, false
		}
		*f = cfunc(fn)
	}
	tpnormMods.Store(b, m)
	return m, true
}

// SumSquares implements kernels.TPNormOps: one block per row.
func (b *Backend) SumSquares(dst kernels.Buf, off int, x kernels.Buf, rows, dim int) {
	m, ok := b.tpnormEnter()
	defer b.exit()
	if !ok {
		return
	}
	b.xrun(m.sum, rows, 1, min(256, 32*cdiv(dim, 32)), ptr(dptr(dst))+uint64(4*off), ptr(dptr(x)), i32(dim))
}

// RMSNormSum implements kernels.TPNormOps: one block per row.
func (b *Backend) RMSNormSum(dst, x, sumsq kernels.Buf, off int, w kernels.Tensor, rows, dim int, scale, eps float32) {
	m, ok := b.tpnormEnter()
	defer b.exit()
	if !ok {
		return
	}
	wv := b.vecOf(w, "split norm weight")
	b.xrun(m.norm, rows, 1, min(256, 32*cdiv(dim, 32)), ptr(dptr(dst)), ptr(dptr(x)), ptr(dptr(sumsq))+uint64(4*off),
		ptr(wv), i32(dim), f32(scale), f32(eps))
}
