//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Batch-1 GEMVs of Q4_K, Q6_K and Q8_0 weights, second version (kernels in
// quant_mmv.cuh): the activation is rounded to int8 once per distinct x by
// qx_norm, and qmv computes up to four matrices that share it, QR rows
// per warp, wpr warps per row group. It serves MatMul's one-row case and
// the FusedOps entry points for these formats (decode.go hands them over
// when its bf16/FP8 kernels cannot read the weights):
//
//	NormMatMul: qx_norm(x·norm) + qmv (norm mode) over q, k, v: 2 launches
//	NormSwiGLU: qx_norm(x·norm) + qmv_swiglu:                   2 launches
//	MatMulAdd:  qx_norm(x)      + qmv (add mode):               2 launches
//
// against 7, 5 and 3 for the unfused ops. The SwiGLU GEMV rounds its own
// output besides (qmv_swiglu_q, 32 outputs a block), so the down
// projection right after it is one launch: Qwen3-8B Q4_K_M decode on an
// H200, interleaved, 481.6-483.9 against 476.6-480.2 tok/s with a qx
// launch before it (POCKET_QMV_SWIQ=0). Likewise a MatMulAdd waits for the
// op after it (Backend.qadd): where that is a NormMatMul or NormSwiGLU of
// its output, the add launches as qmv_add_q, which rounds the new
// residual times that op's norm weight and leaves its sums of squares, so
// that op needs no qx_norm (POCKET_QMV_ADDQ=0 keeps the qx_norm). A
// dense layer is then six launches: q/k/v, the attention, the merge and
// rounding, o (+ rounding), gate/up (+ rounding), down (+ rounding).
// Two of them have Q4_K twins: the o projection of two steps a warp loads
// both before its PDL wait (qmv_add_q2_4, addqPre2), and the SwiGLU GEMV
// runs a warp's passes back to back with one block barrier at the end
// (qmv_swiglu_qf); Qwen3-8B Q4_K_M +0.7% and +1.5-2.5% on an H200.
//
// POCKET_QGEMV=v1 keeps the first int8 kernels (qx_quant + qgemv8_*, one
// launch pair per GEMV, no fused ops); POCKET_QGEMV=exact the fp32 GEMV
// (no fused ops either).

// qmvOn reports whether the second-version int8 GEMVs are in use.
func (b *Backend) qmvOn() bool {
	return b.q != nil && b.q.int8 && !switches.qgemvV1 && len(b.q.kern) > 0
}

// qmvWeight is t as qmv reads it: Q4_K, Q6_K or Q8_0, in columns (in %
// 256 == 0), on the device.
func qmvWeight(w kernels.Tensor, in int) (*tensor, bool) {
	t, ok := w.(*tensor)
	if !ok || len(t.w.Shape) != 2 || t.w.Cols() != in || in%256 != 0 || t.data == 0 {
		return nil, false
	}
	switch t.w.DType {
	case kernels.Q4_K, kernels.Q6_K, kernels.Q8_0:
		return t, true
	}
	return nil, false
}

// qxLayout lays out an int8 activation scratch for in elements in *buf
// (of *size bytes): xs (in/32 float2), xq (in bytes) and ssp (partial
// sums of squares: qx_norm's, one per 1024 elements, or qmv_add_q's, one
// per 32), each 256-byte aligned. A scratch only grows; an old one is not
// freed (queued work or a captured graph may still use it).
func (b *Backend) qxLayout(buf *cu.DevicePtr, size *int64, in int) (xs, xq, ssp cu.DevicePtr) {
	xsB := int64(in/32*8+255) &^ 255
	xqB := int64(in+255) &^ 255
	need := xsB + xqB + int64(max(in/32, cdiv(in/4, 256)))*4
	if need > *size {
		n := max(need, 1<<20)
		*buf, *size = b.alloc(n), n
	}
	xs = *buf
	return xs, xs + cu.DevicePtr(xsB), xs + cu.DevicePtr(xsB+xqB)
}

// qxBuf is the int8 activation scratch for in elements (qxLayout).
func (b *Backend) qxBuf(in int) (xs, xq, ssp cu.DevicePtr) { return b.qxLayout(&b.q.xq, &b.q.xqN, in) }

