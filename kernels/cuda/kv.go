//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// kvPool is one allocation: all layers' K slots, then all layers' V slots,
// [layer][slot][KVHeads*HeadDim] of float32, or of float16 where the spec
// asks for Half and K and V rows have one width (attention; an MLA latent
// cache stays float32), as the CPU backend decides. A float16 pool rounds
// rows to nearest-even when they are stored (kv_elem.cuh) and reads its
// blocks out to the host tier widened to float32.
type kvPool struct {
	spec   kernels.KVSpec
	k, v   cu.DevicePtr
	kw, vw int // elements per slot
	slots  int
}

func (p *kvPool) Spec() kernels.KVSpec { return p.spec }

// elem is the bytes of one element: 4, or 2 in a float16 pool.
func (p *kvPool) elem() int64 {
	if p.spec.Half {
		return 2
	}
	return 4
}

func (p *kvPool) kLayer(l int) cu.DevicePtr {
	return p.k + cu.DevicePtr(int64(l)*int64(p.slots)*int64(p.kw)*p.elem())
}

func (p *kvPool) vLayer(l int) cu.DevicePtr {
	return p.v + cu.DevicePtr(int64(l)*int64(p.slots)*int64(p.vw)*p.elem())
}

// NewKVPool implements kernels.Backend.
func (b *Backend) NewKVPool(s kernels.KVSpec) (kernels.KVPool, error) {
	if s.Layers <= 0 || s.Blocks <= 0 || s.BlockSize <= 0 || s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV < 0 {
		return nil, fmt.Errorf("cuda: bad KV spec %+v", s)
	}
	// Standard attention reads head dims up to 256; a latent (MLA) cache,
	// one shared "head" of kv_lora_rank+rope (576 in DeepSeek-V3), is read
	// by mla.cu up to 1024.
	limit := 256
	if s.KVHeads == 1 {
		limit = 1024
	}
	if s.HeadDimK > limit || s.HeadDimV > limit {
		return nil, fmt.Errorf("cuda: head dim %d/%d over %d: %w", s.HeadDimK, s.HeadDimV, limit, kernels.ErrUnsupported)
	}
	s.Half = s.HalfRows()
	p := &kvPool{spec: s, kw: s.KVHeads * s.HeadDimK, vw: s.KVHeads * s.HeadDimV, slots: s.Blocks * s.BlockSize}
	kb := int64(s.Layers) * int64(p.slots) * int64(p.kw) * p.elem()
	vb := int64(s.Layers) * int64(p.slots) * int64(p.vw) * p.elem()
	if !b.enter() {
		b.exit()
		return nil, b.err
	}
	defer b.exit()
	p.k = b.alloc(kb)
	b.fail(cu.MemsetD8Async(p.k, 0, kb, b.stream))
	if vb > 0 {
		p.v = b.alloc(vb)
		b.fail(cu.MemsetD8Async(p.v, 0, vb, b.stream))
	}
	if b.err != nil {
		return nil, fmt.Errorf("cuda: KV pool of %d bytes: %w", kb+vb, b.err)
	}
	return p, nil
}

// CopyKVBlock implements kernels.Backend.
func (b *Backend) CopyKVBlock(kp kernels.KVPool, dst, src int) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	p := kp.(*kvPool)
	bs := int64(p.spec.BlockSize)
	for l := 0; l < p.spec.Layers; l++ {
		kb := bs * int64(p.kw) * p.elem()
		b.fail(cu.MemcpyDtoDAsync(p.kLayer(l)+cu.DevicePtr(int64(dst)*kb), p.kLayer(l)+cu.DevicePtr(int64(src)*kb), kb, b.stream))
		if p.vw > 0 {
			vb := bs * int64(p.vw) * p.elem()
			b.fail(cu.MemcpyDtoDAsync(p.vLayer(l)+cu.DevicePtr(int64(dst)*vb), p.vLayer(l)+cu.DevicePtr(int64(src)*vb), vb, b.stream))
		}
	}
}

// StoreKV implements kernels.Backend.
func (b *Backend) StoreKV(kp kernels.KVPool, layer int, k, v kernels.Buf, slots []int32) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	p := kp.(*kvPool)
	sp := b.put(kSlots, words(slots))
	var vb uint64
	if p.vw > 0 {
		vb = ptr(dptr(v))
	}
	b.run(p.fn(fStoreKV), len(slots), cdiv(max(p.kw, p.vw), 256), 256, ptr(p.kLayer(layer)), ptr(p.vLayer(layer)), ptr(dptr(k)), vb, ptr(sp),
		i32(p.kw), i32(p.vw))
}

