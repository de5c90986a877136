//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"
)

// The ring-streamed FP8 GEMVs (fp8pipe.cuh, in the fp8mma module): the
// one-row products the tensor-core kernels serve try these first, one
// block per SM with a cp.async ring per warp, and fall back to fp8mma's
// kernels where no geometry fits (planPipe) or POCKET_FP8_PIPE=0.
//
// (A bf16 variant — the same ring, mma.sync on bf16 weights with the
// activation split into two bf16 parts — was measured on an H200 against
// the grouped CUDA-core kernels of decode.cu and dropped: Llama-3-8B
// decode 241.1 against 247.0 tok/s, TP2 340.6 against 347.5; per kernel
// in ncu equal on gate/up, 13.8 against 12.5 µs on the output projections.)

// Ops of the pipe kernels; each has a variant per ring depth of pipeStages.
const (
	p8R = iota
	p8Add
	p8Norm
	p8SwiGLU
	p8MoESwiGLU // fp8pipe_moe.cuh
	p8MoEDown
	numP8Ops
	numP8Funcs = numP8Ops * len(pipeStages)
)

var p8OpNames = [numP8Ops]string{"r", "add", "norm", "swiglu", "moe_swiglu", "moe_down"}

// pipeFuncs are a backend's pipe kernels and the dynamic shared memory each
// may take.
type pipeFuncs struct {
	fn     [numP8Funcs]cFunc
	budget int
	tile   cFunc // fp8_tile16 (fp8tiles.go)
}

// loadPipe resolves the pipe kernels of the loaded fp8mma module and lets
// them take all the shared memory a block may (POCKET_FP8_PIPE_KB caps it).
// A failure leaves them unset: the products stay on fp8mma's kernels.
//
// The budget is what a block may take less the kernels' largest static
// shared memory (ptxas: 256 bytes, the activation prologue's; the warps'
// row sums reuse their rings, pipeRed), read from the kernels rather than
// assumed: a kernel whose static memory grew past an assumed 256 bytes
// made setMaxShm fail, and every FP8 GEMV fell back to fp8mma's kernels
// (Qwen3.5-27B 118 tok/s instead of 135) with only the MoE conformance
// cases, which have no fallback, to show it.
func (b *Backend) loadPipe(mod cu.Module) {
	b.pipe = pipeFuncs{}
	perSM, err := b.dev.Attribute(cu.MaxSharedMemoryPerMultiprocessor)
	if err != nil {
		return
	}
	var fns [numP8Funcs]cFunc
	static := 0
	for op, name := range p8OpNames {
		for i, s := range pipeStages {
			fn, err := mod.Function(fmt.Sprintf("f8pipe_%s_%d", name, s))
			if err != nil {
				return
			}
			st, err := fn.Attribute(cu.SharedSizeBytes)
			if err != nil {
				return
			}
			static = max(static, st)
			f := cfunc(fn)
			probeName(f, fmt.Sprintf("f8pipe_%s_%d", name, s))
			fns[op*len(pipeStages)+i] = f
		}
	}
	// A block may take 227 KiB on sm_90; the SM keeps 1 KiB per block.
	budget := min(perSM-1024, 227*1024) - static
	if switches.fp8PipeKB > 0 {
		budget = min(budget, switches.fp8PipeKB*1024)
	}
	for _, f := range fns {
		if setMaxShm(f, budget) != nil {
			return
		}
	}
	tile, err := mod.Function("fp8_tile16")
	if err != nil {
		return
	}
	b.pipe = pipeFuncs{fn: fns, budget: budget, tile: cfunc(tile)}
}

// FP8Rings describes the one-row FP8 GEMV path: the ring kernels and the
// shared memory a block of them may take, or why they are not in use; ok
// is false when they failed to load beside a loaded fp8mma module (not
// switched off, not a device without it), which leaves every FP8 product
// on fp8mma's kernels, ~13% slower on Qwen3.5-27B, without an error
// anywhere else.
func (b *Backend) FP8Rings() (desc string, ok bool) {
	switch {
	case b.dec[dF8MMA] == nil:
		return "no fp8mma module on this device: the grouped CUDA-core kernels", true
	case switches.noFP8Pipe:
		return "off (POCKET_FP8_PIPE=0): fp8mma's kernels", true
	case b.pipe.budget <= 0:
		return "not loaded: fp8mma's kernels", false
	}
	return fmt.Sprintf("ring kernels, %d bytes of shared memory a block", b.pipe.budget), true
}

// pipeFn is op's kernel for a ring of stages.
func (b *Backend) pipeFn(op, stages int) cFunc {
	for i, s := range pipeStages {
		if s == stages {
			return b.pipe.fn[op*len(pipeStages)+i]
		}
	}
	return nil
}

// pipePlan is the geometry of op over matrices of tiles[i] tiles for
// format f, or false where the pipe kernels decline (switch off, not
// loaded, nothing fits).
func (b *Backend) pipePlan(op int, f gform, tiles ...int) (pipeGeom, cFunc, bool) {
	if switches.noFP8Pipe || b.pipe.budget <= 0 {
		return pipeGeom{}, nil, false
	}
	g, ok := planPipe(b.sms, b.pipe.budget, f.in, cdiv(f.in, f8mmaUnit), tiles, switches.fp8PipeDeep)
	// (The key only built where the switch is set: this runs on every
	// eager decode step's GEMVs.)
	if w, set := switches.pipeGeom[pipeGeomKey(op, f.in)]; set {
		w.shm = cdiv(f.in, 128)*128*2 + pipeFacBytes(f.in) + w.warps()*w.stages*pipeStageBytes
		g, ok = w, w.wpr > 0 && w.tiles > 0 && w.warps() <= pipeMaxWarps && w.shm <= b.pipe.budget
	}
	if !ok {
		return g, nil, false
	}
	fn := b.pipeFn(op, g.stages)
	return g, fn, fn != nil
}