// roundedAct names an activation of n elements and where its rounding
// is (see Backend.rounded).
type roundedAct struct {
	act    cu.DevicePtr
	n      int
	xs, xq cu.DevicePtr
}

// qxOther is the layout for in elements in the scratch that does not
// start at used (the xs of a rounding GEMV's own input): a GEMV that
// rounds its output writes one scratch while it reads the other.
func (b *Backend) qxOther(used cu.DevicePtr, in int) (xs, xq, ssp cu.DevicePtr) {
	if xs, xq, ssp = b.qxBuf(in); xs != used {
		return xs, xq, ssp
	}
	return b.qxLayout(&b.q.xq2, &b.q.xq2N, in)
}

// pendingAdd is a block-format MatMulAdd acc += t·x not yet launched, x
// rounded at xs/xq (Backend.qadd).
type pendingAdd struct {
	acc, xs, xq cu.DevicePtr
	in          int
	t           *tensor
}

// launchAdd launches the deferred MatMulAdd, if any, as it is.
func (b *Backend) launchAdd() {
	a := b.qadd
	b.qadd = pendingAdd{}
	b.launchAddAsIs(a)
}

// launchAddAsIs launches a (taken from the deferred MatMulAdd), if any, as
// it is: a plain add-mode qmv.
func (b *Backend) launchAddAsIs(a pendingAdd) {
	if a.t != nil {
		b.qmvLaunch(qmvAdd, a.xs, a.xq, a.xs, 0, 0, a.in, []cu.DevicePtr{a.acc}, []*tensor{a.t})
	}
}

// launchAddRound launches a, taken from the deferred MatMulAdd by the
// norm GEMV right after it, as qmv_add_q: the sum rounded times the norm
// weight nv into the scratch a does not read, for that GEMV (xs, xq, ssp
// with nss partial sums). ok false: a launched as it is (the switch, rows
// not whole blocks of 32, no warp count that fits).
func (b *Backend) launchAddRound(a pendingAdd, nv cu.DevicePtr) (xs, xq, ssp cu.DevicePtr, nss int, ok bool) {
	out := a.t.w.Rows()
	kind := qmvKind(qmvAdd, a.in, out)
	k := b.q.kern[b.q.plan[kind]]
	wpr := 0
	if switches.qmvAddQ && out%32 == 0 {
		wpr = addqWarps(k.g, a.in)
	}
	if wpr == 0 {
		b.launchAddAsIs(a)
		return 0, 0, 0, 0, false
	}
	xs, xq, ssp = b.qxOther(a.xs, out)
	f, threads := k.addq, 32*(32/k.g.rows)*wpr
	if switches.qmvPre2 && addqPre2(k.g, a.t.layout(), a.in, wpr) {
		f = b.q.addq2
	}
	if !ablatedAs("qmv_", kind) {
		b.runQ(f, out/32, threads, ptr(a.acc), ptr(a.xq), ptr(a.xs), i32(a.in), i32(wpr),
			i32(int(a.t.layout())), ptr(a.t.data), uint64(a.t.rowBytes()), i32(out), ptr(nv), ptr(xq), ptr(xs), ptr(ssp))
	}
	return xs, xq, ssp, out / 32, true
}

// SetSwiGLURound turns the rounding SwiGLU GEMV on or off (default on;
// POCKET_QMV_SWIQ=0 off), so that conformance can check it; it returns the
// previous setting.
func (b *Backend) SetSwiGLURound(on bool) (was bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	was, b.swiq = b.swiq, on
	return was
}

// runQ launches a quant_mmv.cuh kernel, with PDL unless switched off.
func (b *Backend) runQ(f cFunc, gx, bx int, args ...uint64) {
	b.launchFnPDL(f, gx, 1, bx, 0, args...)
}

// qx quantizes x (times the norm vector nw unless 0) into the scratch,
// with nss partial sums of squares at ssp.
func (b *Backend) qx(x, nw cu.DevicePtr, in int) (xs, xq, ssp cu.DevicePtr, nss int) {
	xs, xq, ssp = b.qxBuf(in)
	nss = cdiv(in/4, 256)
	if ablated("qx") && nw == 0 || ablated("qx_norm") && nw != 0 {
		return xs, xq, ssp, nss
	}
	b.runQ(b.q.qxn, nss, 256, ptr(xq), ptr(xs), ptr(ssp), ptr(x), ptr(nw), i32(in))
	return xs, xq, ssp, nss
}

