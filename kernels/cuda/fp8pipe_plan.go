package cuda

// pipeGeom is the launch geometry of the ring-streamed FP8 GEMVs
// (fp8pipe.cuh): wpr warps per 16-row tile (they split its 128-column
// units), tiles per block, ring stages per warp, and the dynamic shared
// memory a block takes.
type pipeGeom struct {
	wpr, tiles, stages, shm int
}

// warps is the block's warp count.
func (g pipeGeom) warps() int { return g.wpr * g.tiles }

// blocks is the grid over matrices of tiles[i] tiles each (a block never
// holds tiles of two matrices).
func (g pipeGeom) blocks(tiles []int) int {
	n := 0
	for _, t := range tiles {
		n += cdiv(t, g.tiles)
	}
	return n
}

// pipeStages are the ring depths fp8pipe.cuh is compiled for, deepest
// first; pipeStageBytes is one stage of one warp (PIPE_STAGE).
var pipeStages = [...]int{8, 6, 4, 3}

const pipeStageBytes = 2048

// pipeMaxWarps is a block's most warps (the kernels' __launch_bounds__(768)).
const pipeMaxWarps = 24

// planPipe picks the geometry for matrices of tiles[i] tiles, units
// 128-column units per row and in columns, on sms SMs with budget bytes of
// dynamic shared memory per block. A block gets as many tiles as make the
// grid one block per SM (so the whole product is one wave), and among the
// warps-per-tile that keep a block within pipeMaxWarps and every warp at four
// units or more, the most warps whose ring and activation fit the budget,
// then the deepest ring: ncu showed these kernels bound by each warp's
// instruction latency (9 cycles per issued instruction with 3 warps per
// scheduler on the down projection), not by the bytes in flight. With
// deepFirst (POCKET_FP8_PIPE_PLAN=depth, the first policy) the most units
// in flight per block (warps × (stages-1)) instead. False when nothing fits.
//
// Any warps-per-tile count from 1 to 8 is tried, not only powers of two:
// the kernels split a tile's units over wpr warps of any count. On the
// Qwen3.5-27B FP8 decode step the in-projections (8 tiles a block) then
// run at 3 warps a tile with rings of 4 (24 warps), not 2 with rings of 6
// (16 warps): on one H200, fed decode 132.7–132.8 tok/s against
// 131.5–131.7 with powers of two (interleaved builds; conformance and the
// FP8 fixtures as before: docs/benchmarks.md, 2026-12-02 from 04:37). The
// MiniMax-M2 slice's q/k/v (6x4x4) gained 0.3–0.6%, the DeepSeek-V3
// slice's attention and dense down projections (6x4x4, 6x4x3) were
// neutral.
//
// The dense kernels keep a factor a unit after the activation
// (pipeFacBytes): the plan is made within the budget less those bytes, and
// its shm includes them.
func planPipe(sms, budget, in, units int, tiles []int, deepFirst bool) (pipeGeom, bool) {
	fb := pipeFacBytes(in)
	g, ok := planPipeBy(sms, budget-fb, in, units, tiles, deepFirst, func(w int) int { return w + 1 })
	if ok {
		g.shm += fb
	}
	return g, ok
}

// pipeFacBytes is the shared memory of the ring kernels' per-unit
// activation factors for in columns (fp8pipe.cuh's pipeStageBy): a float a
// 128-column unit, in whole 128-byte lines.
func pipeFacBytes(in int) int { return cdiv(cdiv(in, 128)*4, 128) * 128 }

// pow2 steps the warps per tile through powers of two (planPipeMoE's
// plans, measured only at those).
func pow2(w int) int { return w * 2 }

// planPipeBy is planPipe with the warps per tile stepped by next from 1.
func planPipeBy(sms, budget, in, units int, tiles []int, deepFirst bool, next func(int) int) (pipeGeom, bool) {
	if sms <= 0 || units <= 0 || len(tiles) == 0 {
		return pipeGeom{}, false
	}
	xs := cdiv(in, 128) * 128 * 2
	g := pipeGeom{tiles: 1}
	for g.blocks(tiles) > sms {
		g.tiles++
	}
	best, found := pipeGeom{}, false
	for wpr := 1; wpr <= 8 && units >= 4*wpr; wpr = next(wpr) {
		if wpr*g.tiles > pipeMaxWarps {
			break
		}
		for _, s := range pipeStages {
			shm := xs + wpr*g.tiles*s*pipeStageBytes
			if shm > budget {
				continue
			}
			c := pipeGeom{wpr: wpr, tiles: g.tiles, stages: s, shm: shm}
			better := c.warps() > best.warps() || c.warps() == best.warps() && c.stages > best.stages
			if deepFirst {
				better = c.warps()*(c.stages-1) > best.warps()*(best.stages-1)
			}
			if !found || better {
				best, found = c, true
			}
			break
		}
	}
	return best, found
}

// moeTableBytes is the MoE down kernel's table of its slots at the start
// of its dynamic shared memory (MOE_TABLE_BYTES of fp8pipe_moe.cuh), which
// holds moePipeMaxK slots (MOE_PIPE_MAXK).
const (
	moeTableBytes = 768
	moePipeMaxK   = 32
)

// planPipeMoE is the geometry of fp8pipe_moe.cuh's two kernels for k routed
// experts of hidden × inter (widths in whole 128-column units): gate/up
// over k·inter/8 tiles of hidden columns, down over hidden/16 tiles of
// k·inter columns with the slots' table ahead of its activation; both
// keep a factor a unit after the activation (pipeFacBytes). False
// for more slots than the table holds, or when either does not fit.
func planPipeMoE(sms, budget, k, hidden, inter int, deepFirst bool) (gu, dn pipeGeom, ok bool) {
	if k <= 0 || k > moePipeMaxK || hidden%128 != 0 || inter%128 != 0 || budget <= moeTableBytes {
		return gu, dn, false
	}
	gf, df := pipeFacBytes(hidden), pipeFacBytes(k*inter)
	if gu, ok = planPipeBy(sms, budget-gf, hidden, hidden/128, []int{k * inter / 8}, deepFirst, pow2); !ok {
		return gu, dn, false
	}
	if dn, ok = planPipeBy(sms, budget-moeTableBytes-df, k*inter, k*inter/128, []int{hidden / 16}, deepFirst, pow2); !ok {
		return gu, dn, false
	}
	gu.shm += gf
	dn.shm += moeTableBytes + df
	return gu, dn, true
}

// cdiv is a/b rounded up (for positive b); here rather than in backend.go
// so that the plans build and test without the cuda tag.
func cdiv(a, b int) int { return (a + b - 1) / b }
