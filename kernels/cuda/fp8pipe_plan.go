package cuda

// pipeGeom is the launch geometry of the ring-streamed FP8 GEMVs
// (fp8pipe.cuh): wpr warps per 16-row tile (they split its 128-column
// units), tiles per block, ring stages per warp, and the dynamic shared
// memory a block takes.
type pipeGeom struct {
	wpr, tiles, stages, shm int
	ks                      int // column slices (split-K; 0 or 1: none)
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
	return n * max(g.ks, 1)
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
func planPipe(sms, budget, in, units int, tiles []int, deepFirst bool) (pipeGeom, bool) {
	if sms <= 0 || units <= 0 || len(tiles) == 0 {
		return pipeGeom{}, false
	}
	xs := cdiv(in, 128) * 128 * 2
	g := pipeGeom{tiles: 1}
	for g.blocks(tiles) > sms {
		g.tiles++
	}
	best, found := pipeGeom{}, false
	for wpr := 1; wpr <= 8 && units >= 4*wpr; wpr *= 2 {
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

// planPipeSplit is planPipe for one matrix whose columns may be split
// into ks ≤ 4 slices (fp8pipe.cuh's split-K kernels), each slice at least
// 8 units: the ks that gives a block the fewest units to stream when the
// ks·tiles tile-slices are spread one block per SM (ties: fewer slices).
// The 5120-output projections of Qwen3.5-27B (320 tiles) fill only 107
// SMs unsplit; two slices of them fill 128.
func planPipeSplit(sms, budget, in, units, tiles int, deepFirst bool) (pipeGeom, bool) {
	best, found, cost := pipeGeom{}, false, 0
	for ks := 1; ks <= 4; ks++ {
		per := cdiv(units, ks)
		if ks > 1 && (per < 8 || (ks-1)*per >= units || sms/ks == 0) {
			continue
		}
		g, ok := planPipe(sms/ks, budget, min(in, per*128), per, []int{tiles}, deepFirst)
		if !ok {
			continue
		}
		g.ks = ks
		if c := g.tiles * per; !found || c < cost {
			best, found, cost = g, true, c
		}
	}
	return best, found
}

// cdiv is a/b rounded up (for positive b); here rather than in backend.go
// so that the plans build and test without the cuda tag.
func cdiv(a, b int) int { return (a + b - 1) / b }