// Attention implements kernels.Backend. Prefill passes (≥ 16 rows, equal K
// and V head dims of 64, 128 or 256) run the flash kernel attn_prefill on
// the bf16 tensor cores; everything else runs split-K flash-decoding:
// attn_gqa (a block per GQA group, so K/V are read once per kv head) where
// the head dims are multiples of 4, else attn_partial (a block per query
// head). The context is cut into splits of whole position chunks so that
// the grid fills the GPU even for one query row; the last split of each
// group to finish merges them (no second launch).
// Under graph capture the split count follows the block table's capacity,
// so the same graph serves every position up to it.
func (b *Backend) Attention(dst, q kernels.Buf, kp kernels.KVPool, layer int, seq kernels.AttnSeq, rows, heads int, scale float32) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	p := kp.(*kvPool)
	s := p.spec
	if s.HeadDimK > 256 || s.HeadDimV > 256 {
		b.fail(fmt.Errorf("cuda: attention over head dim %d/%d (over 256; a latent cache is read by MLAttention): %w",
			s.HeadDimK, s.HeadDimV, kernels.ErrUnsupported))
		return
	}
	if rows >= 16 && s.HeadDimK == s.HeadDimV && (s.HeadDimK == 64 || s.HeadDimK == 128 ||
		s.HeadDimK == 256 && !switches.noPrefill256) && heads%s.KVHeads == 0 {
		// Prefill: the flash kernel on the tensor cores.
		f := b.attn128
		switch s.HeadDimK {
		case 64:
			f = fAttnPrefill64
		case 256:
			f = fAttnPrefill256
		}
		tp := b.put(kTable, words(seq.Table))
		st := b.put(kStart, []uint32{uint32(seq.Start)})
		tiles, d := cdiv(rows, 64), s.HeadDimK
		splits := b.prefillSplits(tiles*heads, seq.Start+rows)
		var part, ml cu.DevicePtr
		if splits > 1 {
			n := rows * heads
			b.attnScratch(splits*n*(d+2), 0)
			part, ml = b.part, b.part+cu.DevicePtr(4*splits*n*d)
		}
		// The output feeds the output projection: its bf16 input too.
		n := rows * heads * d
		bf := b.ltInput(n)
		b.run(p.fn(f), tiles*splits, heads, 128, ptr(dptr(dst)), ptr(dptr(q)), ptr(p.kLayer(layer)), ptr(p.vLayer(layer)),
			ptr(tp), ptr(st), i32(rows), i32(heads), i32(s.KVHeads), i32(s.BlockSize), f32(scale),
			ptr(part), ptr(ml), i32(splits), ptr(bf))
		if splits > 1 {
			b.run(fAttnMerge, rows*heads, 1, d, ptr(dptr(dst)), ptr(part), ptr(ml), i32(rows*heads), i32(splits), i32(d), ptr(bf))
		}
		b.ltInputFrom(bf, dptr(dst), n)
		return
	}
	ctx := seq.Start + rows
	if b.cap != nil {
		ctx = len(seq.Table) * s.BlockSize
	}
	tp := b.put(kTable, words(seq.Table))
	st := b.put(kStart, []uint32{uint32(seq.Start)})
	// attn_gqa pays off once K/V traffic dominates: measured on an H200
	// (Llama-3-8B shape), 8K context 180 vs 162 tok/s, but 512 tokens 222
	// vs 227 (its per-block setup costs more than the traffic it saves).
	gqaFrom := 2048
	switch {
	case b.gqaFrom != 0:
		gqaFrom = b.gqaFrom
	case switches.oldAttn:
		gqaFrom = math.MaxInt
	}
	if ctx >= gqaFrom && heads%s.KVHeads == 0 && s.HeadDimK%p.gqaAlign() == 0 && s.HeadDimV%4 == 0 && s.HeadDimV > 0 {
		// attn_gqa: one block per (row, kv head, ≤ 8 of its query heads,
		// split), K/V read once per group. Splits: about 4 blocks per SM
		// (its occupancy; one wave), chunks of at least 16 positions, ≤ 256
		// splits. The kernel re-derives the chunk from the device-side
		// context (≥ 16 positions), so a graph captured with splits for the
		// table's capacity still spreads a short context over the splits.
		g := heads / s.KVHeads
		hg := cdiv(g, cdiv(g, 8))
		groups := rows * s.KVHeads * cdiv(g, hg)
		splits := 1
		if want := cdiv(4*b.sms, groups); want > 1 {
			splits = min(want, max(cdiv(ctx, 16), 1), 256)
		}
		b.attnScratch(rows*heads*splits*(s.HeadDimV+2), rows*heads)
		b.run(p.fn(fAttnGQA), groups, splits, 128, ptr(dptr(dst)), ptr(b.part), ptr(b.counters), ptr(dptr(q)),
			ptr(p.kLayer(layer)), ptr(p.vLayer(layer)), ptr(tp), ptr(st), i32(heads), i32(s.KVHeads), i32(s.HeadDimK),
			i32(s.HeadDimV), i32(s.BlockSize), i32(16), i32(hg), f32(scale))
		return
	}
	// Aim at 16 blocks per SM, chunks of at least 8 positions, ≤ 256 splits
	// (POCKET_ATTN_BLOCKS / POCKET_ATTN_CHUNK change the first two).
	splits := 1
	if want := cdiv(switches.attnBlocks*b.sms, rows*heads); want > 1 {
		splits = min(want, max(cdiv(ctx, switches.attnChunk), 1), 256)
	}
	chunk := cdiv(ctx, splits)
	b.attnScratch(rows*heads*splits*(s.HeadDimV+2), rows*heads)
	b.run(p.fn(fAttnPartial), rows*heads, splits, 128, ptr(dptr(dst)), ptr(b.part), ptr(b.counters), ptr(dptr(q)),
		ptr(p.kLayer(layer)), ptr(p.vLayer(layer)), ptr(tp), ptr(st), i32(heads), i32(s.KVHeads), i32(s.HeadDimK),
		i32(s.HeadDimV), i32(s.BlockSize), i32(chunk), f32(scale))
}

