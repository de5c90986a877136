//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The ring-streamed GEMVs (gemvpipe.cuh, in the fp8mma module): one block
// per SM with a cp.async ring per warp. The one-row FP8 products the
// tensor-core kernels serve try them first and fall back to fp8mma's
// kernels where no geometry fits (planPipe) or POCKET_FP8_PIPE=0; the
// one-row bf16 products take them with POCKET_BF16_PIPE=1 and otherwise
// stay on the grouped kernels of decode.cu.

// Ops of the pipe kernels; each has a variant per ring depth of
// pipeStages, per weight format.
const (
	p8R = iota
	p8Add
	p8Norm
	p8SwiGLU
	numP8Ops
	numP8Funcs = numP8Ops * len(pipeStages)
)

var p8OpNames = [numP8Ops]string{"r", "add", "norm", "swiglu"}

// pipePrefixes are the kernel names' prefixes by format (pipeFmt).
var pipePrefixes = [2]string{"f8pipe", "b16pipe"}

// pipeFmt is the format index of f: 0 FP8, 1 bf16.
func pipeFmt(f gform) int {
	if f.fp8 {
		return 0
	}
	return 1
}

// pipeFuncs are a backend's pipe kernels by format and the dynamic shared
// memory each may take.
type pipeFuncs struct {
	fn     [2][numP8Funcs]cFunc
	budget int
}

// pipeStatic is the kernels' most static shared memory (ptxas: 2304 bytes
// FP8, 2176 bf16).
const pipeStatic = 2304

// loadPipe resolves the pipe kernels of the loaded fp8mma module and lets
// them take all the shared memory a block may (POCKET_FP8_PIPE_KB caps it).
// A format whose kernels fail to resolve is left unset: its products stay
// on the other kernels.
func (b *Backend) loadPipe(mod cu.Module) {
	b.pipe = pipeFuncs{}
	perSM, err := b.dev.Attribute(cu.MaxSharedMemoryPerMultiprocessor)
	if err != nil {
		return
	}
	// A block may take 227 KiB on sm_90; the SM keeps 1 KiB per block.
	budget := min(perSM-1024, 227*1024) - pipeStatic
	if switches.fp8PipeKB > 0 {
		budget = min(budget, switches.fp8PipeKB*1024)
	}
	b.pipe.budget = budget
	for fi, prefix := range pipePrefixes {
		var fns [numP8Funcs]cFunc
		ok := true
		for op, name := range p8OpNames {
			for i, s := range pipeStages {
				fn, err := mod.Function(fmt.Sprintf("%s_%s_%d", prefix, name, s))
				if err != nil {
					ok = false
					break
				}
				f := cfunc(fn)
				if setMaxShm(f, budget) != nil {
					ok = false
					break
				}
				fns[op*len(pipeStages)+i] = f
			}
		}
		if ok {
			b.pipe.fn[fi] = fns
		}
	}
}

// pipeFn is op's kernel of format fi for a ring of stages.
func (b *Backend) pipeFn(fi, op, stages int) cFunc {
	for i, s := range pipeStages {
		if s == stages {
			return b.pipe.fn[fi][op*len(pipeStages)+i]
		}
	}
	return nil
}

// pipeTakes reports whether the pipe kernels may run format f over ts: the
// format's switch is on and its kernels loaded, bf16 rows are whole
// 64-column units, and every matrix is under 4 GiB (the kernels' 32-bit
// offsets).
func (b *Backend) pipeTakes(f gform, ts ...*tensor) bool {
	if b.pipe.budget <= 0 || b.pipe.fn[pipeFmt(f)][0] == nil {
		return false
	}
	rowBytes := f.in
	if f.fp8 {
		if switches.noFP8Pipe {
			return false
		}
	} else {
		if !switches.bf16Pipe || f.in%64 != 0 {
			return false
		}
		rowBytes = 2 * f.in
	}
	for _, t := range ts {
		if t.w.Rows() <= 0 || int64(t.w.Rows())*int64(rowBytes) >= 1<<32 {
			return false
		}
	}
	return true
}