// qxNorm is x·nw rounded for a norm GEMV: by the deferred MatMulAdd that
// writes x where the GEMV took one (launchAddRound), else by qx_norm.
func (b *Backend) qxNorm(a pendingAdd, x, nw cu.DevicePtr, in int) (xs, xq, ssp cu.DevicePtr, nss int) {
	if a.t != nil && a.t.w.Rows() == in {
		if xs, xq, ssp, nss, ok := b.launchAddRound(a, nw); ok {
			return xs, xq, ssp, nss
		}
	} else {
		b.launchAddAsIs(a)
	}
	return b.qx(x, nw, in)
}

// qmvBlock is the warps a row group (wpr) and a block of a qmv launch
// over groups row groups of in columns on this device's SMs: qmvBlockFor
// (qmv; w6 false: 8-warp blocks, as qmv_swiglu takes), unless
// POCKET_QMV_WPR forces wpr (an A/B hook: 1, 2, 4 or 8 where a warp keeps
// a step; 8-warp blocks).
func (b *Backend) qmvBlock(g qmvGeom, groups, in int, w6 bool) (wpr, warps int) {
	if w := switches.qmvWarps; w > 0 && 8%w == 0 && cdiv(in/256, 4) >= w {
		return w, 8
	}
	return qmvBlockFor(groups, in, g.occ, b.sms, !w6 || switches.noQmvW6)
}

// qmvLaunch computes ys[i] = ts[i]·x (mode plain, add or norm) for up to
// four weights with in columns from the quantized x, in one launch. (The
// LM head as resident blocks whose warps take row groups in turn, the next
// group's first step loaded right after the last one's, measured no
// faster than its dozen waves of blocks: Qwen3-8B Q4_K_M 596.5-598.8
// against 598.6-599.9 tok/s, Q8_0 445.5-445.6 against 445.1-445.3.)
func (b *Backend) qmvLaunch(mode int, xs, xq, ssp cu.DevicePtr, nss int, eps float32, in int, ys []cu.DevicePtr,
	ts []*tensor) {
	kind := qmvKind(mode, in, ts[0].w.Rows())
	k := b.q.kern[b.q.plan[kind]]
	rows := k.g.rows
	groups := 0
	for _, t := range ts {
		groups += cdiv(t.w.Rows(), rows)
	}
	wpr, warps := b.qmvBlock(k.g, groups, in, true)
	per := rows * (warps / wpr) // rows per block
	args := []uint64{ptr(xq), ptr(xs), ptr(ssp), i32(nss), f32(eps), i32(in), i32(wpr), i32(mode)}
	blocks := 0
	for i := range 4 {
		j := min(i, len(ts)-1)
		t := ts[j]
		out := t.w.Rows()
		if i >= len(ts) {
			out = 0
		}
		blocks += cdiv(out, per)
		args = append(args, ptr(ys[j]), ptr(t.data), uint64(t.rowBytes()), i32(out), i32(int(t.layout())))
		if i < 3 {
			args = append(args, i32(blocks))
		}
	}
	if ablatedAs("qmv_", kind) {
		return
	}
	b.runQ(k.mv, blocks, 32*warps, args...)
}

// quantGEMV1 is MatMul's one-row case on qmv (one quantize launch, one
// GEMV); it reports false for weights qmv cannot read.
func (b *Backend) quantGEMV1(y, x cu.DevicePtr, t *tensor) bool {
	in := t.w.Cols()
	if !b.qmvOn() {
		return false
	}
	if _, ok := qmvWeight(t, in); !ok {
		return false
	}
	xs, xq, ssp, nss := b.qx(x, 0, in)
	b.qmvLaunch(qmvPlain, xs, xq, ssp, nss, 0, in, []cu.DevicePtr{y}, []*tensor{t})
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
	tk, ok := b.enterNorm(dptr(x))
	if !ok {
		b.exit()
		return true
	}
	defer b.exit()
	if !b.qmvOn() {
		b.launchAddAsIs(tk.add)
		return false
	}
	xs, xq, ssp, nss := b.qxNorm(tk.add, dptr(x), nv, in)
	b.qmvLaunch(qmvNorm, xs, xq, ssp, nss, eps, in, ys, ts)
	return true
}

