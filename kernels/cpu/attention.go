package cpu

import (
	"fmt"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

// kvPool keeps, per layer, K and V slots as float32.
type kvPool struct {
	spec kernels.KVSpec
	k, v [][]float32 // [layer][slot*KVHeads*HeadDim]
}

func (p *kvPool) Spec() kernels.KVSpec { return p.spec }

// NewKVPool implements kernels.Backend.
func (b *Backend) NewKVPool(s kernels.KVSpec) (kernels.KVPool, error) {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV < 0 {
		return nil, fmt.Errorf("cpu: bad KV spec %+v", s)
	}
	if total := s.BytesPerBlock() * int64(s.Blocks); total > 1<<40 {
		return nil, fmt.Errorf("cpu: KV pool of %d bytes is too large", total)
	}
	p := &kvPool{spec: s, k: make([][]float32, s.Layers), v: make([][]float32, s.Layers)}
	slots := s.Blocks * s.BlockSize
	for l := range p.k {
		p.k[l] = make([]float32, slots*s.KVHeads*s.HeadDimK)
		p.v[l] = make([]float32, slots*s.KVHeads*s.HeadDimV)
	}
	return p, nil
}

// CopyKVBlock implements kernels.Backend.
func (b *Backend) CopyKVBlock(kp kernels.KVPool, dst, src int) {
	p := kp.(*kvPool)
	s := p.spec
	kn, vn := s.BlockSize*s.KVHeads*s.HeadDimK, s.BlockSize*s.KVHeads*s.HeadDimV
	for l := range p.k {
		copy(p.k[l][dst*kn:(dst+1)*kn], p.k[l][src*kn:(src+1)*kn])
		copy(p.v[l][dst*vn:(dst+1)*vn], p.v[l][src*vn:(src+1)*vn])
	}
}

// ReadKVBlock implements kernels.Backend.
func (b *Backend) ReadKVBlock(kp kernels.KVPool, block int, dst []float32) {
	p := kp.(*kvPool)
	s := p.spec
	kn, vn := s.BlockSize*s.KVHeads*s.HeadDimK, s.BlockSize*s.KVHeads*s.HeadDimV
	off := 0
	for l := range p.k {
		off += copy(dst[off:off+kn], p.k[l][block*kn:(block+1)*kn])
		off += copy(dst[off:off+vn], p.v[l][block*vn:(block+1)*vn])
	}
}

// WriteKVBlock implements kernels.Backend.
func (b *Backend) WriteKVBlock(kp kernels.KVPool, block int, src []float32) {
	p := kp.(*kvPool)
	s := p.spec
	kn, vn := s.BlockSize*s.KVHeads*s.HeadDimK, s.BlockSize*s.KVHeads*s.HeadDimV
	off := 0
	for l := range p.k {
		off += copy(p.k[l][block*kn:(block+1)*kn], src[off:off+kn])
		off += copy(p.v[l][block*vn:(block+1)*vn], src[off:off+vn])
	}
}

// StoreKV implements kernels.Backend.
func (b *Backend) StoreKV(kp kernels.KVPool, layer int, k, v kernels.Buf, slots []int32) {
	p := kp.(*kvPool)
	s := p.spec
	kw, vw := s.KVHeads*s.HeadDimK, s.KVHeads*s.HeadDimV
	ks := f32(k)
	for i, slot := range slots {
		copy(p.k[layer][int(slot)*kw:(int(slot)+1)*kw], ks[i*kw:(i+1)*kw])
	}
	if vw > 0 {
		vs := f32(v)
		for i, slot := range slots {
			copy(p.v[layer][int(slot)*vw:(int(slot)+1)*vw], vs[i*vw:(i+1)*vw])
		}
	}
}

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
	kl, vl := p.k[layer], p.v[layer]
	bs := s.BlockSize
	tileRows := max(1, attnTileQueries/group)
	tiles := (rows + tileRows - 1) / tileRows
	kStride, vStride := s.KVHeads*dk, s.KVHeads*dv
	// With fewer tasks than workers (a decode step: one tile), a task
	// takes part of a group's heads, so that every worker has one.
	parts := 1
	if t := tiles * s.KVHeads; t < b.workers {
		parts = min(group, (b.workers+t-1)/t)
	}
	per := (group + parts - 1) / parts // heads a part
	parts = (group + per - 1) / per
	b.parallel(tiles*s.KVHeads*parts, 1, func(lo, hi int) {
		scores := make([]float32, min(tileRows, rows)*group*(seq.Start+rows))
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
			for p0 := 0; p0 < ctx; p0 += bs { // the block of positions p0..
				kb := kl[(int(seq.Table[p0/bs])*bs*s.KVHeads+kvh)*dk:]
				for r := r0; r < r1; r++ {
					for g := g0; g < g1; g++ {
						all := sc(r, g)
						if p0 >= len(all) {
							continue
						}
						h := kvh*group + g
						dotRows(qs[(r*heads+h)*dk:(r*heads+h+1)*dk], kb, kStride, all[p0:min(len(all), p0+bs)], scale)
					}
				}
			}
			for r := r0; r < r1; r++ {
				for g := g0; g < g1; g++ {
					all := sc(r, g)
					vmath.Scale(all, 1/vmath.ExpShifted(all, vmath.Max(all))) // the weights, as axpy takes them
					h := kvh*group + g
					clear(out[(r*heads+h)*dv : (r*heads+h+1)*dv])
				}
			}
			for p0 := 0; p0 < ctx; p0 += bs {
				vb := vl[(int(seq.Table[p0/bs])*bs*s.KVHeads+kvh)*dv:]
				for r := r0; r < r1; r++ {
					for g := g0; g < g1; g++ {
						all := sc(r, g)
						if p0 >= len(all) {
							continue
						}
						h := kvh*group + g
						axpyRows(out[(r*heads+h)*dv:(r*heads+h+1)*dv], vb, vStride, all[p0:min(len(all), p0+bs)])
					}
				}
			}
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
