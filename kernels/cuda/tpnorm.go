//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o tpnorm.ptx tpnorm.cu && gzip -n9f tpnorm.ptx"

import (
	_ "embed"

	"github.com/pocketllm/pocketllm/kernels"
)

// The split RMSNorm (kernels.TPNormOps) on the GPU, kernels in tpnorm.cu:
// MiniMax-M2's q/k norm over all heads when the heads are split over a
// tensor-parallel group. Neither op uploads or reads back, so a decode
// step that runs them (with the all-reduce between them queued on the
// same stream) stays graph-capturable.

//go:embed tpnorm.ptx.gz
var tpnormPTX []byte

var _ kernels.TPNormOps = (*Backend)(nil)

type tpnormMod struct {
	sum, norm cFunc
}

// tpnormEnter is enter plus the module (context current); false means
// skip the op (the failure, if any, is recorded in b.err).
func (b *Backend) tpnormEnter() (*tpnormMod, bool) {
	if !b.enter() {
		return nil, false
	}
	if b.tpnorm != nil { // loaded on first use: models without a split norm never JIT it
		return b.tpnorm, true
	}
	m := &tpnormMod{}
	if _, err := loadModule(tpnormPTX, "tpnorm", map[string]*cFunc{"tp_sum_squares": &m.sum, "tp_rms_norm_sum": &m.norm}); err != nil {
		b.fail(err)
		return nil, false
	}
	b.tpnorm = m
	return m, true
}

// SumSquares implements kernels.TPNormOps: one block per row.
func (b *Backend) SumSquares(dst kernels.Buf, off int, x kernels.Buf, rows, dim int) {
	m, ok := b.tpnormEnter()
	defer b.exit()
	if !ok {
		return
	}
	b.launchFn(m.sum, rows, 1, min(256, 32*cdiv(dim, 32)), ptr(dptr(dst))+uint64(4*off), ptr(dptr(x)), i32(dim))
}

// RMSNormSum implements kernels.TPNormOps: one block per row.
func (b *Backend) RMSNormSum(dst, x, sumsq kernels.Buf, off int, w kernels.Tensor, rows, dim int, scale, eps float32) {
	m, ok := b.tpnormEnter()
	defer b.exit()
	if !ok {
		return
	}
	wv := b.vecOf(w, "split norm weight")
	b.launchFn(m.norm, rows, 1, min(256, 32*cdiv(dim, 32)), ptr(dptr(dst)), ptr(dptr(x)), ptr(dptr(sumsq))+uint64(4*off),
		ptr(wv), i32(dim), f32(scale), f32(eps))
}
