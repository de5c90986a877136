//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Batch-1 GEMVs of Q4_K, Q6_K and Q8_0 weights, second version (kernels in
// quant_mmv.cuh): each block rounds the activation to int8 per 32 elements
// into its shared memory (with the RMSNorm weight multiplied in and the
// norm's 1/rms applied to the dot products, for the norm ops), and qmv
// computes up to four matrices that share it, QR = 4 rows per warp, wpr
// warps per row group. It serves MatMul's one-row case and the FusedOps
// entry points for these formats (decode.go hands them over when its
// bf16/FP8 kernels cannot read the weights), one launch each:
//
//	NormMatMul: qmv (norm mode) over q, k, v
//	NormSwiGLU: qmv_swiglu
//	MatMulAdd:  qmv (add mode)
//
// against 7, 5 and 3 for the unfused ops. Rows longer than qmvMaxIn go to
// the v1 kernels. POCKET_QGEMV=v1 keeps the first int8 kernels (qx_quant +
// qgemv8_*, one launch pair per GEMV, no fused ops); POCKET_QGEMV=exact the
// fp32 GEMV (no fused ops either). POCKET_QMV_WPR forces qmvWarps's choice;
// POCKET_QMV_PF sets how many steps past the one in registers a warp asks
// L2 for (prefetch.global.L2; 0: none).

// qmv modes (quant_mmv.cuh).
const (
	qmvPlain = 0
	qmvAdd   = 1
	qmvNorm  = 2
)

// qmvRows is QR of quant_mmv.cuh: the weight rows one warp computes.
const qmvRows = 4

// qmvMaxIn is QMV_MAXIN of quant_mmv.cuh: the longest row (a block's int8
// activation lives in its shared memory).
const qmvMaxIn = 32768

// qmvOn reports whether the second-version int8 GEMVs are in use.
func (b *Backend) qmvOn() bool {
	return b.q != nil && b.q.int8 && !switches.qgemvV1 && b.q.mv != nil
}

// qmvWeight is t as qmv reads it: Q4_K, Q6_K or Q8_0, in columns (in %
// 256 == 0), on the device.
func qmvWeight(w kernels.Tensor, in int) (*tensor, bool) {
	t, ok := w.(*tensor)
	if !ok || len(t.w.Shape) != 2 || t.w.Cols() != in || in%256 != 0 || in > qmvMaxIn || t.data == 0 {
		return nil, false
	}
	switch t.w.DType {
	case kernels.Q4_K, kernels.Q6_K, kernels.Q8_0:
		return t, true
	}
	return nil, false
}

// runQ launches a quant_mmv.cuh kernel, with PDL unless switched off.
func (b *Backend) runQ(f cFunc, gx, bx int, args ...uint64) {
	if switches.noPDL {
		b.launchFn(f, gx, 1, bx, args...)
		return
	}
	if b.err != nil || gx <= 0 {
		return
	}
	b.a(args...)
	b.fail(launchPDL(f, gx, 1, bx, b.s, &b.args, b.nargs))
}

// qmvOcc is the blocks of qmv and qmv_swiglu an SM holds: both are
// __launch_bounds__(256, 3), 80 registers, 41120 bytes of shared memory
// (ptxas).
const qmvOcc = 3

// qmvWarps picks how many warps share a row group (1, 2, 4 or 8; every
// warp keeps at least one step of 4 blocks, 1024 columns). A warp has one
// step of weights in flight at a time, so the time goes as the waves of
// blocks times the steps per warp; of equal ones the fewer warps per group
// (less reduction), unless more fill a quarter more of the first wave's
// slots (qmvOcc blocks per SM).
func (b *Backend) qmvWarps(groups, in int) int {
	if w := switches.qmvWPR; w > 0 {
		return w
	}
	steps := cdiv(in/256, 4)
	slots := qmvOcc * b.sms
	best, cost, res := 1, 0, 0
	for wpr := 1; wpr <= 8 && (wpr == 1 || steps >= wpr); wpr *= 2 {
		blocks := cdiv(groups*wpr, 8)
		c, r := cdiv(blocks, slots)*cdiv(steps, wpr), min(blocks, slots)
		if wpr == 1 || c < cost || (c == cost && 4*r >= 5*res) {
			best, cost, res = wpr, c, r
		}
	}
	return best
}

