package cuda

import "testing"

// TestHeadSplit replays attn_decode's block → heads mapping for groups
// split over blocks (decode_attn.cuh, HS): block cb of a grid of kvh·hsplit
// columns takes kv head cb / hsplit and heads cb·G .. cb·G+G-1. Every head
// must be taken once, by a block of its own kv head (h / (G·hsplit), as
// GQA groups them), and one block a kv head stores the new key.
func TestHeadSplit(t *testing.T) {
	for g := 1; g <= 24; g++ {
		n := headSplit(g, 8)
		if n < 1 || g%n != 0 || g/n > 8 {
			t.Fatalf("g=%d: split %d", g, n)
		}
		if g <= 8 && n != 1 {
			t.Errorf("g=%d: split %d, want 1", g, n)
		}
		const kvh = 8
		per := g / n // warps a block
		cols := kvh * n
		seen := make([]int, kvh*g)
		stores := make([]int, kvh)
		for cb := range cols {
			kh := cb / (cols / kvh)
			if cb%(cols/kvh) == 0 {
				stores[kh]++
			}
			for w := range per {
				h := cb*per + w
				seen[h]++
				if h/g != kh {
					t.Fatalf("g=%d: head %d in a block of kv head %d", g, h, kh)
				}
			}
		}
		for h, c := range seen {
			if c != 1 {
				t.Fatalf("g=%d: head %d taken %d times", g, h, c)
			}
		}
		for kh, c := range stores {
			if c != 1 {
				t.Fatalf("g=%d: kv head %d stored by %d blocks", g, kh, c)
			}
		}
	}
	if n := headSplit(12, 8); n != 2 {
		t.Errorf("GLM-4.5's 96/8: split %d, want 2 blocks of 6", n)
	}
}
