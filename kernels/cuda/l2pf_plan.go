package cuda

// l2Mat is a weight matrix a GEMV reads: rows of rowBytes from its device
// address (as an integer, so that the plan builds and tests without the
// cuda tag).
type l2Mat struct {
	addr     uint64
	rows     int64
	rowBytes int64
}

// l2Range is one range of l2_prefetch (l2pf.cu): rows of stride bytes
// from addr, the first take bytes of each, within total bytes.
type l2Range struct {
	addr                uint64
	total, stride, take int64
}

// l2Piece is the "row" a whole matrix is cut into for the prefetch
// kernel's threads (PF_PIECE of l2pf.cu).
const l2Piece = 64 << 10

// l2Plan is what to ask L2 for ahead of a GEMV over mats with budget
// bytes: every matrix whole when they fit together, else the same share
// of every row (whole 16-byte pieces of it), since a GEMV streams all its
// rows at once, each from its start: the first bytes of every row are
// what it reads first. Matrices whose rows are not whole 16-byte pieces
// (bulk prefetches take 16-byte aligned addresses and sizes) are left
// out, as is a share under 128 bytes a row. At most three ranges.
func l2Plan(mats []l2Mat, budget int64) []l2Range {
	var total int64
	var ok []l2Mat
	for _, m := range mats {
		if m.addr == 0 || m.rows <= 0 || m.rowBytes <= 0 || m.rowBytes%16 != 0 || m.addr%16 != 0 {
			continue
		}
		ok = append(ok, m)
		total += m.rows * m.rowBytes
	}
	if len(ok) > 3 {
		ok = ok[:3]
	}
	if budget <= 0 || total == 0 {
		return nil
	}
	var out []l2Range
	for _, m := range ok {
		size := m.rows * m.rowBytes
		if total <= budget {
			out = append(out, l2Range{addr: m.addr, total: size, stride: l2Piece, take: l2Piece})
			continue
		}
		take := m.rowBytes * budget / total &^ 15
		if take < 128 {
			continue
		}
		out = append(out, l2Range{addr: m.addr, total: size, stride: m.rowBytes, take: take})
	}
	return out
}
