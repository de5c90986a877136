package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// The launch geometry of quant_mmv.cuh's GEMVs, without the cuda tag so
// that it is tested on every machine (quant_mmv_plan_test.go).

// qmv modes (quant_mmv.cuh).
const (
	qmvPlain = 0
	qmvAdd   = 1
	qmvNorm  = 2
)

// qmvGeom is one of quant_mmv.cuh's compiled geometries (QMV_ENTRIES):
// rows a warp computes (QR) and blocks an SM holds (the launch bounds).
type qmvGeom struct {
	rows, occ int
}

// entries are the geometry's kernel names (qmv, qmv_swiglu).
func (g qmvGeom) entries() (mv, swi string) {
	return fmt.Sprintf("qmv_%d_%d", g.rows, g.occ), fmt.Sprintf("qmv_swiglu_%d_%d", g.rows, g.occ)
}

// swiqEntry is the geometry's qmv_swiglu that also rounds its output
// (POCKET_QMV_SWIQ).
func (g qmvGeom) swiqEntry() string { return fmt.Sprintf("qmv_swiglu_q_%d_%d", g.rows, g.occ) }

// swiqGEntry is swiqEntry for the regrouped layouts (regroup.go), a
// kernel of its own.
func (g qmvGeom) swiqGEntry() string { return fmt.Sprintf("qmv_swiglu_qg_%d_%d", g.rows, g.occ) }

// swiqFEntry is swiqEntry for Q4_K and Q4_KG with a warp's passes back
// to back (qmvSwiGLUFlat), for wpr ≤ 2.
func (g qmvGeom) swiqFEntry() string { return fmt.Sprintf("qmv_swiglu_qf_%d_%d", g.rows, g.occ) }

// addqEntry is the geometry's qmv_add_q: an add-mode GEMV over blocks of
// 32 rows that rounds its output for the next op's norm (quant_mmv.go).
func (g qmvGeom) addqEntry() string { return fmt.Sprintf("qmv_add_q_%d_%d", g.rows, g.occ) }

// addqWarps is qmv_add_q's warps a row group (wpr) over in columns: a
// block is 32/rows groups of wpr warps and holds at most as many threads
// as occ blocks of 256, so wpr ≤ occ·rows/4. Of the counts that give a
// warp the fewest 1024-column steps, the fewest warps; 0 where no count
// fits.
func addqWarps(g qmvGeom, in int) int {
	steps := cdiv(in/256, 4)
	most := g.occ * g.rows / 4
	best := 0
	for w := 1; w <= most && (w == 1 || steps >= w); w++ {
		if best == 0 || cdiv(steps, w) < cdiv(steps, best) {
			best = w
		}
	}
	return best
}

// addqPre2 reports whether qmv_add_q2_4 takes a qmv_add_q launch of
// geometry g over in columns with wpr warps a row group: Q4_K (or Q4_KG,
// dt is the layout's number) at 4 rows a warp, at most two 1024-column
// steps a warp (all of them loaded before the PDL wait) and at most 512
// threads a block (its launch bounds).
func addqPre2(g qmvGeom, dt kernels.DType, in, wpr int) bool {
	return g.rows == 4 && isQ4K(dt) && wpr > 0 && cdiv(cdiv(in/256, 4), wpr) <= 2 && 32*(32/g.rows)*wpr <= 512
}

// swiqFlat reports whether qmv_swiglu_qf takes a rounding SwiGLU launch
// of layout dt with wpr warps a group: Q4_K or Q4_KG, and wpr ≤ 2 (its
// shared sums hold 64·wpr floats, 128 at most).
func swiqFlat(dt kernels.DType, wpr int) bool { return isQ4K(dt) && wpr <= 2 }

// isQ4K reports whether dt is Q4_K as stored or regrouped (Q4_KG): the
// layouts of qdotQ4K, the only dot with the twins' step structure.
func isQ4K(dt kernels.DType) bool { return dt == kernels.Q4_K || dt == dtQ4KG }

// swiqPasses is how many passes a qmv_swiglu_q block makes to cover the
// 32 outputs it rounds, with wpr warps a group of rows/2 outputs; 0 where
// a pass's outputs do not divide 32.
func swiqPasses(rows, wpr int) int {
	per := 8 / wpr * (rows / 2)
	if per <= 0 || 32%per != 0 {
		return 0
	}
	return 32 / per
}

// qmvGeoms are the compiled geometries by name; the first is the default.
// Measured and dropped on an H200 (Qwen3-8B Q4_K_M decode, interleaved
// against 4x3 in the same calls; history: ad8c2de, 014d0fd, 568fc69,
// a4b78b6):
// 8 rows a warp at 2 blocks an SM 420.8-422.3 against 447.9-448.9 tok/s;
// two steps of weight loads in flight at 4 rows, 2 blocks (128 registers)
// 436.4-440.6 against 448.8-451.2 on the down projection alone, worse on
// every other; the activation staged in shared memory per block 432.4-434.6
// (441.4-442.7 on the down projection alone) against 448.3-452.8; Q6_K's
// pieces in 8-byte loads (44 loads a step instead of 60) on the down
// projection and the LM head 451.7-455.7 against 457.8-459.8. ncu shows
// the warps waiting on their loads (long scoreboard), but neither more
// bytes in flight per warp, fewer loads nor a nearer activation moved the
// step.
var qmvGeoms = []struct {
	name string
	g    qmvGeom
}{
	// 4x3 447.9-449.5, 2x4 450.0-451.3 (the same within the noise); 4 rows
	// at 64 registers spill in Q6_K (399.4 against 414.3 for 4x3 then).
	{"4x3", qmvGeom{4, 3}}, // 80 registers
	{"2x4", qmvGeom{2, 4}}, // 64 registers
}

