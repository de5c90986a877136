package cuda

import "testing"

// qmv's grid on an H200 (132 SMs) in the default geometry (4 rows a warp, 3
// blocks an SM: 396 slots) for the Qwen3-8B decode GEMVs: a row group is 4
// rows (qmv) or 2 outputs (qmv_swiglu).
func TestQmvWarpsFor(t *testing.T) {
	g := qmvGeomByName("")
	if g != (qmvGeom{4, 3}) {
		t.Fatalf("default geometry %+v, want 4 rows at 3 blocks an SM", g)
	}
	slots := g.occ * 132
	cases := []struct {
		name       string
		groups, in int
		want       int
	}{
		{"q/k/v", (4096 + 1024 + 1024) / 4, 4096, 2},
		// Equal cost at 2 and 4 warps: the fewer (256 blocks, all resident;
		// 4 gave 512 blocks for 396 slots and measured 4% slower).
		{"o", 4096 / 4, 4096, 2},
		{"down", 4096 / 4, 12288, 2},
		{"gate/up", 12288 / 2, 4096, 1},
		{"LM head", 151936 / 4, 4096, 1},
		// Few groups: more warps split the columns.
		{"narrow", 64 / 4, 4096, 4},
		// One step of columns: one warp however few the groups.
		{"one step", 8, 1024, 1},
	}
	for _, c := range cases {
		if got := qmvWarpsFor(c.groups, c.in, slots); got != c.want {
			t.Errorf("%s: %d groups of %d columns: %d warps, want %d", c.name, c.groups, c.in, got, c.want)
		}
	}
	if g := qmvGeomByName("2x4"); g != (qmvGeom{2, 4}) {
		t.Errorf("2x4: %+v", g)
	}
	if g := qmvGeomByName("9x9"); g != qmvGeoms[0].g {
		t.Errorf("an unknown name gives %+v, want the default", g)
	}
}
