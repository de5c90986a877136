package cuda

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

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
	blocks := []struct {
		name       string
		groups, in int
		wpr, warps int
		occ        int
		noW6       bool
	}{
		{"down", 4096 / 4, 12288, 3, 6, 3, false},
		{"down, 6-warp blocks off", 4096 / 4, 12288, 2, 8, 3, true},
		{"o", 4096 / 4, 4096, 2, 8, 3, false},
		{"q/k/v", (4096 + 1024 + 1024) / 4, 4096, 2, 8, 3, false},
		{"LM head", 151936 / 4, 4096, 1, 8, 3, false},
		{"down at 2x4 (1024 6-warp blocks: two waves)", 4096 / 2, 12288, 2, 8, 4, false},
	}
	for _, c := range blocks {
		if wpr, warps := qmvBlockFor(c.groups, c.in, c.occ, 132, c.noW6); wpr != c.wpr || warps != c.warps {
			t.Errorf("%s: %d warps a group in blocks of %d, want %d in %d", c.name, wpr, warps, c.wpr, c.warps)
		}
	}
	if g := qmvGeomByName("2x4"); g != (qmvGeom{2, 4}) {
		t.Errorf("2x4: %+v", g)
	}
	if g := qmvGeomByName("9x9"); g != qmvGeoms[0].g {
		t.Errorf("an unknown name gives %+v, want the default", g)
	}
}

