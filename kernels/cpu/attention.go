package cpu

import (
	"fmt"
	"math"

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

// Attention implements kernels.Backend: exact softmax attention, one
// (query row, head) pair per task, parallel over all of them.
func (b *Backend) Attention(dst, q kernels.Buf, kp kernels.KVPool, layer int, seq kernels.AttnSeq, rows, heads int, scale float32) {
	p := kp.(*kvPool)
	s := p.spec
	dk, dv := s.HeadDimK, s.HeadDimV
	group := heads / s.KVHeads
	qs, out := f32(q), f32(dst)
	kl, vl := p.k[layer], p.v[layer]
	ctx := seq.Start + rows
	bs := s.BlockSize
	b.parallel(rows*heads, 1, func(lo, hi int) {
		scores := make([]float32, ctx)
		for task := lo; task < hi; task++ {
			r, h := task/heads, task%heads
			kvh := h / group
			n := seq.Start + r + 1
			qv := qs[(r*heads+h)*dk : (r*heads+h+1)*dk]
			// A KV block's positions are consecutive slots, KVHeads·dim
			// floats apart: one dotRows and one axpyRows a block.
			maxS := float32(math.Inf(-1))
			for p0 := 0; p0 < n; p0 += bs { // the block of positions p0..p0+m-1
				m := min(bs, n-p0)
				first := int(seq.Table[p0/bs]) * bs
				dotRows(qv, kl[(first*s.KVHeads+kvh)*dk:], s.KVHeads*dk, scores[p0:p0+m])
				for i := p0; i < p0+m; i++ {
					scores[i] *= scale
					maxS = max(maxS, scores[i])
				}
			}
			sum := expShifted(scores[:n], maxS)
			o := out[(r*heads+h)*dv : (r*heads+h+1)*dv]
			clear(o)
			inv := 1 / sum
			for i := range scores[:n] {
				scores[i] *= inv // the weight of position i, as axpy took it
			}
			for p0 := 0; p0 < n; p0 += bs {
				m := min(bs, n-p0)
				first := int(seq.Table[p0/bs]) * bs
				axpyRows(o, vl[(first*s.KVHeads+kvh)*dv:], s.KVHeads*dv, scores[p0:p0+m])
			}
		}
	})
}

// axpyGo is axpy's portable loop.
func axpyGo(o, v []float32, w float32) {
	v = v[:len(o)]
	for i := range o {
		o[i] += w * v[i]
	}
}
