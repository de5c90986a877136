//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o moe.ptx moe.cu && gzip -n9f moe.ptx"

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// kernels.MoEOps on the GPU (kernels in moe.cu). Routing runs on the
// device; the experts' weights stay where LoadWeight put them and are
// reached through a per-layer table of device pointers indexed by the
// routed ids, so:
//   - up to moeGEMVRows rows (decode): two launches, gate+up+SwiGLU for
//     every (row, slot) and down with the weighted sum over the slots; no
//     host read, so the step can be captured as a graph. One row of FP8
//     experts takes the ring kernels of fp8pipe_moe.cuh (fp8pipe.go's
//     pipeMoE), where the widths allow;
//   - more rows (prefill): the routing is read back once per layer and the
//     rows are grouped by expert as host routing does (Gather, the usual
//     MatMuls, ScatterAdd), which reads each chosen expert once.
//
// bf16, FP8 block-scaled and GGUF block-format experts are covered (the
// GGUF kernels in a module of their own: moe_quant.go); other formats get
// ErrUnsupported from NewExperts and the model keeps host routing. The
// module is loaded on first use, so dense models never JIT it.

//go:embed moe.ptx.gz
var moePTX []byte

// moeGEMVRows is the most rows that take the indexed GEMV path: each row
// reads its K experts' weights, which beats grouping (a host round trip
// and five launches per expert) while rows×K stays near the expert count.
const moeGEMVRows = 16

// Limits of moe_route's shared arrays.
const (
	moeMaxExperts = 1024
	moeMaxGroups  = 64
	moeMaxTopK    = 32
)

type moeMod struct {
	route, addGated      cFunc
	routeW               [5]cFunc // moe_route_w2 .. w32: one warp per row, 32·2^i experts at most
	gateupBF16, downBF16 cFunc
	gateupFP8, downFP8   cFunc
	quant                map[kernels.DType]*moeQuantFns // GGUF kernels (moe_quant.go), nil until loaded
	h                    cu.DevicePtr                   // [rows, K, inter] SwiGLU outputs of the GEMV path
	hN                   int64
	grouped              [4]kernels.Buf // xin, gate, up, xout of the grouped path
}

// moeModule loads the MoE kernels once (context current).
func (b *Backend) moeModule() (*moeMod, error) {
	if b.moe != nil {
		return b.moe, nil
	}
	m := &moeMod{}
	fns := map[string]*cFunc{"moe_route": &m.route, "moe_add_gated": &m.addGated,
		"moe_gateup_bf16": &m.gateupBF16, "moe_down_bf16": &m.downBF16, "moe_gateup_fp8": &m.gateupFP8,
		"moe_down_fp8": &m.downFP8}
	for i := range m.routeW {
		fns[fmt.Sprintf("moe_route_w%d", 2<<i)] = &m.routeW[i]
	}
	if _, err := loadModule(moePTX, "MoE", fns); err != nil {
		return nil, err
	}
	b.moe = m
	return m, nil
}

// expertSet is one MoE layer on the device.
type expertSet struct {
	r              kernels.Router
	gate, up, down []kernels.Tensor
	hidden, inter  int
	dt             kernels.DType // of gate and up; down's too unless GGUF
	// FP8 scale blocks of gate/up and of down. They differ on a
	// tensor-parallel rank whose slice of the intermediate width cuts the
	// checkpoint's blocks (GLM-4.5-Air's 1408 over 4 ranks: gate/up
	// re-blocked to [32, 128] by the row split, down to [128, 32] by the
	// column split, models/tp_slice.go).
	guBlock, dnBlock [2]int
	q                moeQuantFns  // GGUF: gate/up's format's gateup, down's format's down
	rbGU, rbDown     int          // GGUF: bytes per gate/up row and per down row
	bias             cu.DevicePtr // e_score_correction_bias, or 0
	// ptrs holds 6×Experts device addresses: gate, up and down weights,
	// then their FP8 scales (0 for bf16).
	ptrs cu.DevicePtr
}

