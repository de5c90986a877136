//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o fp8mma.ptx fp8mma.cu && gzip -n9f fp8mma.ptx"

import (
	_ "embed"
	"sync/atomic"

	"github.com/pocketllm/pocketllm/kernels"
)

// The tensor-core FP8 GEMVs (fp8mma.cu) run the one-row FP8 E4M3 products
// with 128-column scale blocks: NormMatMul, NormSwiGLU, MatMulAdd and the
// plain one-row MatMul try them first and fall back to the grouped kernels
// of decode.cu when they decline (POCKET_FP8_MMA=0 declines always).

//go:embed fp8mma.ptx.gz
var fp8mmaPTX []byte

// Kernel indices from dF8MMA in b.dec: each op has a variant for inputs of
// up to f8mmaSmall columns (16 KiB of shared memory) at +0 and one for up to
// f8mmaLarge at +1.
const (
	f8R      = 0
	f8Add    = 2
	f8Norm   = 4
	f8SwiGLU = 6
	numF8MMA = 8

	f8mmaSmall = 8192  // XS_S of fp8mma.cu
	f8mmaLarge = 24064 // XS_L
	f8mmaUnit  = 128   // columns per unit: the scale block width it takes
)

var f8mmaNames = [numF8MMA]string{"f8mma_r_s", "f8mma_r_l", "f8mma_add_s", "f8mma_add_l", "f8mma_norm_s",
	"f8mma_norm_l", "f8mma_swiglu_s", "f8mma_swiglu_l"}

// f8mmaOcc is each kernel's resident blocks per SM (the least over the
// devices loaded; 0 before any).
var f8mmaOcc [numF8MMA]atomic.Int32

// loadF8MMA loads the module into b.dec[dF8MMA:]. A failure leaves the
// kernels unset, and the FP8 products on the grouped kernels.
func (b *Backend) loadF8MMA() {
	fns := map[string]*cFunc{}
	for i, name := range f8mmaNames {
		fns[name] = &b.dec[dF8MMA+i]
	}
	mod, err := loadModule(fp8mmaPTX, "fp8mma", fns)
	if err != nil {
		for i := range numF8MMA {
			b.dec[dF8MMA+i] = nil
		}
		return
	}
	b.loadPipe(mod)
	for i, name := range f8mmaNames {
		occ := 1
		if fn, err := mod.Function(name); err == nil {
			if n, err := fn.MaxActiveBlocksPerMultiProcessor(256, 0); err == nil && n > 0 {
				occ = n
			}
		}
		for {
			old := f8mmaOcc[i].Load()
			if old != 0 && int(old) <= occ || f8mmaOcc[i].CompareAndSwap(old, int32(occ)) {
				break
			}
		}
	}
}

// f8mmaVariant is the kernel of op k for FP8 weights ws of format f, or
// false where the tensor-core kernels decline: scale blocks not 128
// columns wide, in % 64 != 0, an input wider than f8mmaLarge, a matrix of
// 4 GiB or more (32-bit offsets), the switch off or the module not loaded.
func (b *Backend) f8mmaVariant(k int, f gform, ws ...*tensor) (int, bool) {
	if switches.fp8MMA == 0 || !f.fp8 || f.b1 != f8mmaUnit || f.b0 <= 0 || f.in%64 != 0 || f.in <= 0 ||
		f.nsc != cdiv(f.in, f8mmaUnit) {
		return 0, false
	}
	pad := cdiv(f.in, f8mmaUnit) * f8mmaUnit
	v := dF8MMA + k
	switch {
	case pad <= f8mmaSmall:
	case pad <= f8mmaLarge:
		v++
	default:
		return 0, false
	}
	for _, t := range ws {
		if int64(t.w.Rows())*int64(f.in) >= 1<<32 || t.w.Rows() <= 0 {
			return 0, false
		}
	}
	return v, b.dec[v] != nil
}

// f8mmaWarps picks the warps per tile (wpr; 8/wpr tiles per 256-thread
// block) of kernel v over matrices of tiles[i] tiles with units 128-column
// units per row. When every block at wpr = 1 can be resident at once, the
// most warps whose blocks still are: one wave of equal blocks, all
// finishing together, with as many loads in flight as fit. Otherwise small
// blocks, at least four per resident slot, so that the last wave is short.
// Each warp keeps at least four units. POCKET_FP8_MMA=1|2|4|8 forces wpr.
func (b *Backend) f8mmaWarps(v, units int, tiles ...int) int {
	if w := switches.fp8MMA; w == 1 || w == 2 || w == 4 || w == 8 {
		return w
	}
	blocks := func(wpr int) int {
		n := 0
		for _, t := range tiles {
			n += cdiv(t, 8/wpr)
		}
		return n
	}
	slots := max(int(f8mmaOcc[v-dF8MMA].Load()), 1) * b.sms
	wpr := 1
	if blocks(1) <= slots {
		for wpr < 8 && blocks(2*wpr) <= slots && units >= 2*wpr*4 {
			wpr *= 2
		}
		return wpr
	}
	for wpr < 8 && blocks(wpr) < 4*slots && units >= 2*wpr*4 {
		wpr *= 2
	}
	return wpr
}