// quantNormSwiGLU is NormSwiGLU for block-format gate and up weights of
// one format.
func (b *Backend) quantNormSwiGLU(act, x kernels.Buf, nv cu.DevicePtr, eps float32, gate, up kernels.Tensor) bool {
	in := gate.Weight().Cols()
	g, ok1 := qmvWeight(gate, in)
	u, ok2 := qmvWeight(up, in)
	if !ok1 || !ok2 || g.layout() != u.layout() || g.rowBytes() != u.rowBytes() {
		return false
	}
	out := g.w.Rows()
	if u.w.Rows() != out || act.Len() < out {
		return false
	}
	tk, ok := b.enterNorm(dptr(x))
	if !ok {
		b.exit()
		return true
	}
	defer b.exit()
	if !b.qmvOn() {
		b.launchAddAsIs(tk.add)
		return false
	}
	xs, xq, ssp, nss := b.qxNorm(tk.add, dptr(x), nv, in)
	// A group is rows/2 gate and as many up rows: rows/2 outputs.
	k := b.q.kern[b.q.plan["swiglu"]]
	half := k.g.rows / 2
	wpr, _ := b.qmvBlock(k.g, cdiv(out, half), in, false)
	if ablated("qmv_swiglu") {
		return true
	}
	args := []uint64{ptr(dptr(act)), ptr(xq), ptr(xs), ptr(ssp), i32(nss), f32(eps), i32(in), i32(wpr),
		i32(int(g.layout())), ptr(g.data), ptr(u.data), uint64(g.rowBytes()), i32(out)}
	if p := swiqPasses(k.g.rows, wpr); b.swiq && p > 0 && out%32 == 0 {
		// 32 outputs a block, rounded for the op after (quantMatMulAdd).
		xs2, xq2, _ := b.qxOther(xs, out)
		f := k.swiq
		if g.regroup != nil {
			f = k.swiqG
		}
		if switches.qmvFlat && swiqFlat(g.layout(), wpr) {
			f = k.swiqF
		}
		b.runQ(f, out/32, 256, append(args, ptr(xq2), ptr(xs2))...)
		b.rounded = roundedAct{dptr(act), out, xs2, xq2}
		return true
	}
	b.runQ(k.swi, cdiv(out, half*8/wpr), 256, args...)
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
	tk, ok := b.enterTaking(dptr(x))
	d := tk.attn
	if !ok {
		b.exit()
		return true
	}
	defer b.exit()
	if !b.qmvOn() {
		b.mergeAttn(d)
		return false
	}
	var xs, xq cu.DevicePtr
	if r := tk.rounded; r.n == in && d.dst == 0 {
		// The SwiGLU GEMV before rounded x itself.
		xs, xq = r.xs, r.xq
	} else if d.pending.args != nil && d.hd == 128 && d.heads*128 == in {
		// The attention merges and rounds its output itself.
		xs, xq, _ = b.qxBuf(in)
		b.launchRounded(d, xq, xs)
	} else if d.dst != 0 && d.hd == 128 && d.heads*128 == in {
		// The deferred attention's merge and the rounding in one launch.
		xs, xq, _ = b.qxBuf(in)
		b.runQ(b.q.qxm, cdiv(d.heads, 8), 256, ptr(xq), ptr(xs), ptr(d.part), ptr(d.start), i32(d.heads),
			i32(d.splits), i32(d.minChunk))
	} else {
		b.mergeAttn(d)
		xs, xq, _, _ = b.qx(dptr(x), 0, in)
	}
	// Launched by the next op: as qmv_add_q where that norms acc
	// (launchAddRound), as it is otherwise (launchAdd). ssp is unused in
	// add mode.
	b.qadd = pendingAdd{acc: dptr(acc), xs: xs, xq: xq, in: in, t: t}
	return true
}

// QuantFused reports whether the FusedOps take Q4_K/Q6_K/Q8_0 weights (not
// with POCKET_QGEMV=exact or v1), so conformance knows which declines are
// expected.
func QuantFused() bool { return !switches.exactQGEMV && !switches.qgemvV1 }