// qmvGeomIndex is the index of the geometry name names (ok false for an
// unknown name).
func qmvGeomIndex(name string) (int, bool) {
	for i, e := range qmvGeoms {
		if e.name == name {
			return i, true
		}
	}
	return 0, false
}

// qmvKinds are the launches a qmvPlan can give their own geometry: the
// fused q/k/v projection, the output and down projections (added into the
// residual), SwiGLU's gate and up, and a plain GEMV (the LM head).
var qmvKinds = []string{"norm", "o", "down", "swiglu", "plain"}

// qmvPlan is the geometry (an index into qmvGeoms) of each kind of qmv
// launch.
type qmvPlan map[string]int

// parseQmvPlan reads POCKET_QMV_GEOM: a geometry name for every launch,
// then kind=name pairs for some, e.g. "4x3,down=2x4". Unknown names and
// kinds are ignored (the default stays).
func parseQmvPlan(v string) qmvPlan {
	p := qmvPlan{}
	for i, f := range strings.Split(v, ",") {
		kind, name, pair := strings.Cut(strings.TrimSpace(f), "=")
		if !pair {
			if g, ok := qmvGeomIndex(kind); ok && i == 0 {
				for _, k := range qmvKinds {
					p[k] = g
				}
			}
			continue
		}
		if g, ok := qmvGeomIndex(name); ok && slices.Contains(qmvKinds, kind) {
			p[kind] = g
		}
	}
	return p
}

// qmvKind is the kind of a qmv launch by its mode and matrix shape: the add
// mode is the output projection when the matrix is square or wider, else
// the down one.
func qmvKind(mode, in, out int) string {
	switch {
	case mode == qmvNorm:
		return "norm"
	case mode == qmvAdd && in <= out:
		return "o"
	case mode == qmvAdd:
		return "down"
	}
	return "plain"
}

// qmvWarpsFor picks how many warps share a row group of qmv (1, 2, 4 or
// 8; every warp keeps at least one step of 4 blocks, 1024 columns); slots
// are the blocks resident at once (SMs × the geometry's blocks per SM). A
// warp has one step of weights in flight at a time, so the time goes as
// the waves of blocks times the steps per warp; of equal ones the fewer
// warps per group. (Taking more when they filled a quarter more of the
// first wave's slots, the rule before, gave the 4096-row o and down
// projections of Qwen3-8B 4 warps and 512 blocks for 396 slots:
// 432.5-433.5 tok/s on its Q4_K_M step against 450.5-452.8 with 2 warps
// and 256 blocks.)
func qmvWarpsFor(groups, in, slots int) int {
	steps := cdiv(in/256, 4)
	best, cost := 1, 0
	for wpr := 1; wpr <= 8 && (wpr == 1 || steps >= wpr); wpr *= 2 {
		c := cdiv(cdiv(groups*wpr, 8), slots) * cdiv(steps, wpr)
		if wpr == 1 || c < cost {
			best, cost = wpr, c
		}
	}
	return best
}

// qmvBlockFor picks qmv's block for groups row groups of in columns on sms
// SMs of a geometry that holds occ 8-warp blocks an SM: wpr warps a group
// in blocks of warps warps. Blocks of 8 warps take qmvWarpsFor's wpr;
// blocks of 6 warps, 3 a group, go where they cost less by the same
// measure (waves × steps a warp; occ·4/3 of them fit an SM): Qwen3-8B's
// down projection (12288 columns, 12 steps) takes 6 steps a warp in 256
// 8-warp blocks for 396 slots, 4 steps in 512 6-warp blocks for 528. Its
// Q4_K_M decode on an H200, interleaved: 500.4-506.9 tok/s against
// 481.3-481.5. The o projection (4 steps, equal cost: not taken) measured
// no faster with them, and q/k/v and the LM head slower. noW6
// (POCKET_QMV_W6=0) keeps 8-warp blocks.
func qmvBlockFor(groups, in, occ, sms int, noW6 bool) (wpr, warps int) {
	slots, steps := occ*sms, cdiv(in/256, 4)
	wpr = qmvWarpsFor(groups, in, slots)
	if noW6 || steps < 3 {
		return wpr, 8
	}
	cost8 := cdiv(cdiv(groups*wpr, 8), slots) * cdiv(steps, wpr)
	cost6 := cdiv(cdiv(groups, 2), occ*4/3*sms) * cdiv(steps, 3)
	if cost6 < cost8 {
		return 3, 6
	}
	return wpr, 8
}