func (s *expertSet) Router() *kernels.Router { return &s.r }

func (s *expertSet) table(i int) uint64 { return ptr(s.ptrs) + uint64(i*s.r.Experts*8) }

// moeFormat returns why the indexed kernels cannot run these experts ("":
// they can): moe_route's limits, one format for all gate and up matrices
// and one for all down matrices, then either GGUF blocks (moeQuantFormat;
// down may differ from gate/up) or one dtype for all three, bf16 or FP8
// with 16-aligned scale blocks (gate/up's and down's may differ), with widths
// the 16-byte loads divide.
func moeFormat(r *kernels.Router, gate, up, down []kernels.Tensor, hidden, inter int) string {
	switch {
	case r.Experts > moeMaxExperts || r.TopK > moeMaxTopK:
		return fmt.Sprintf("top %d of %d experts", r.TopK, r.Experts)
	case r.Grouped() && r.Groups > moeMaxGroups:
		return fmt.Sprintf("%d expert groups", r.Groups)
	}
	gu, dn := gate[0].Weight(), down[0].Weight()
	same := func(ws []kernels.Tensor, w0 *kernels.Weight) bool {
		for _, t := range ws {
			if w := t.Weight(); w.DType != w0.DType || w.ScaleBlock != w0.ScaleBlock {
				return false
			}
		}
		return true
	}
	if !same(gate, gu) || !same(up, gu) || !same(down, dn) {
		return "experts in mixed formats"
	}
	if isQuant(gu.DType) || isQuant(dn.DType) {
		return moeQuantFormat(gu.DType, dn.DType)
	}
	if dn.DType != gu.DType {
		return "experts in mixed formats"
	}
	switch gu.DType {
	case kernels.BF16:
		if hidden%8 != 0 || inter%8 != 0 {
			return fmt.Sprintf("bf16 widths %d/%d not multiples of 8", hidden, inter)
		}
	case kernels.F8E4M3:
		if hidden%16 != 0 || inter%16 != 0 || gu.ScaleBlock[1]%16 != 0 || dn.ScaleBlock[1]%16 != 0 {
			return fmt.Sprintf("FP8 widths %d/%d or scale blocks %v/%v not multiples of 16", hidden, inter,
				gu.ScaleBlock, dn.ScaleBlock)
		}
	default:
		return gu.DType.String() + " experts"
	}
	return ""
}

// NewExperts implements kernels.MoEOps.
func (b *Backend) NewExperts(r *kernels.Router, gate, up, down []kernels.Tensor) (kernels.ExpertSet, error) {
	hidden, inter, err := kernels.ExpertShapes(r, gate, up, down)
	if err != nil {
		return nil, err
	}
	if why := moeFormat(r, gate, up, down, hidden, inter); why != "" {
		return nil, fmt.Errorf("cuda: MoE: %s: %w", why, kernels.ErrUnsupported)
	}
	all := slices.Concat(gate, up, down)
	tbl := make([]uint64, 6*r.Experts)
	for i, t := range all {
		d, ok := t.(*tensor)
		if !ok {
			return nil, fmt.Errorf("cuda: MoE: expert weight %T not loaded by this backend", t)
		}
		tbl[i], tbl[len(all)+i] = ptr(d.data), ptr(d.scale)
	}
	if !b.enter() {
		b.exit()
		return nil, b.err
	}
	defer b.exit()
	if b.cap != nil {
		return nil, errors.New("cuda: NewExperts during graph capture")
	}
	m, err := b.moeModule()
	if err != nil {
		return nil, err
	}
	for _, ws := range [][]kernels.Tensor{gate, up, down} {
		for _, w := range ws {
			w.(*tensor).expert = true // fp8pipe_moe.cuh reads their rows: no tiled copies
		}
	}
	w0, wd := gate[0].Weight(), down[0].Weight()
	s := &expertSet{r: *r, gate: gate, up: up, down: down, hidden: hidden, inter: inter, dt: w0.DType,
		guBlock: w0.ScaleBlock, dnBlock: wd.ScaleBlock}
	if isQuant(w0.DType) {
		fns, err := b.moeQuantModule(m)
		if err != nil {
			return nil, err
		}
		s.q = moeQuantFns{gateup: fns[gate[0].(*tensor).layout()].gateup, down: fns[down[0].(*tensor).layout()].down}
		s.rbGU, s.rbDown = gate[0].(*tensor).rowBytes(), down[0].(*tensor).rowBytes()
	}
	s.r.Bias = slices.Clone(r.Bias)
	s.ptrs = b.upload(unsafe.Pointer(&tbl[0]), int64(len(tbl))*8)
	if s.r.Bias != nil {
		s.bias = b.upload(unsafe.Pointer(&s.r.Bias[0]), int64(len(s.r.Bias))*4)
	}
	if b.err != nil {
		return nil, fmt.Errorf("cuda: MoE tables: %w", b.err)
	}
	return s, nil
}