// qmvLaunch computes ys[i] = ts[i]·x (mode plain, add, or norm: ts[i] ·
// rmsnorm(x; nw)) for up to four weights with in columns, in one launch.
func (b *Backend) qmvLaunch(mode int, x, nw cu.DevicePtr, eps float32, in int, ys []cu.DevicePtr, ts []*tensor) {
	groups := 0
	for _, t := range ts {
		groups += cdiv(t.w.Rows(), qmvRows)
	}
	wpr := b.qmvWarps(groups, in)
	per := qmvRows * 8 / wpr // rows per block
	args := []uint64{ptr(x), ptr(nw), f32(eps), i32(in), i32(wpr), i32(switches.qmvPF), i32(mode)}
	blocks := 0
	for i := range 4 {
		j := min(i, len(ts)-1)
		t := ts[j]
		out := t.w.Rows()
		if i >= len(ts) {
			out = 0
		}
		blocks += cdiv(out, per)
		args = append(args, ptr(ys[j]), ptr(t.data), uint64(t.rowBytes()), i32(out), i32(int(t.w.DType)))
		if i < 3 {
			args = append(args, i32(blocks))
		}
	}
	b.runQ(b.q.mv, blocks, 256, args...)
}

// quantGEMV1 is MatMul's one-row case on qmv (one launch); it reports
// false for weights qmv cannot read.
func (b *Backend) quantGEMV1(y, x cu.DevicePtr, t *tensor) bool {
	in := t.w.Cols()
	if !b.qmvOn() {
		return false
	}
	if _, ok := qmvWeight(t, in); !ok {
		return false
	}
	b.qmvLaunch(qmvPlain, x, 0, 0, in, []cu.DevicePtr{y}, []*tensor{t})
	return true
}

// quantNormMatMul is NormMatMul for block-format weights (decode.go has
// checked the switch, rows, counts, the norm vector nv and x's length).
func (b *Backend) quantNormMatMul(dst []kernels.Buf, x kernels.Buf, nv cu.DevicePtr, eps float32, ws []kernels.Tensor) bool {
	in := ws[0].Weight().Cols()
	ts := make([]*tensor, len(ws))
	ys := make([]cu.DevicePtr, len(ws))
	for i, w := range ws {
		t, ok := qmvWeight(w, in)
		if !ok || dst[i].Len() < t.w.Rows() {
			return false
		}
		ts[i], ys[i] = t, dptr(dst[i])
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if !b.qmvOn() {
		return false
	}
	b.qmvLaunch(qmvNorm, dptr(x), nv, eps, in, ys, ts)
	return true
}

// quantNormSwiGLU is NormSwiGLU for block-format gate and up weights of
// one format.
func (b *Backend) quantNormSwiGLU(act, x kernels.Buf, nv cu.DevicePtr, eps float32, gate, up kernels.Tensor) bool {
	in := gate.Weight().Cols()
	g, ok1 := qmvWeight(gate, in)
	u, ok2 := qmvWeight(up, in)
	if !ok1 || !ok2 || g.w.DType != u.w.DType || g.rowBytes() != u.rowBytes() {
		return false
	}
	out := g.w.Rows()
	if u.w.Rows() != out || act.Len() < out {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if !b.qmvOn() {
		return false
	}
	// A group is two gate and two up rows: two outputs.
	wpr := b.qmvWarps(cdiv(out, 2), in)
	b.runQ(b.q.swi, cdiv(out, 2*8/wpr), 256, ptr(dptr(act)), ptr(dptr(x)), ptr(nv), f32(eps), i32(in), i32(wpr),
		i32(switches.qmvPF), i32(int(g.w.DType)), ptr(g.data), ptr(u.data), uint64(g.rowBytes()), i32(out))
	return true
}

// quantMatMulAdd is MatMulAdd for a block-format weight (decode.go has
// checked lengths and that acc is not x).
func (b *Backend) quantMatMulAdd(acc, x kernels.Buf, w kernels.Tensor) bool {
	in := w.Weight().Cols()
	t, ok := qmvWeight(w, in)
	if !ok {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if !b.qmvOn() {
		return false
	}
	b.qmvLaunch(qmvAdd, dptr(x), 0, 0, in, []cu.DevicePtr{dptr(acc)}, []*tensor{t})
	return true
}

// QuantFused reports whether the FusedOps take Q4_K/Q6_K/Q8_0 weights (not
// with POCKET_QGEMV=exact or v1), so conformance knows which declines are
// expected.
func QuantFused() bool { return !switches.exactQGEMV && !switches.qgemvV1 }
