package cpu

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// kvPool keeps, per layer, K and V slots as float32, or as float16 bits
// when the spec asks for Half and K and V rows have one width (MLA's
// latent pools stay float32).
type kvPool struct {
	spec   kernels.KVSpec
	k, v   [][]float32 // [layer][slot*KVHeads*HeadDim]; nil when half
	kh, vh [][]uint16  // the same as float16 when half
}

func (p *kvPool) Spec() kernels.KVSpec { return p.spec }

func (p *kvPool) half() bool { return p.kh != nil }

// NewKVPool implements kernels.Backend.
func (b *Backend) NewKVPool(s kernels.KVSpec) (kernels.KVPool, error) {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV < 0 {
		return nil, fmt.Errorf("cpu: bad KV spec %+v", s)
	}
	if total := s.BytesPerBlock() * int64(s.Blocks); total > 1<<40 {
		return nil, fmt.Errorf("cpu: KV pool of %d bytes is too large", total)
	}
	s.Half = s.Half && s.HeadDimK == s.HeadDimV
	p := &kvPool{spec: s}
	slots := s.Blocks * s.BlockSize
	kn, vn := slots*s.KVHeads*s.HeadDimK, slots*s.KVHeads*s.HeadDimV
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
	kn, vn := s.BlockSize*s.KVHeads*s.HeadDimK, s.BlockSize*s.KVHeads*s.HeadDimV
	for l := range s.Layers {
		if p.half() {
			copy(p.kh[l][dst*kn:(dst+1)*kn], p.kh[l][src*kn:(src+1)*kn])
			copy(p.vh[l][dst*vn:(dst+1)*vn], p.vh[l][src*vn:(src+1)*vn])
			continue
		}
		copy(p.k[l][dst*kn:(dst+1)*kn], p.k[l][src*kn:(src+1)*kn])
		copy(p.v[l][dst*vn:(dst+1)*vn], p.v[l][src*vn:(src+1)*vn])
	}
}

// ReadKVBlock implements kernels.Backend (float32, widened from a half
// pool).
func (b *Backend) ReadKVBlock(kp kernels.KVPool, block int, dst []float32) {
	p := kp.(*kvPool)
	s := p.spec
	kn, vn := s.BlockSize*s.KVHeads*s.HeadDimK, s.BlockSize*s.KVHeads*s.HeadDimV
	off := 0
	for l := range s.Layers {
		if p.half() {
			f16Row(p.kh[l][block*kn:(block+1)*kn], dst[off:off+kn])
			f16Row(p.vh[l][block*vn:(block+1)*vn], dst[off+kn:off+kn+vn])
			off += kn + vn
			continue
		}
		off += copy(dst[off:off+kn], p.k[l][block*kn:(block+1)*kn])
		off += copy(dst[off:off+vn], p.v[l][block*vn:(block+1)*vn])
	}
}

// WriteKVBlock implements kernels.Backend (float32, rounded to float16 in
// a half pool: exactly what a read of it gave).
func (b *Backend) WriteKVBlock(kp kernels.KVPool, block int, src []float32) {
	p := kp.(*kvPool)
	s := p.spec
	kn, vn := s.BlockSize*s.KVHeads*s.HeadDimK, s.BlockSize*s.KVHeads*s.HeadDimV
	off := 0
	for l := range s.Layers {
		if p.half() {
			f32ToF16Row(src[off:off+kn], p.kh[l][block*kn:(block+1)*kn])
			f32ToF16Row(src[off+kn:off+kn+vn], p.vh[l][block*vn:(block+1)*vn])
			off += kn + vn
			continue
		}
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
	var vs []float32
	if vw > 0 {
		vs = f32(v)
	}
	for i, slot := range slots {
		sl := int(slot)
		if p.half() {
			f32ToF16Row(ks[i*kw:(i+1)*kw], p.kh[layer][sl*kw:(sl+1)*kw])
			f32ToF16Row(vs[i*vw:(i+1)*vw], p.vh[layer][sl*vw:(sl+1)*vw])
			continue
		}
		copy(p.k[layer][sl*kw:(sl+1)*kw], ks[i*kw:(i+1)*kw])
		if vw > 0 {
			copy(p.v[layer][sl*vw:(sl+1)*vw], vs[i*vw:(i+1)*vw])
		}
	}
}

// f32ToF16Row rounds src to float16 bits in dst (equal lengths).
func f32ToF16Row(src []float32, dst []uint16) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = f32ToF16(x)
	}
}

// f32ToF16 rounds x to the nearest float16, ties to even, as F16C's
// VCVTPS2PH does: overflow to infinity, subnormals kept, NaN quiet.
func f32ToF16(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	if b&0x7fffffff > 0x7f800000 {
		return sign | 0x7e00
	}
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0: // a float16 subnormal, or zero
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - exp)
		r, rem, half := man>>shift, man&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | man>>13
	if rem := man & 0x1fff; rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is right, up to infinity
	}
	return sign | uint16(r)
}
