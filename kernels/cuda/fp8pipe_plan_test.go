package cuda

import "testing"

// The geometries of the Qwen3.5-27B FP8 decode GEMVs on an H200 (132 SMs,
// 227 KiB of shared memory per block less the kernels' static 256 bytes).
func TestPlanPipe(t *testing.T) {
	const sms, budget = 132, 227*1024 - 256
	cases := []struct {
		name        string
		in          int
		tiles       []int
		want        pipeGeom
		wantBlocks  int
		wantUnfound bool
	}{
		// gate/up + SwiGLU: 17408 outputs in tiles of 8.
		{"swiglu", 5120, []int{2176}, pipeGeom{wpr: 1, tiles: 17, stages: 6, shm: 10240 + 256 + 17*6*2048}, 128, false},
		// down: 5120 rows of 17408 columns; 8 warps per tile fit with a
		// ring of 4 (of 3 while the row sums took 2 KiB of static shared
		// memory), the 136 units' factors (640 bytes) included.
		{"down", 17408, []int{320}, pipeGeom{wpr: 8, tiles: 3, stages: 4, shm: 34816 + 640 + 24*4*2048}, 107, false},
		// out_proj: 5120 rows of 6144 columns.
		{"out_proj", 6144, []int{320}, pipeGeom{wpr: 8, tiles: 3, stages: 4, shm: 12288 + 256 + 24*4*2048}, 107, false},
		// a short matrix: one tile per block, its columns over 8 warps.
		{"short", 5120, []int{64}, pipeGeom{wpr: 8, tiles: 1, stages: 8, shm: 10240 + 256 + 8*8*2048}, 64, false},
		// DeltaNet's qkv, z, b and a of one launch.
		{"deltanet", 5120, []int{640, 384, 3, 3}, pipeGeom{wpr: 3, tiles: 8, stages: 4, shm: 10240 + 256 + 24*4*2048}, 130, false},
		// q, k, v of one launch: blocks never mix matrices.
		{"qkv", 5120, []int{768, 64, 64}, pipeGeom{wpr: 3, tiles: 7, stages: 4, shm: 10240 + 256 + 21*4*2048}, 130, false},
		// an activation too wide for any ring.
		{"wide", 120000, []int{16}, pipeGeom{}, 0, true},
	}
	for _, c := range cases {
		g, ok := planPipe(sms, budget, c.in, cdiv(c.in, 128), c.tiles, false)
		if ok == c.wantUnfound {
			t.Fatalf("%s: found %v", c.name, ok)
		}
		if !ok {
			continue
		}
		if g != c.want || g.blocks(c.tiles) != c.wantBlocks {
			t.Errorf("%s: got %+v (%d blocks), want %+v (%d blocks)", c.name, g, g.blocks(c.tiles), c.want, c.wantBlocks)
		}
		if g.shm > budget || g.warps() > pipeMaxWarps || g.blocks(c.tiles) > sms {
			t.Errorf("%s: %+v breaks a limit", c.name, g)
		}
	}
}

// The MoE decode kernels' geometries (fp8pipe_moe.cuh) at the seeds'
// widths, eight routed experts: every plan within the limits, the down
// kernel's table and both kernels' unit factors included, and one wave.
func TestPlanPipeMoE(t *testing.T) {
	const sms, budget = 132, 227*1024 - 256
	for _, c := range []struct {
		name          string
		hidden, inter int
		gu, dn        pipeGeom
	}{
		{"minimax-m2", 3072, 1536, pipeGeom{wpr: 2, tiles: 12, stages: 4, shm: 6144 + 128 + 24*4*2048},
			pipeGeom{wpr: 8, tiles: 2, stages: 6, shm: 768 + 24576 + 384 + 16*6*2048}},
		{"deepseek-v3", 7168, 2048, pipeGeom{wpr: 1, tiles: 16, stages: 6, shm: 14336 + 256 + 16*6*2048},
			pipeGeom{wpr: 4, tiles: 4, stages: 6, shm: 768 + 32768 + 512 + 16*6*2048}},
		{"glm-4.5-air", 4096, 1408, pipeGeom{wpr: 2, tiles: 11, stages: 4, shm: 8192 + 128 + 22*4*2048},
			pipeGeom{wpr: 8, tiles: 2, stages: 6, shm: 768 + 22528 + 384 + 16*6*2048}},
		{"qwen3-30b-a3b", 2048, 768, pipeGeom{wpr: 4, tiles: 6, stages: 4, shm: 4096 + 128 + 24*4*2048},
			pipeGeom{wpr: 8, tiles: 1, stages: 8, shm: 768 + 12288 + 256 + 8*8*2048}},
	} {
		gu, dn, ok := planPipeMoE(sms, budget, 8, c.hidden, c.inter, false)
		if !ok {
			t.Fatalf("%s: no plan", c.name)
		}
		if gu != c.gu || dn != c.dn {
			t.Errorf("%s: gate/up %+v, down %+v; want %+v, %+v", c.name, gu, dn, c.gu, c.dn)
		}
		for _, g := range []struct {
			p     pipeGeom
			tiles int
		}{{gu, 8 * c.inter / 8}, {dn, c.hidden / 16}} {
			if g.p.shm > budget || g.p.warps() > pipeMaxWarps || g.p.blocks([]int{g.tiles}) > sms {
				t.Errorf("%s: %+v breaks a limit", c.name, g.p)
			}
		}
	}
	if _, _, ok := planPipeMoE(sms, budget, 8, 3000, 1536, false); ok {
		t.Error("a hidden width of partial units was planned")
	}
	if _, _, ok := planPipeMoE(sms, budget, 33, 2048, 128, false); ok {
		t.Error("more slots than the down kernel's table holds were planned")
	}
}