// f8mmaGemv launches y = W·x (k = f8R) or y += W·x (f8Add; y must not
// alias x) for one row on the tensor-core kernels and reports whether it
// did. The caller holds the backend (enter).
func (b *Backend) f8mmaGemv(k int, y, x uint64, t *tensor) bool {
	f, ok := formOf(t.w.Cols(), t)
	if !ok {
		return false
	}
	v, ok := b.f8mmaVariant(k, f, t)
	if !ok {
		return false
	}
	if b.pipeGemv(k, y, x, t, f) {
		return true
	}
	out := t.w.Rows()
	tiles := cdiv(out, 16)
	wpr := b.f8mmaWarps(v, cdiv(f.in, f8mmaUnit), tiles)
	b.runDec(v, cdiv(tiles, 8/wpr), 1, 256, y, x, ptr(t.data), ptr(t.scale), i32(out), i32(f.in), i32(wpr), i32(f.b0),
		i32(f.nsc))
	return true
}

// f8mmaNormMatMul is NormMatMul (checked by it: one row, formats alike,
// dst long enough) on the tensor-core kernels, or false.
func (b *Backend) f8mmaNormMatMul(dst []kernels.Buf, x uint64, nv uint64, eps float32, ws []kernels.Tensor,
	f gform) bool {
	ts := make([]*tensor, len(ws))
	tiles := make([]int, len(ws))
	for i, w := range ws {
		ts[i] = w.(*tensor)
		tiles[i] = cdiv(ts[i].w.Rows(), 16)
	}
	v, ok := b.f8mmaVariant(f8Norm, f, ts...)
	if !ok || len(ws) > 4 {
		return false
	}
	dsts := make([]uint64, len(ws))
	for i := range ws {
		dsts[i] = ptr(dptr(dst[i]))
	}
	if b.pipeNormMatMul(dsts, x, nv, eps, ts, f) {
		return true
	}
	wpr := b.f8mmaWarps(v, cdiv(f.in, f8mmaUnit), tiles...)
	args, blocks := normArgs([]uint64{x, nv, f32(eps), i32(f.in), i32(wpr), i32(f.b0), i32(f.nsc)}, dsts, ts, 8/wpr,
		func(t *tensor) uint64 { return ptr(t.data) })
	b.runDec(v, blocks, 1, 256, args...)
	return true
}

// normArgs appends the four (y, weight, scales, rows[, end block]) groups
// of a NormMatMul launch over ts to args (dst their outputs; past len(ts)
// a matrix of no rows; weight gives the address the kernel reads a matrix
// at: its rows, or fp8tiles.go's tiled copy), each matrix taking its tiles
// over perBlock tiles a block, and returns them with the grid.
func normArgs(args, dst []uint64, ts []*tensor, perBlock int, weight func(*tensor) uint64) ([]uint64, int) {
	blocks := 0
	for i := range 4 {
		j := min(i, len(ts)-1)
		out := ts[j].w.Rows()
		if i >= len(ts) {
			out = 0
		}
		blocks += cdiv(cdiv(out, 16), perBlock)
		args = append(args, dst[j], weight(ts[j]), ptr(ts[j].scale), i32(out))
		if i < 3 {
			args = append(args, i32(blocks))
		}
	}
	return args, blocks
}

// f8mmaNormSwiGLU is NormSwiGLU (checked by it) on the tensor-core
// kernels, or false.
func (b *Backend) f8mmaNormSwiGLU(act, x, nv uint64, eps float32, g, u *tensor, f gform) bool {
	v, ok := b.f8mmaVariant(f8SwiGLU, f, g, u)
	if !ok {
		return false
	}
	if b.pipeNormSwiGLU(act, x, nv, eps, g, u, f) {
		return true
	}
	out := g.w.Rows()
	tiles := cdiv(out, 8)
	wpr := b.f8mmaWarps(v, cdiv(f.in, f8mmaUnit), tiles)
	b.runDec(v, cdiv(tiles, 8/wpr), 1, 256, act, x, nv, f32(eps), ptr(g.data), ptr(g.scale), ptr(u.data),
		ptr(u.scale), i32(out), i32(f.in), i32(wpr), i32(f.b0), i32(f.nsc))
	return true
}