// pipePlan is the geometry of op over matrices of tiles[i] tiles for
// format f, or false where the pipe kernels decline (nothing fits).
func (b *Backend) pipePlan(op int, f gform, tiles ...int) (pipeGeom, cFunc, bool) {
	xs, units := pipeX(f.fp8, f.in)
	g, ok := planPipe(b.sms, b.pipe.budget, xs, units, tiles, switches.fp8PipeDeep)
	if !ok {
		return g, nil, false
	}
	fn := b.pipeFn(pipeFmt(f), op, g.stages)
	return g, fn, fn != nil
}

// runPipe launches fn over blocks with the geometry's shared memory (PDL
// as runDec).
func (b *Backend) runPipe(fn cFunc, g pipeGeom, blocks int, args ...uint64) {
	if b.err != nil || blocks <= 0 {
		return
	}
	b.a(args...)
	if switches.noPDL {
		b.fail(launchShm(fn, blocks, 1, 32*g.warps(), g.shm, b.s, &b.args, b.nargs))
		return
	}
	b.fail(launchPDLShm(fn, blocks, 1, 32*g.warps(), g.shm, b.s, &b.args, b.nargs))
}

// pipeGemv launches y = W·x (op p8R) or y += W·x (p8Add; y must not alias
// x) on the pipe kernels, or reports false. The caller holds the backend.
func (b *Backend) pipeGemv(op int, y, x uint64, t *tensor, f gform) bool {
	if !b.pipeTakes(f, t) {
		return false
	}
	out := t.w.Rows()
	tiles := cdiv(out, 16)
	g, fn, ok := b.pipePlan(op, f, tiles)
	if !ok {
		return false
	}
	b.runPipe(fn, g, g.blocks([]int{tiles}), y, x, ptr(t.data), ptr(t.scale), i32(out), i32(f.in), i32(g.wpr),
		i32(f.b0), i32(f.nsc))
	return true
}

// pipeNormMatMul is NormMatMul's product (checked by it: one row, formats
// alike, at most four matrices, dst long enough) on the pipe kernels, or
// false.
func (b *Backend) pipeNormMatMul(dst []kernels.Buf, x, nv uint64, eps float32, ws []kernels.Tensor, f gform) bool {
	ts := make([]*tensor, len(ws))
	tiles := make([]int, len(ws))
	dsts := make([]uint64, len(ws))
	for i, w := range ws {
		ts[i] = w.(*tensor)
		tiles[i] = cdiv(ts[i].w.Rows(), 16)
		dsts[i] = ptr(dptr(dst[i]))
	}
	if !b.pipeTakes(f, ts...) {
		return false
	}
	g, fn, ok := b.pipePlan(p8Norm, f, tiles...)
	if !ok {
		return false
	}
	args, blocks := normArgs([]uint64{x, nv, f32(eps), i32(f.in), i32(g.wpr), i32(f.b0), i32(f.nsc)}, dsts, ts, g.tiles)
	b.runPipe(fn, g, blocks, args...)
	return true
}

// pipeNormSwiGLU is NormSwiGLU's product (checked by it) on the pipe
// kernels, or false.
func (b *Backend) pipeNormSwiGLU(act, x, nv uint64, eps float32, gt, ut *tensor, f gform) bool {
	if !b.pipeTakes(f, gt, ut) {
		return false
	}
	out := gt.w.Rows()
	tiles := cdiv(out, 8)
	g, fn, ok := b.pipePlan(p8SwiGLU, f, tiles)
	if !ok {
		return false
	}
	b.runPipe(fn, g, g.blocks([]int{tiles}), act, x, nv, f32(eps), ptr(gt.data), ptr(gt.scale), ptr(ut.data),
		ptr(ut.scale), i32(out), i32(f.in), i32(g.wpr), i32(f.b0), i32(f.nsc))
	return true
}