// TestPlanPipePolicies pins the other planning policy: the first one
// picked the deeper ring for the down projection.
func TestPlanPipePolicies(t *testing.T) {
	if g, _ := planPipe(132, 227*1024-256, 17408, 136, []int{320}, true); g.warps() != 12 || g.stages != 8 {
		t.Errorf("deepFirst down projection: %+v", g)
	}
}

// TestPipeRingSchedule replays PipeDot's issue/commit/wait order of
// fp8pipe.cuh for one lane and checks that every unit it computes was
// copied into the stage it reads, by a group the wait has completed, and
// that no stage is overwritten before it is read.
func TestPipeRingSchedule(t *testing.T) {
	for _, s := range pipeStages {
		for _, nu := range []int{1, 2, 3, 5, 8, 9, 40, 136} {
			for _, stride := range []int{1, 2, 4, 8} {
				for first := 0; first < stride; first++ {
					checkRing(t, s, nu, first, stride)
				}
			}
		}
	}
}

func checkRing(t *testing.T, S, nu, first, stride int) {
	t.Helper()
	type copyOp struct{ unit, group int }
	stage := make([]copyOp, S) // the last copy into each stage
	for i := range stage {
		stage[i] = copyOp{-1, -1}
	}
	read := make([]bool, S) // the stage's last copy has been read
	for i := range read {
		read[i] = true
	}
	groups := 0
	issue := func(slot, unit int) {
		if !read[slot] {
			t.Fatalf("S=%d nu=%d: stage %d overwritten before its unit %d was read", S, nu, slot, stage[slot].unit)
		}
		stage[slot] = copyOp{unit, groups}
		read[slot] = false
	}
	u := first
	for k := 0; k < S-1; k++ {
		if u+k*stride < nu {
			issue(k, u+k*stride)
		}
		groups++ // commit
	}
	seen := 0
	rd := 0
	for ; u < nu; u += stride {
		if u+(S-1)*stride < nu {
			issue((rd+S-1)%S, u+(S-1)*stride)
		}
		groups++
		complete := groups - (S - 1) // wait_group S-1: groups [0, complete) are done
		c := stage[rd]
		if c.unit != u || c.group >= complete {
			t.Fatalf("S=%d nu=%d first=%d stride=%d: unit %d reads stage %d holding %+v (complete < %d)",
				S, nu, first, stride, u, rd, c, complete)
		}
		read[rd] = true
		seen++
		rd = (rd + 1) % S
	}
	if want := max(0, (nu-first+stride-1)/stride); seen != want {
		t.Fatalf("S=%d nu=%d first=%d stride=%d: %d units computed, want %d", S, nu, first, stride, seen, want)
	}
}

// pipeSwz is fp8pipe.cuh's stage offset of row j, 16-byte column c.
func pipeSwz(j, c int) int { return j*128 + (c^((j&1)<<2))<<4 }

// TestPipeLineLayout checks PIPE_LINE's copy and read mappings of
// fp8pipe.cuh: the lanes' whole-line copies (copy k, lane l: row 4k+l/8,
// column l%8) fill a stage from which every lane's fragment reads (rows g
// and 8+g, columns t and 4+t) return exactly the bytes PIPE_FRAG's own
// copies would, the copies cover the stage once, and the reads of each
// 8-lane phase touch 8 distinct 16-byte bank groups.
func TestPipeLineLayout(t *testing.T) {
	var stage [2048 / 16]int // which (row, column) piece each 16-byte slot holds
	for i := range stage {
		stage[i] = -1
	}
	for k := 0; k < 4; k++ {
		for l := 0; l < 32; l++ {
			j, c := 4*k+l/8, l%8
			slot := pipeSwz(j, c) / 16
			if stage[slot] != -1 {
				t.Fatalf("copy k=%d lane %d overwrites slot %d", k, l, slot)
			}
			stage[slot] = j*8 + c
		}
	}
	for l := 0; l < 32; l++ {
		g, tt := l>>2, l&3
		want := [4]int{g*8 + tt, (8+g)*8 + tt, g*8 + 4 + tt, (8+g)*8 + 4 + tt} // a0, b0, a1, b1
		got := [4]int{stage[pipeSwz(g, tt)/16], stage[pipeSwz(8+g, tt)/16], stage[pipeSwz(g, 4+tt)/16],
			stage[pipeSwz(8+g, 4+tt)/16]}
		if got != want {
			t.Fatalf("lane %d reads %v, want %v", l, got, want)
		}
	}
	for _, row := range []func(g, tt int) int{
		func(g, tt int) int { return pipeSwz(g, tt) }, func(g, tt int) int { return pipeSwz(8+g, tt) },
		func(g, tt int) int { return pipeSwz(g, 4+tt) }, func(g, tt int) int { return pipeSwz(8+g, 4+tt) },
	} {
		for phase := 0; phase < 4; phase++ {
			seen := map[int]bool{}
			for l := 8 * phase; l < 8*phase+8; l++ {
				bank := row(l>>2, l&3) / 16 % 8
				if seen[bank] {
					t.Fatalf("phase %d: bank group %d read twice", phase, bank)
				}
				seen[bank] = true
			}
		}
	}
}