// POCKET_QMV_GEOM: one geometry for all launches, then per kind; what it
// does not know leaves the default in place.
func TestParseQmvPlan(t *testing.T) {
	idx := func(name string) int {
		i, ok := qmvGeomIndex(name)
		if !ok {
			t.Fatalf("no geometry %s", name)
		}
		return i
	}
	cases := []struct {
		v    string
		want map[string]string
	}{
		{"", map[string]string{"norm": "4x3", "down": "4x3", "swiglu": "4x3"}},
		{"2x4", map[string]string{"norm": "2x4", "o": "2x4", "down": "2x4", "swiglu": "2x4", "plain": "2x4"}},
		{"4x3,down=2x4", map[string]string{"norm": "4x3", "down": "2x4", "o": "4x3"}},
		{"down=2x4,o=2x4", map[string]string{"norm": "4x3", "down": "2x4", "o": "2x4"}},
		{"9x9,down=9x9,up=2x4,o=2x4", map[string]string{"down": "4x3", "o": "2x4", "plain": "4x3"}},
	}
	for _, c := range cases {
		p := parseQmvPlan(c.v)
		for kind, name := range c.want {
			if p[kind] != idx(name) {
				t.Errorf("%q: %s has %s, want %s", c.v, kind, qmvGeoms[p[kind]].name, name)
			}
		}
	}
	if mv, swi := qmvGeomByName("2x4").entries(); mv != "qmv_2_4" || swi != "qmv_swiglu_2_4" {
		t.Errorf("2x4's entries: %s, %s", mv, swi)
	}
	if e := qmvGeomByName("4x3").swiqEntry(); e != "qmv_swiglu_q_4_3" {
		t.Errorf("4x3's rounding SwiGLU: %s", e)
	}
	if e := qmvGeomByName("2x4").addqEntry(); e != "qmv_add_q_2_4" {
		t.Errorf("2x4's rounding add: %s", e)
	}
	// Every geometry's entries are in the committed PTX (quantModule
	// loads them all).
	gz, err := os.ReadFile("quant.ptx.gz")
	if err != nil {
		t.Fatal(err)
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	ptx, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range qmvGeoms {
		mv, swi := e.g.entries()
		for _, name := range []string{mv, swi, e.g.swiqEntry(), e.g.swiqGEntry(), e.g.swiqFEntry(), e.g.addqEntry()} {
			if !bytes.Contains(ptx, []byte(".entry "+name+"(")) {
				t.Errorf("%s: no entry %s in quant.ptx", e.name, name)
			}
		}
	}
	for _, name := range []string{"qmv_add_q2_4"} {
		if !bytes.Contains(ptx, []byte(".entry "+name+"(")) {
			t.Errorf("no entry %s in quant.ptx", name)
		}
	}
	for _, c := range []struct{ rows, wpr, want int }{{4, 1, 2}, {4, 2, 4}, {2, 1, 4}, {4, 8, 16}, {2, 8, 32}, {4, 16, 0}} {
		if got := swiqPasses(c.rows, c.wpr); got != c.want {
			t.Errorf("swiqPasses(%d, %d) = %d, want %d", c.rows, c.wpr, got, c.want)
		}
	}
	if k := qmvKind(qmvAdd, 12288, 4096); k != "down" {
		t.Errorf("add 4096×12288: %s", k)
	}
	if k := qmvKind(qmvAdd, 4096, 4096); k != "o" {
		t.Errorf("add 4096×4096: %s", k)
	}
}

// qmvGeomByName is the geometry name names (the default for an unknown
// name).
func qmvGeomByName(name string) qmvGeom {
	i, _ := qmvGeomIndex(name)
	return qmvGeoms[i].g
}

// qmv_add_q's warps a row group: Qwen3-8B's o projection (4096 columns,
// 4 steps) two, its down projection (12288, 12 steps) three; the 64-register
// geometry's blocks of 16 groups take at most two.
func TestAddqWarps(t *testing.T) {
	for _, c := range []struct {
		g        qmvGeom
		in, want int
	}{
		{qmvGeom{4, 3}, 4096, 2}, {qmvGeom{4, 3}, 12288, 3}, {qmvGeom{4, 3}, 1024, 1}, {qmvGeom{4, 3}, 2048, 2},
		{qmvGeom{2, 4}, 4096, 2}, {qmvGeom{2, 4}, 12288, 2}, {qmvGeom{4, 3}, 5120, 3},
	} {
		if got := addqWarps(c.g, c.in); got != c.want {
			t.Errorf("%v in=%d: %d warps, want %d", c.g, c.in, got, c.want)
		}
		if w := addqWarps(c.g, c.in); 32/c.g.rows*w*32 > 256*c.g.occ {
			t.Errorf("%v in=%d: a block of %d threads", c.g, c.in, 32/c.g.rows*w*32)
		}
	}
}

// qmv_add_q2_4 takes Qwen3-8B's Q4_K o projection (4096 columns: two
// steps a warp, 512 threads) and nothing with more steps a warp, another
// format or the other geometry.
func TestAddqPre2(t *testing.T) {
	g43, g24 := qmvGeom{4, 3}, qmvGeom{2, 4}
	for _, c := range []struct {
		g    qmvGeom
		dt   kernels.DType
		in   int
		want bool
	}{
		{g43, kernels.Q4_K, 4096, true}, {g43, dtQ4KG, 4096, true}, {g43, dtQ4KG, 2048, true},
		{g43, dtQ4KG, 12288, false}, {g43, dtQ4KG, 5120, false}, {g43, kernels.Q6_K, 4096, false},
		{g43, dtQ6KG, 4096, false}, {g43, dtQ80G, 4096, false}, {g24, dtQ4KG, 4096, false},
	} {
		if got := addqPre2(c.g, c.dt, c.in, addqWarps(c.g, c.in)); got != c.want {
			t.Errorf("%v %v in=%d: %v, want %v", c.g, c.dt, c.in, got, c.want)
		}
	}
}

// qmv_swiglu_qf takes Q4_K and Q4_KG at one or two warps a group.
func TestSwiqFlat(t *testing.T) {
	for _, c := range []struct {
		dt   kernels.DType
		wpr  int
		want bool
	}{
		{dtQ4KG, 1, true}, {kernels.Q4_K, 2, true}, {dtQ4KG, 4, false}, {dtQ6KG, 1, false}, {dtQ80G, 1, false},
	} {
		if got := swiqFlat(c.dt, c.wpr); got != c.want {
			t.Errorf("%v wpr=%d: %v, want %v", c.dt, c.wpr, got, c.want)
		}
	}
}