// prefillSplits is how many key ranges a prefill attention of blocks
// (query tile, head) blocks over a context of ctx positions is cut into:
// enough for about two blocks per SM when the tiles alone leave SMs idle,
// each range at least 4 key tiles (256 positions). Measured on an H200
// (Llama-3-8B shape): an append of 64 tokens to an 8K session spent ~27 ms
// in 32 blocks walking 7.7K keys each.
func (b *Backend) prefillSplits(blocks, ctx int) int {
	if switches.noPrefillSplits || b.prefillSplitOff {
		return 1
	}
	want := cdiv(2*b.sms, blocks)
	return max(1, min(want, ctx/256, 64))
}

// attnScratch makes the split-K partials hold floats floats and the
// split counters number at least counters.
func (b *Backend) attnScratch(floats, counters int) {
	b.scratch(&b.part, &b.partN, int64(floats)*4)
	if counters > b.countersN {
		// Split counters start at zero and every pass leaves them there.
		// Like part, an old array stays allocated for captured graphs.
		b.countersN = max(counters, 4096)
		b.counters = b.alloc(int64(b.countersN) * 4)
		b.fail(cu.MemsetD32Async(b.counters, 0, int64(b.countersN), b.stream))
	}
}

// ReadKVBlock implements kernels.Backend: per layer, the block's K slots
// then its V slots (the host tier's layout). It waits for queued work.
func (b *Backend) ReadKVBlock(kp kernels.KVPool, block int, dst []float32) {
	b.kvBlockCopy(kp.(*kvPool), block, dst, false)
}

// WriteKVBlock implements kernels.Backend, the inverse of ReadKVBlock.
func (b *Backend) WriteKVBlock(kp kernels.KVPool, block int, src []float32) {
	b.kvBlockCopy(kp.(*kvPool), block, src, true)
}

