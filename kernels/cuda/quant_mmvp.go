//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The o projection with its weights loaded during the attention (qmvp_q4k,
// quant_mmvp.cuh has the why): used for a Q4_K o projection right after a
// deferred attention, where qx_merge_e merges and rounds the attention's
// output and lets qmvp launch before its own wait. POCKET_QMVP=1 turns it
// on.

// qmvpMaxShm is the most shared memory a qmvp block takes: it must sit
// beside the attention's blocks (a few KiB each) on an SM.
const qmvpMaxShm = 160 << 10

// loadQmvp resolves the preloading o projection and its merge in the
// quant module; a failure leaves them unset (qmv serves).
func (q *quantMod) loadQmvp(mod cu.Module) {
	fe, err1 := mod.Function("qx_merge_e")
	fp, err2 := mod.Function("qmvp_q4k")
	if err1 != nil || err2 != nil || setMaxShm(cfunc(fp), qmvpMaxShm) != nil {
		return
	}
	q.qxme, q.qmvp = cfunc(fe), cfunc(fp)
}

// qmvpRows is the rows a block of qmvp over t (a multiple of 4, the grid at
// most one block an SM), or false where qmvp cannot take t.
func (b *Backend) qmvpRows(t *tensor) (int, bool) {
	if !switches.qmvp || b.q.qmvp == nil || t.w.DType != kernels.Q4_K || t.data%16 != 0 {
		return 0, false
	}
	rpb := (cdiv(t.w.Rows(), b.sms) + 3) &^ 3
	if rpb*t.rowBytes() > qmvpMaxShm {
		return 0, false
	}
	return rpb, true
}

// qmvpLaunch computes y += t·x (add) from the rounded x, rpb rows a block.
func (b *Backend) qmvpLaunch(y, xs, xq cu.DevicePtr, t *tensor, rpb, in int) {
	if b.err != nil || ablated("qmv_o") {
		return
	}
	out := t.w.Rows()
	b.a(ptr(y), ptr(t.data), uint64(t.rowBytes()), i32(out), i32(rpb), ptr(xq), ptr(xs), i32(in), i32(qmvAdd))
	shm := rpb * t.rowBytes()
	if switches.noPDL {
		b.fail(launchShm(b.q.qmvp, cdiv(out, rpb), 1, 256, shm, b.s, &b.args, b.nargs))
		return
	}
	b.fail(launchPDLShm(b.q.qmvp, cdiv(out, rpb), 1, 256, shm, b.s, &b.args, b.nargs))
}