// pipeGeomKey is op's POCKET_FP8_PIPE_GEOM entry for in columns, or ""
// where the switch is not set.
func pipeGeomKey(op, in int) string {
	if len(switches.pipeGeom) == 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d", p8OpNames[op], in)
}

// runPipe launches fn over blocks with the geometry's shared memory (PDL
// as runDec).
func (b *Backend) runPipe(op int, fn cFunc, g pipeGeom, blocks int, args ...uint64) {
	if ablatedAs("f8pipe_", p8OpNames[op]) {
		return
	}
	b.launchFnPDL(fn, blocks, 1, 32*g.warps(), g.shm, args...)
}

// pipeGemv is f8mmaGemv's product (k = f8R or f8Add) on the pipe kernels,
// or false.
func (b *Backend) pipeGemv(k int, y, x uint64, t *tensor, f gform) bool {
	op := p8R
	if k == f8Add {
		op = p8Add
	}
	out := t.w.Rows()
	tiles := cdiv(out, 16)
	g, fn, ok := b.pipePlan(op, f, tiles)
	if !ok {
		return false
	}
	w, lay := t.pipeWeight()
	b.runPipe(op, fn, g, g.blocks([]int{tiles}), y, x, w, ptr(t.scale), i32(out), i32(f.in), i32(g.wpr),
		i32(f.b0), i32(f.nsc), lay)
	return true
}

// pipeNormMatMul is f8mmaNormMatMul's product on the pipe kernels, or
// false.
func (b *Backend) pipeNormMatMul(dst []uint64, x, nv uint64, eps float32, ts []*tensor, f gform) bool {
	tiles := make([]int, len(ts))
	for i, t := range ts {
		tiles[i] = cdiv(t.w.Rows(), 16)
	}
	g, fn, ok := b.pipePlan(p8Norm, f, tiles...)
	if !ok {
		return false
	}
	// Each matrix from its tiled copy where it has one (bit i of lay).
	var lay uint64
	for i, t := range ts {
		if _, tiled := t.pipeWeight(); tiled == 1 {
			lay |= 1 << i
		}
	}
	args, blocks := normArgs([]uint64{x, nv, f32(eps), i32(f.in), i32(g.wpr), i32(f.b0), i32(f.nsc)}, dst, ts, g.tiles,
		func(t *tensor) uint64 { w, _ := t.pipeWeight(); return w })
	b.runPipe(p8Norm, fn, g, blocks, append(args, lay)...)
	return true
}

// pipeNormSwiGLU is f8mmaNormSwiGLU's product on the pipe kernels, or
// false.
func (b *Backend) pipeNormSwiGLU(act, x, nv uint64, eps float32, gt, ut *tensor, f gform) bool {
	out := gt.w.Rows()
	tiles := cdiv(out, 8)
	g, fn, ok := b.pipePlan(p8SwiGLU, f, tiles)
	if !ok {
		return false
	}
	// Tiled only when both are (the kernel reads the pair one way).
	wg, wu, lay := ptr(gt.data), ptr(ut.data), uint64(0)
	if gt.tiled != 0 && ut.tiled != 0 {
		wg, wu, lay = ptr(gt.tiled), ptr(ut.tiled), 3
	}
	b.runPipe(p8SwiGLU, fn, g, g.blocks([]int{tiles}), act, x, nv, f32(eps), wg, ptr(gt.scale), wu,
		ptr(ut.scale), i32(out), i32(f.in), i32(g.wpr), i32(f.b0), i32(f.nsc), lay)
	return true
}

// pipeMoE runs MoEExperts for one row of FP8 experts on the ring kernels
// (fp8pipe_moe.cuh): h = the K slots' SwiGLU outputs of x (through the
// RMSNorm of weight vector nv unless it is 0), y = their routed sum (add:
// y +=). False, having launched nothing, where they decline: the switch,
// more than 32 slots, widths not whole 128-column units, scale blocks not
// 128 columns wide, or no geometry that fits.
func (b *Backend) pipeMoE(s *expertSet, y, h, x, sel, nv uint64, eps float32, add bool) bool {
	k, hid, inter := s.r.TopK, s.hidden, s.inter
	if switches.noMoEPipe || s.guBlock[1] != f8mmaUnit || s.dnBlock[1] != f8mmaUnit || s.guBlock[0] <= 0 || s.dnBlock[0] <= 0 {
		return false
	}
	gu, dn, ok := planPipeMoE(b.sms, b.pipe.budget, k, hid, inter, switches.fp8PipeDeep)
	if !ok {
		return false
	}
	gTiles, dTiles := []int{k * inter / 8}, []int{hid / 16}
	fg, fd := b.pipeFn(p8MoESwiGLU, gu.stages), b.pipeFn(p8MoEDown, dn.stages)
	if fg == nil || fd == nil {
		return false
	}
	e := i32(s.r.Experts)
	b.runPipe(p8MoESwiGLU, fg, gu, gu.blocks(gTiles), h, x, nv, f32(eps), sel, s.table(0), s.table(1), s.table(3),
		s.table(4), i32(inter), i32(hid), i32(k), e, i32(gu.wpr), i32(s.guBlock[0]), i32(hid/f8mmaUnit))
	b.runPipe(p8MoEDown, fd, dn, dn.blocks(dTiles), y, h, sel, s.table(2), s.table(5), i32(hid), i32(inter), i32(k), e,
		i32(dn.wpr), i32(s.dnBlock[0]), i32(inter/f8mmaUnit), bit(add))
	return true
}
