package cuda

import "testing"

func TestL2Plan(t *testing.T) {
	q := l2Mat{addr: 1 << 20, rows: 4096, rowBytes: 8192} // 32 MiB
	k := l2Mat{addr: 1 << 30, rows: 1024, rowBytes: 8192} // 8 MiB
	odd := l2Mat{addr: 1 << 31, rows: 10, rowBytes: 210}  // Q6_K row of one block: not 16-byte pieces
	const mib = 1 << 20

	// Everything fits: whole matrices in 64 KiB pieces.
	rs := l2Plan([]l2Mat{q, k}, 64*mib)
	if len(rs) != 2 || rs[0] != (l2Range{q.addr, 32 * mib, l2Piece, l2Piece}) || rs[1] != (l2Range{k.addr, 8 * mib, l2Piece, l2Piece}) {
		t.Fatalf("fits: %+v", rs)
	}
	// Over budget: the same share of every row, whole 16-byte pieces.
	rs = l2Plan([]l2Mat{q, k}, 20*mib)
	take := int64(8192) * 20 / 40 &^ 15
	if len(rs) != 2 || rs[0] != (l2Range{q.addr, 32 * mib, 8192, take}) || rs[1].take != take || rs[1].stride != 8192 {
		t.Fatalf("share: %+v", rs)
	}
	// A share under 128 bytes a row is not asked for.
	if rs := l2Plan([]l2Mat{q}, 32*mib/128); len(rs) != 0 {
		t.Fatalf("tiny share: %+v", rs)
	}
	// Rows that are not whole 16-byte pieces, no address, no budget: nothing.
	if rs := l2Plan([]l2Mat{odd, {rows: 4, rowBytes: 64}}, 64*mib); len(rs) != 0 {
		t.Fatalf("unaligned: %+v", rs)
	}
	if rs := l2Plan([]l2Mat{q}, 0); len(rs) != 0 {
		t.Fatalf("no budget: %+v", rs)
	}
	// At most three ranges (the kernel's arguments).
	if rs := l2Plan([]l2Mat{k, k, k, k}, 64*mib); len(rs) != 3 {
		t.Fatalf("four matrices: %d ranges", len(rs))
	}
}
