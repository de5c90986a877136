package cpu

import (
	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

// Attention implements kernels.Backend: exact softmax attention.
//
// A task is a KV head and a tile of query rows: every head of the KV
// head's group (a part of them where tasks would be fewer than workers)
// for up to attnTileQueries queries in all. It walks the keys and then
// the values one KV block at a time, and applies each block to all of
// the tile's queries while the block is in L1/L2, so K and V stream from
// memory once a tile instead of once a query (at 2K positions a head's K
// alone is 1 MB). Each query's arithmetic is the same as alone and in the
// same order — a dotRows a block for its scores, vmath.ExpShifted, an
// axpyRows a block — so the bits are those of a pass with one row (a
// decode step) at any tile.
func (b *Backend) Attention(dst, q kernels.Buf, kp kernels.KVPool, layer int, seq kernels.AttnSeq, rows, heads int, scale float32) {
	p := kp.(*kvPool)
	s := p.spec
	dk, dv := s.HeadDimK, s.HeadDimV
	group := heads / s.KVHeads
	qs, out := f32(q), f32(dst)
	bs := s.BlockSize
	tileRows := max(1, attnTileQueries/group)
	tiles := (rows + tileRows - 1) / tileRows
	// With fewer tasks than workers (a decode step: one tile), a task
	// takes part of a group's heads, so that every worker has one.
	parts := 1
	if t := tiles * s.KVHeads; t < b.workers {
		parts = min(group, (b.workers+t-1)/t)
	}
	per := (group + parts - 1) / parts // heads a part
	parts = (group + per - 1) / per
	// rowsOf is a KV block's rows of KV head kvh (m of them, from slot
	// first) for layer data f (K or V) of row width d: in the pool, or
	// widened into buf from a half pool. It returns the rows and their
	// stride (d: a head's rows are contiguous, kvPool).
	rowsOf := func(f []float32, h []uint16, first, m, kvh, d int, buf []float32) ([]float32, int) {
		at := p.at(kvh, first, d)
		if h == nil {
			return f[at:], d
		}
		f16Row(h[at:at+m*d], buf[:m*d])
		return buf, d
	}
	var kl, vl []float32
	var klh, vlh []uint16
	if p.half() {
		klh, vlh = p.kh[layer], p.vh[layer]
	} else {
		kl, vl = p.k[layer], p.v[layer]
	}
	// direct: the block kernels read a half pool's rows themselves.
	direct := p.half() && halfRows(dk, dv)
	b.parallel(tiles*s.KVHeads*parts, 1, func(lo, hi int) {
		scores := make([]float32, min(tileRows, rows)*group*(seq.Start+rows))
		var widened []float32 // a block's rows of one KV head, from a half pool
		if p.half() && !direct {
			widened = make([]float32, bs*max(dk, dv))
		}
		for task := lo; task < hi; task++ {
			kvh, tile := task%s.KVHeads, task/s.KVHeads
			g0 := (tile % parts) * per
			g1 := min(group, g0+per)
			tile /= parts
			r0, r1 := tile*tileRows, min(rows, (tile+1)*tileRows)
			ctx := seq.Start + r1 // the positions the tile's last row sees
			// sc is query (r, g)'s scores: row r of the tile, head
			// kvh·group+g, seeing positions 0..seq.Start+r.
			sc := func(r, g int) []float32 {
				qi := (r-r0)*group + g
				return scores[qi*ctx : qi*ctx+seq.Start+r+1]
			}
			// blocks walks the context a block of positions at a time
			// for K or V (f, h: float32 or half layer data, rows d wide) and
			// hands each query of the tile its part of the block with the
			// block's rows of KV head kvh: in the pool (hrows, direct) or as
			// float32 rows and their stride.
			blocks := func(f []float32, h []uint16, d int, visit func(r, g int, part, rows []float32, stride int, hrows []uint16)) {
				for p0 := 0; p0 < ctx; p0 += bs {
					first := int(seq.Table[p0/bs]) * bs
					var rows, hrows = []float32(nil), []uint16(nil)
					var stride int
					if direct {
						hrows = h[p.at(kvh, first, d):]
					} else {
						rows, stride = rowsOf(f, h, first, min(bs, ctx-p0), kvh, d, widened)
					}
					for r := r0; r < r1; r++ {
						for g := g0; g < g1; g++ {
							if all := sc(r, g); p0 < len(all) {
								visit(r, g, all[p0:min(len(all), p0+bs)], rows, stride, hrows)
							}
						}
					}
				}
			}
			blocks(kl, klh, dk, func(r, g int, blk, kb []float32, kStride int, kh []uint16) {
				h := kvh*group + g
				qv := qs[(r*heads+h)*dk : (r*heads+h+1)*dk]
				if direct {
					dotRowsHalf(qv, kh, dk, blk, scale)
				} else {
					dotRows(qv, kb, kStride, blk, scale)
				}
			})
			for r := r0; r < r1; r++ {
				for g := g0; g < g1; g++ {
					all := sc(r, g)
					vmath.Scale(all, 1/vmath.ExpShifted(all, vmath.Max(all))) // the weights, as axpy takes them
					h := kvh*group + g
					clear(out[(r*heads+h)*dv : (r*heads+h+1)*dv])
				}
			}
			blocks(vl, vlh, dv, func(r, g int, w, vb []float32, vStride int, vh []uint16) {
				h := kvh*group + g
				o := out[(r*heads+h)*dv : (r*heads+h+1)*dv]
				if direct {
					axpyRowsHalf(o, vh, dv, w)
				} else {
					axpyRows(o, vb, vStride, w)
				}
			})
		}
	})
}

// attnTileQueries is how many queries (rows × the heads of a KV head) an
// attention task takes: their scores at 2K positions are 256 KB.
const attnTileQueries = 32

// axpyGo is axpy's portable loop.
func axpyGo(o, v []float32, w float32) {
	v = v[:len(o)]
	for i := range o {
		o[i] += w * v[i]
	}
}
