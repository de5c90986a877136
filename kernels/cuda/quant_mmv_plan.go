package cuda

import (
	"fmt"
	"slices"
	"strings"
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
// rows a warp computes (QR), blocks an SM holds (the launch bounds), steps
// of weight loads a warp keeps in flight (1, or 2 for a rolling double
// buffer) and whether a block stages the activation in shared memory.
type qmvGeom struct {
	rows, occ, depth int
	stage            bool
}

// qmvStageMax is the most shared memory a staging geometry's block takes
// (the default limit of dynamic shared memory); wider inputs run on the
// default geometry.
const qmvStageMax = 48 << 10

// stageBytes is the dynamic shared memory of a launch over in columns:
// the int8 activation and its float2 scales (320 bytes a 256-column block).
func (g qmvGeom) stageBytes(in int) int {
	if !g.stage {
		return 0
	}
	return in / 256 * 320
}

// entries are the geometry's kernel names (qmv, qmv_swiglu).
func (g qmvGeom) entries() (mv, swi string) {
	d := ""
	if g.depth == 2 {
		d = "2"
	}
	if g.stage {
		d += "s"
	}
	return fmt.Sprintf("qmv%s_%d_%d", d, g.rows, g.occ), fmt.Sprintf("qmv_swiglu%s_%d_%d", d, g.rows, g.occ)
}

// qmvGeoms are the compiled geometries by name; the first is the default.
var qmvGeoms = []struct {
	name string
	g    qmvGeom
}{
	// Qwen3-8B Q4_K_M decode on an H200, tok/s: 4x3 447.9-449.5, 2x4
	// 450.0-451.3 (the same within the noise); 4 rows at 64 registers spill
	// in Q6_K (399.4 against 414.3 for 4x3 then). 8x2: 420.8-422.3 against
	// 447.9-448.9 (every projection on it, one call).
	{"4x3", qmvGeom{4, 3, 1, false}},  // 80 registers
	{"2x4", qmvGeom{2, 4, 1, false}},  // 64 registers
	{"8x2", qmvGeom{8, 2, 1, false}},  // 128 registers
	{"4x2d", qmvGeom{4, 2, 2, false}}, // 128 registers, two steps in flight: 436-441 against 449-451
	{"4x3s", qmvGeom{4, 3, 1, true}},  // 4x3 with the activation in shared memory (not yet measured)
	{"2x4s", qmvGeom{2, 4, 1, true}},  // 2x4 likewise
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

// qmvGeomByName is the geometry name names (the default for an unknown
// name).
func qmvGeomByName(name string) qmvGeom {
	i, _ := qmvGeomIndex(name)
	return qmvGeoms[i].g
}

// qmvKinds are the launches a qmvPlan can give their own geometry: the
// fused q/k/v projection, the output and down projections (added into the
// residual), SwiGLU's gate and up, and a plain GEMV (the LM head).
var qmvKinds = []string{"norm", "o", "down", "swiglu", "plain"}

// qmvPlan is the geometry (an index into qmvGeoms) of each kind of qmv
// launch.
type qmvPlan map[string]int

// parseQmvPlan reads POCKET_QMV_GEOM: a geometry name for every launch,
// then kind=name pairs for some, e.g. "4x3,down=4x2d". Unknown names and
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