func (b *Backend) kvBlockCopy(p *kvPool, block int, host []float32, toDevice bool) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	bs := p.spec.BlockSize
	kn, vn := bs*p.kw, bs*p.vw
	if len(host) < p.spec.Layers*(kn+vn) {
		b.fail(fmt.Errorf("cuda: KV block copy with %d floats, need %d", len(host), p.spec.Layers*(kn+vn)))
		return
	}
	// A float16 pool's rows pass through halves: rounded here on the way
	// in (exact for rows a read gave), widened exactly on the way out.
	var halves []uint16
	if p.spec.Half {
		// The backend's lock is held: one scratch serves every copy.
		if n := p.spec.Layers * (kn + vn); cap(b.kvHalves) < n {
			b.kvHalves = make([]uint16, n)
		}
		halves = b.kvHalves[:p.spec.Layers*(kn+vn)]
		if toDevice {
			for i, x := range host[:len(halves)] {
				halves[i] = kernels.F32ToF16(x)
			}
		}
	}
	off := 0
	for l := 0; l < p.spec.Layers; l++ {
		for _, part := range []struct {
			dev cu.DevicePtr
			n   int
		}{{p.kLayer(l) + cu.DevicePtr(int64(block*kn)*p.elem()), kn}, {p.vLayer(l) + cu.DevicePtr(int64(block*vn)*p.elem()), vn}} {
			if part.n == 0 {
				continue
			}
			h := unsafe.Pointer(&host[off])
			if halves != nil {
				h = unsafe.Pointer(&halves[off])
			}
			if toDevice {
				b.fail(cu.MemcpyHtoDAsync(part.dev, h, int64(part.n)*p.elem(), b.stream))
			} else {
				b.fail(cu.MemcpyDtoHAsync(h, part.dev, int64(part.n)*p.elem(), b.stream))
			}
			off += part.n
		}
	}
	b.fail(b.stream.Synchronize())
	if halves != nil && !toDevice && b.err == nil {
		for i, h := range halves {
			host[i] = kernels.F16ToF32(h)
		}
	}
}

// fn is kernels.cu's function f for this pool: its float16 twin (_h)
// where the pool is half.
func (p *kvPool) fn(f int) int {
	if !p.spec.Half {
		return f
	}
	switch f {
	case fStoreKV:
		return fStoreKVh
	case fAttnPartial:
		return fAttnPartialH
	case fAttnGQA:
		return fAttnGQAh
	case fAttnPrefill64:
		return fAttnPrefill64h
	case fAttnPrefill128:
		return fAttnPrefill128h
	case fAttnPrefill128x3:
		return fAttnPrefill128x3h
	case fAttnPrefill128q3:
		return fAttnPrefill128q3h
	case fAttnPrefill128q4:
		return fAttnPrefill128q4h
	case fAttnPrefill256:
		return fAttnPrefill256h
	}
	panic(fmt.Sprintf("cuda: kernel %s has no float16 KV twin", funcNames[f]))
}

// gqaAlign is what attn_gqa needs the K head dim to be a multiple of: its
// K tile copies are 16 bytes, 4 floats or 8 halves.
func (p *kvPool) gqaAlign() int {
	if p.spec.Half {
		return 8
	}
	return 4
}

// SetGQAFrom makes decode attention use attn_gqa from a context of n
// positions on (0: the default), so that conformance can check both
// kernels on every shape.
func (b *Backend) SetGQAFrom(n int) {
	b.mu.Lock()
	b.gqaFrom = n
	b.mu.Unlock()
}

// SetPrefillSplits turns the split-context prefill attention on (the
// default) or off, so that conformance can check both paths on one shape.
func (b *Backend) SetPrefillSplits(on bool) {
	b.mu.Lock()
	b.prefillSplitOff = !on
	b.mu.Unlock()
}

// attnPrefill128 names the head-dim-128 prefill attention kernels by
// their POCKET_ATTN_PREFILL value. The default ("", q3) keeps the query in
// shared memory with 8 K/V loads in flight: measured on an H200 (Qwen3-8B
// shape, 4096-token prefill) 30.7k tok/s against 30.2k with the query in
// registers (regs) and 29.2k at 4 blocks per SM (q4).
var attnPrefill128 = map[string]int{"": fAttnPrefill128q3, "q3": fAttnPrefill128q3, "regs": fAttnPrefill128x3,
	"q4": fAttnPrefill128q4}

// SetAttnPrefill picks the head-dim-128 prefill attention kernel by its
// POCKET_ATTN_PREFILL name, so that conformance checks every variant; it
// reports whether the name is known.
func (b *Backend) SetAttnPrefill(variant string) bool {
	f, ok := attnPrefill128[variant]
	if ok {
		b.mu.Lock()
		b.attn128 = f
		b.mu.Unlock()
	}
	return ok
}
