package cuda

import "testing"

// TestDeqChunks: the chunks tile the rows in order, each padded to a
// multiple of 8 within a scratch of pad8(chunk) rows, and only an
// unpadded whole-matrix chunk writes the output directly (a chunk that
// does not start at column 0 never does).
func TestDeqChunks(t *testing.T) {
	for _, c := range []struct{ out, chunk int }{
		{12, 12}, {12, 1 << 20}, {16, 16}, {8, 4}, {16, 12}, {258, 258}, {258, 64}, {24, 8}, {1000, 128}, {5, 5},
	} {
		cs := deqChunks(c.out, c.chunk)
		next, scratch := 0, (min(c.chunk, c.out)+7)&^7
		for i, k := range cs {
			if k.c0 != next || k.n <= 0 || k.np%8 != 0 || k.np < k.n || k.np-k.n >= 8 || k.np > scratch {
				t.Fatalf("out %d chunk %d: step %d is %+v (next row %d, scratch %d)", c.out, c.chunk, i, k, next, scratch)
			}
			if k.direct != (len(cs) == 1 && k.n%8 == 0) {
				t.Fatalf("out %d chunk %d: step %d direct %v", c.out, c.chunk, i, k.direct)
			}
			next += k.n
		}
		if next != c.out {
			t.Fatalf("out %d chunk %d: chunks cover %d rows", c.out, c.chunk, next)
		}
	}
	if cs := deqChunks(0, 8); len(cs) != 0 {
		t.Fatalf("no rows: %v", cs)
	}
}
