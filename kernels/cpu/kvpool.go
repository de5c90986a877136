package cpu

import (
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
)

// kvPool keeps, per layer, K and V slots as float32, or as float16 bits
// when the spec asks for Half and K and V rows have one width (MLA's
// latent pools stay float32).
//
// A layer's rows are head-major, [KV head][slot][dim]: one head's rows of
// a block are contiguous. A decode step's attention streams each head's
// rows through the whole context; slot-major rows ([slot][head][dim], the
// block format of Read/WriteKVBlock) put each of them 4 KB apart, a page
// a position, and the step waited on the TLB rather than on the bytes.
type kvPool struct {
	spec   kernels.KVSpec
	slots  int         // Blocks·BlockSize
	k, v   [][]float32 // [layer][head][slot][dim]; nil when half
	kh, vh [][]uint16  // the same as float16 when half
}

func (p *kvPool) Spec() kernels.KVSpec { return p.spec }

func (p *kvPool) half() bool { return p.kh != nil }

// at is the offset of head h's row at slot in a layer of rows d wide.
func (p *kvPool) at(h, slot, d int) int { return (h*p.slots + slot) * d }

// NewKVPool implements kernels.Backend.
func (b *Backend) NewKVPool(s kernels.KVSpec) (kernels.KVPool, error) {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV < 0 {
		return nil, fmt.Errorf("cpu: bad KV spec %+v", s)
	}
	if total := s.BytesPerBlock() * int64(s.Blocks); total > 1<<40 {
		return nil, fmt.Errorf("cpu: KV pool of %d bytes is too large", total)
	}
	s.Half = s.HalfRows()
	p := &kvPool{spec: s, slots: s.Blocks * s.BlockSize}
	kn, vn := p.slots*s.KVHeads*s.HeadDimK, p.slots*s.KVHeads*s.HeadDimV
	for range s.Layers {
		if s.Half {
			p.kh, p.vh = append(p.kh, make([]uint16, kn)), append(p.vh, make([]uint16, vn))
		} else {
			p.k, p.v = append(p.k, make([]float32, kn)), append(p.v, make([]float32, vn))
		}
	}
	return p, nil
}

// CopyKVBlock implements kernels.Backend.
func (b *Backend) CopyKVBlock(kp kernels.KVPool, dst, src int) {
	p := kp.(*kvPool)
	s := p.spec
	bs, dk, dv := s.BlockSize, s.HeadDimK, s.HeadDimV
	for l := range s.Layers {
		for h := range s.KVHeads {
			kf, kt := p.at(h, src*bs, dk), p.at(h, dst*bs, dk)
			vf, vt := p.at(h, src*bs, dv), p.at(h, dst*bs, dv)
			if p.half() {
				copy(p.kh[l][kt:kt+bs*dk], p.kh[l][kf:kf+bs*dk])
				copy(p.vh[l][vt:vt+bs*dv], p.vh[l][vf:vf+bs*dv])
				continue
			}
			copy(p.k[l][kt:kt+bs*dk], p.k[l][kf:kf+bs*dk])
			copy(p.v[l][vt:vt+bs*dv], p.v[l][vf:vf+bs*dv])
		}
	}
}

// row is KV head h's row at slot of layer l's K (or V): float32, or, in
// a half pool, float16 bits (the other nil).
func (p *kvPool) row(l int, isV bool, h, slot int) ([]float32, []uint16) {
	d, f, hf := p.spec.HeadDimK, p.k, p.kh
	if isV {
		d, f, hf = p.spec.HeadDimV, p.v, p.vh
	}
	at := p.at(h, slot, d)
	if p.half() {
		return nil, hf[l][at : at+d]
	}
	return f[l][at : at+d], nil
}

// put stores src in a row (row's result), rounding to float16 in a half
// pool.
func put(f []float32, h []uint16, src []float32) {
	if h != nil {
		f32ToF16Row(src, h)
	} else {
		copy(f, src)
	}
}

// blockRows calls fn for every row of block in the block format's order
// (per layer: K rows by slot, then by head; then V rows likewise).
func (p *kvPool) blockRows(block int, fn func(f []float32, h []uint16)) {
	s := p.spec
	for l := range s.Layers {
		for _, isV := range []bool{false, true} {
			if isV && s.HeadDimV == 0 {
				continue
			}
			for j := range s.BlockSize {
				for h := range s.KVHeads {
					fn(p.row(l, isV, h, block*s.BlockSize+j))
				}
			}
		}
	}
}

// ReadKVBlock implements kernels.Backend: the block's rows slot-major
// ([layer][K, V][slot][head][dim]), float32 (widened from a half pool).
func (b *Backend) ReadKVBlock(kp kernels.KVPool, block int, dst []float32) {
	off := 0
	kp.(*kvPool).blockRows(block, func(f []float32, h []uint16) {
		if h != nil {
			f16Row(h, dst[off:off+len(h)])
			off += len(h)
		} else {
			off += copy(dst[off:off+len(f)], f)
		}
	})
}

// WriteKVBlock implements kernels.Backend (ReadKVBlock's format; rounded
// to float16 in a half pool: exactly what a read of it gave).
func (b *Backend) WriteKVBlock(kp kernels.KVPool, block int, src []float32) {
	off := 0
	kp.(*kvPool).blockRows(block, func(f []float32, h []uint16) {
		n := len(f) + len(h)
		put(f, h, src[off:off+n])
		off += n
	})
}

// StoreKV implements kernels.Backend.
func (b *Backend) StoreKV(kp kernels.KVPool, layer int, k, v kernels.Buf, slots []int32) {
	p := kp.(*kvPool)
	s := p.spec
	dk, dv := s.HeadDimK, s.HeadDimV
	ks := f32(k)
	var vs []float32
	if dv > 0 {
		vs = f32(v)
	}
	for i, slot := range slots {
		for h := range s.KVHeads {
			j := i*s.KVHeads + h
			f, hf := p.row(layer, false, h, int(slot))
			put(f, hf, ks[j*dk:(j+1)*dk])
			if dv > 0 {
				f, hf = p.row(layer, true, h, int(slot))
				put(f, hf, vs[j*dv:(j+1)*dv])
			}
		}
	}
}

// f32ToF16Row rounds src to float16 bits in dst (equal lengths).
func f32ToF16Row(src []float32, dst []uint16) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = kernels.F32ToF16(x)
	}
}
