package quant

import "testing"

func TestGridTables(t *testing.T) {
	for _, g := range []struct {
		name   string
		kgrid  []uint16
		n      int
		bits   uint
		maxLvl uint16
	}{
		{"kgrid2bit256", kgrid2bit256[:], 256, 2, 2},
		{"kgrid2bit512", kgrid2bit512[:], 512, 2, 2},
		{"kgrid2bit1024", kgrid2bit1024[:], 1024, 2, 2},
		{"kgrid1bit2048", kgrid1bit2048[:], 2048, 2, 2},
		{"kgrid3bit256", kgrid3bit256[:], 256, 3, 7},
		{"kgrid3bit512", kgrid3bit512[:], 512, 3, 7},
	} {
		if len(g.kgrid) != g.n {
			t.Errorf("%s: %d entries, want %d", g.name, len(g.kgrid), g.n)
		}
		// The tables are sorted point indices: a transcription slip that
		// drops, repeats or swaps digits almost always breaks the order.
		for i := 1; i < len(g.kgrid); i++ {
			if g.kgrid[i] <= g.kgrid[i-1] {
				t.Errorf("%s[%d] = %d not above %d", g.name, i, g.kgrid[i], g.kgrid[i-1])
			}
		}
		dims := 16 / g.bits
		if g.bits == 3 {
			dims = 4
		}
		for i, v := range g.kgrid {
			if v>>(g.bits*dims) != 0 {
				t.Errorf("%s[%d] = %d has bits beyond %d coordinates", g.name, i, v, dims)
			}
			for k := uint(0); k < dims; k++ {
				if l := v >> (g.bits * k) & (1<<g.bits - 1); l > g.maxLvl {
					t.Errorf("%s[%d]: level %d", g.name, i, l)
				}
			}
		}
	}
}

// Entries of ggml-common.h's expanded grids (byte k of each word is
// coordinate k).
func TestGridValues(t *testing.T) {
	check8 := func(name string, grid [][8]float32, idx int, want uint64, signed bool) {
		t.Helper()
		for k := 0; k < 8; k++ {
			b := byte(want >> (8 * k))
			w := float32(b)
			if signed {
				w = float32(int8(b))
			}
			if grid[idx][k] != w {
				t.Errorf("%s[%d] = %v, want %#016x", name, idx, grid[idx], want)
				return
			}
		}
	}
	check4 := func(name string, grid [][4]float32, idx int, want uint32) {
		t.Helper()
		for k := 0; k < 4; k++ {
			if grid[idx][k] != float32(byte(want>>(8*k))) {
				t.Errorf("%s[%d] = %v, want %#08x", name, idx, grid[idx], want)
				return
			}
		}
	}
	for idx, w := range map[int]uint64{0: 0x0808080808080808, 1: 0x080808080808082b, 2: 0x0808080808081919,
		3: 0x0808080808082b08, 7: 0x08080808082b0808, 132: 0x1908080808080819, 252: 0x2b2b082b08080808,
		253: 0x2b2b190808192b08, 254: 0x2b2b2b0819190808, 255: 0x2b2b2b1908081908} {
		check8("iq2xxs", iq2xxsGrid[:], idx, w, false)
	}
	for idx, w := range map[int]uint64{7: 0x080808080819192b, 8: 0x0808080808192b19, 508: 0x2b2b2b2b082b2b08,
		509: 0x2b2b2b2b082b2b2b, 510: 0x2b2b2b2b2b190819, 511: 0x2b2b2b2b2b2b2b2b} {
		check8("iq2xs", iq2xsGrid[:], idx, w, false)
	}
	for idx, w := range map[int]uint64{0: 0x0808080808080808, 7: 0x080808080819192b, 8: 0x0808080808192b19,
		15: 0x080808081908192b} {
		check8("iq2s", iq2sGrid[:], idx, w, false)
	}
	for idx, w := range map[int]uint64{0: 0xffffffffffffffff, 1: 0xffffffffffffff01, 5: 0xffffffffff00ff00,
		11: 0xffffffff00ff0000, 24: 0xffffffff01010101, 37: 0xffffff0000000000} {
		check8("iq1s", iq1sGrid[:], idx, w, true)
	}
	for idx, w := range map[int]uint32{255: 0x3e341c04, 254: 0x3e2c1424} {
		check4("iq3xxs", iq3xxsGrid[:], idx, w)
	}
	for idx, w := range map[int]uint32{0: 0x01010101, 1: 0x01010103, 4: 0x0101010f, 9: 0x0101030d,
		511: 0x0f0f0101, 510: 0x0f0d0703} {
		check4("iq3s", iq3sGrid[:], idx, w)
	}
	// ksigns_iq2xs of ggml-common.h, first and last rows.
	for i, w := range map[int]uint8{0: 0, 1: 129, 2: 130, 3: 3, 7: 135, 15: 15, 112: 240, 127: 255, 126: 126} {
		if ksigns[i] != w {
			t.Errorf("ksigns[%d] = %d, want %d", i, ksigns[i], w)
		}
	}
}