// moeEnter is enter plus the module and the set's type (nil, false: the
// op does nothing; the caller still exits).
func (b *Backend) moeEnter(set kernels.ExpertSet) (*moeMod, *expertSet, bool) {
	if !b.enter() {
		return nil, nil, false
	}
	m, err := b.moeModule()
	if err != nil {
		b.fail(err)
		return nil, nil, false
	}
	s, ok := set.(*expertSet)
	if set != nil && !ok {
		b.fail(fmt.Errorf("cuda: MoE op on a %T", set))
		return nil, nil, false
	}
	return m, s, true
}

func bit(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// MoERoute implements kernels.MoEOps: one warp per row (moe_route_w*, on
// PDL) for up to 1024 experts, else (or POCKET_MOE_ROUTE=block) one block
// per row.
func (b *Backend) MoERoute(set kernels.ExpertSet, sel, logits kernels.Buf, rows int) {
	defer b.exit()
	m, s, ok := b.moeEnter(set)
	if !ok || s == nil || ablated("moe_route") {
		return
	}
	r := &s.r
	groups, topkGroup := 0, 0
	if r.Grouped() {
		groups, topkGroup = r.Groups, r.TopKGrp
	}
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	args := []uint64{ptr(dptr(sel)), ptr(dptr(logits)), ptr(s.bias), i32(r.Experts), i32(r.TopK), bit(r.Sigmoid),
		bit(r.NormTopK), i32(groups), i32(topkGroup), f32(scale)}
	for i, fn := range m.routeW {
		if switches.moeRouteBlock || r.Experts > 32*(2<<i) {
			continue
		}
		b.launchFnPDL(fn, rows, 1, 32, 0, args...)
		return
	}
	b.launchFn(m.route, rows, 1, 256, args...)
}

// MoEExperts implements kernels.MoEOps.
func (b *Backend) MoEExperts(set kernels.ExpertSet, dst, x, sel kernels.Buf, rows int) {
	if rows > moeGEMVRows {
		b.moeGrouped(set, dst, x, sel, rows)
		return
	}
	defer b.exit()
	m, s, ok := b.moeEnter(set)
	if !ok || s == nil {
		return
	}
	k, e, hid, inter := s.r.TopK, s.r.Experts, s.hidden, s.inter
	h := ptr(b.scratch(&m.h, &m.hN, int64(rows*k*inter)*4)) // SwiGLU outputs [rows, K, inter]
	y, xp, sp := ptr(dptr(dst)), ptr(dptr(x)), ptr(dptr(sel))
	switch s.dt {
	case kernels.BF16:
		b.launchFn(m.gateupBF16, cdiv(inter, 8), rows*k, 256, h, xp, sp, s.table(0), s.table(1), i32(inter), i32(hid), i32(k), i32(e))
		b.launchFn(m.downBF16, cdiv(hid, 8), rows, 256, y, h, sp, s.table(2), i32(hid), i32(inter), i32(k), i32(e))
	case kernels.F8E4M3:
		if rows == 1 && b.pipeMoE(s, y, h, xp, sp, 0, 0, false) {
			return
		}
		b.launchFn(m.gateupFP8, cdiv(inter, 8), rows*k, 256, h, xp, sp, s.table(0), s.table(1), s.table(3), s.table(4),
			i32(inter), i32(hid), i32(k), i32(e), i32(s.guBlock[0]), i32(s.guBlock[1]), i32(cdiv(hid, s.guBlock[1])))
		b.launchFn(m.downFP8, cdiv(hid, 8), rows, 256, y, h, sp, s.table(2), s.table(5), i32(hid), i32(inter), i32(k), i32(e),
			i32(s.dnBlock[0]), i32(s.dnBlock[1]), i32(cdiv(inter, s.dnBlock[1])))
	default: // GGUF blocks (moe_quant.go)
		b.moeQuantExperts(s, y, h, xp, sp, rows)
	}
}

var _ kernels.MoEFusedOps = (*Backend)(nil)

// MoEExpertsNorm implements kernels.MoEFusedOps on the FP8 ring kernels
// (pipeMoE): the gate/up kernel norms x as it stages it, the down kernel
// writes or adds into dst. Other formats decline.
func (b *Backend) MoEExpertsNorm(set kernels.ExpertSet, dst, x kernels.Buf, norm kernels.Tensor, eps float32,
	sel kernels.Buf, add bool) bool {
	s, ok := set.(*expertSet)
	if !ok || s.dt != kernels.F8E4M3 || x.Len() < s.hidden || dst.Len() < s.hidden ||
		sel.Len() < kernels.RouteLen(1, s.r.TopK) || !add && dptr(dst) == dptr(x) {
		return false
	}
	nv := normVec(norm, s.hidden)
	if nv == 0 {
		return false
	}
	defer b.exit()
	m, _, ok := b.moeEnter(set)
	if !ok {
		return true // the backend has failed: the step reports it
	}
	h := ptr(b.scratch(&m.h, &m.hN, int64(s.r.TopK*s.inter)*4))
	return b.pipeMoE(s, ptr(dptr(dst)), h, ptr(dptr(x)), ptr(dptr(sel)), ptr(nv), eps, add)
}

// moeGrouped is MoEExperts for many rows: the routing comes back to the
// host once and each chosen expert runs over its rows as host routing
// would run it. It cannot be captured.
func (b *Backend) moeGrouped(set kernels.ExpertSet, dst, x, sel kernels.Buf, rows int) {
	m, s, ok := b.moeEnter(set)
	if ok && b.cap != nil {
		b.cap.err = fmt.Errorf("cuda: MoE over %d rows during graph capture: %w", rows, kernels.ErrUnsupported)
		ok = false
	}
	if !ok || s == nil {
		b.exit()
		return
	}
	k, e, hid, inter := s.r.TopK, s.r.Experts, s.hidden, s.inter
	b.fail(cu.MemsetD32Async(dptr(dst), 0, int64(rows*hid), b.stream))
	b.exit()
	route := make([]float32, kernels.RouteLen(rows, k))
	b.Read(sel, 0, route)
	perRow, perW, most := kernels.ExpertRows(route, rows, k, e)
	buf := func(i, n int) kernels.Buf {
		if m.grouped[i] == nil || m.grouped[i].Len() < n {
			m.grouped[i] = b.NewBuf(n)
		}
		return m.grouped[i]
	}
	xin, g, u, xout := buf(0, most*hid), buf(1, most*inter), buf(2, most*inter), buf(3, most*hid)
	kernels.RunExperts(b, dst, x, perRow, perW, s.gate, s.up, s.down, hid, inter, xin, g, u, xout)
}

// MoEAddGated implements kernels.MoEOps.
func (b *Backend) MoEAddGated(dst, src, gate kernels.Buf, rows, dim int) {
	defer b.exit()
	m, _, ok := b.moeEnter(nil)
	if !ok {
		return
	}
	b.launchFn(m.addGated, cdiv(rows*dim, 256), 1, 256, ptr(dptr(dst)), ptr(dptr(src)), ptr(dptr(gate)), i32(rows), i32(dim))
}
