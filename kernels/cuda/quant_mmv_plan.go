package cuda

// The launch geometry of quant_mmv.cuh's GEMVs, without the cuda tag so
// that it is tested on every machine (quant_mmv_plan_test.go).

// qmvGeom is one of quant_mmv.cuh's compiled geometries (QMV_ENTRIES):
// rows a warp computes (QR) and blocks an SM holds (the launch bounds).
type qmvGeom struct {
	rows, occ int
}

// qmvGeoms are the compiled geometries by POCKET_QMV_GEOM name; the first
// is the default.
var qmvGeoms = []struct {
	name string
	g    qmvGeom
}{
	// Qwen3-8B Q4_K_M decode on an H200, tok/s: 4x3 447.9-449.5, 2x4
	// 450.0-451.3 (the same within the noise); 4 rows at 64 registers spill
	// in Q6_K (399.4 against 414.3 for 4x3 then).
	{"4x3", qmvGeom{4, 3}}, // 80 registers
	{"2x4", qmvGeom{2, 4}}, // 64 registers
	{"8x2", qmvGeom{8, 2}}, // 128 registers (not yet measured)
}

// qmvGeomByName is the geometry POCKET_QMV_GEOM names (the default for ""
// or an unknown name).
func qmvGeomByName(name string) qmvGeom {
	for _, e := range qmvGeoms {
		if e.name == name {
			return e.g
		}
	}
	return qmvGeoms[0].g
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
