//go:build cuda

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/quant"
)

// tensor is a weight resident on the device in its stored format.
type tensor struct {
	w     *kernels.Weight
	data  cu.DevicePtr
	scale cu.DevicePtr // FP8 block scales
	nsc   int          // scales per row of scale blocks
	// regroup: the layout a Q4_K, Q6_K or Q8_0 matrix is held in
	// (regroup.go; layout()), or nil: as stored.
	regroup *regroup
	vec     cu.DevicePtr // float32 copy of a 1-D weight (norm scales, biases)
	// tiled is an FP8 matrix's copy for the ring GEMVs (fp8tiles.go), or 0.
	tiled  cu.DevicePtr
	expert bool // bound into an expert set (NewExperts): never tiled
}

func (t *tensor) Weight() *kernels.Weight { return t.w }

// LoadWeight implements kernels.Backend: the bytes are uploaded as stored.
func (b *Backend) LoadWeight(w *kernels.Weight) (kernels.Tensor, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if !loadable(w.DType) {
		return nil, fmt.Errorf("cuda: %s: %s: %w", w.Name, w.DType, kernels.ErrUnsupported)
	}
	var vec []float32
	if len(w.Shape) == 1 {
		if w.DType == kernels.F8E4M3 {
			return nil, fmt.Errorf("cuda: %s: FP8 vector: %w", w.Name, kernels.ErrUnsupported)
		}
		var err error
		if vec, err = decodeVector(w); err != nil {
			return nil, err
		}
	}
	if !b.enter() {
		b.exit()
		return nil, b.err
	}
	defer b.exit()
	if isQuant(w.DType) {
		t, err := b.loadQuant(w)
		if err == nil && vec != nil {
			t.vec = b.upload(unsafe.Pointer(&vec[0]), int64(len(vec))*4)
			err = b.err
		}
		return t, err
	}
	t := &tensor{w: w}
	if t.data = b.alloc(int64(len(w.Data))); t.data != 0 {
		b.uploadWeight(t.data, w.Data)
	}
	if w.DType == kernels.F8E4M3 {
		t.nsc = cdiv(w.Cols(), w.ScaleBlock[1])
		t.scale = b.upload(unsafe.Pointer(&w.Scale[0]), int64(len(w.Scale))*4)
		if t.tiledBytes() > 0 {
			b.fp8 = append(b.fp8, t) // PrepareDecode's candidates
		}
	}
	if vec != nil {
		t.vec = b.upload(unsafe.Pointer(&vec[0]), int64(len(vec))*4)
	}
	if b.err != nil {
		return nil, fmt.Errorf("load %s: %w", w.Name, b.err)
	}
	return t, nil
}

func (b *Backend) upload(src unsafe.Pointer, n int64) cu.DevicePtr {
	p := b.alloc(n)
	if p != 0 {
		b.fail(cu.MemcpyHtoD(p, src, n))
	}
	return p
}

// decodeVector widens a 1-D weight to float32 on the host (a few KB).
func decodeVector(w *kernels.Weight) ([]float32, error) {
	out := make([]float32, w.Elems())
	if isQuant(w.DType) {
		return out, quant.DequantizeRow(w.DType, w.Data, out)
	}
	for i := range out {
		switch w.DType {
		case kernels.F32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(w.Data[4*i:]))
		case kernels.BF16:
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(w.Data[2*i:])) << 16)
		case kernels.F16:
			out[i] = f16(binary.LittleEndian.Uint16(w.Data[2*i:]))
		}
	}
	return out, nil
}

func f16(h uint16) float32 { return kernels.F16ToF32(h) }

// wargs are the six WPARAMS words of a weight.
func (t *tensor) wargs() []uint64 {
	return []uint64{ptr(t.data), ptr(t.scale), uint64(t.w.DType), i32(t.w.ScaleBlock[0]), i32(t.w.ScaleBlock[1]), i32(t.nsc)}
}

func cat(parts ...[]uint64) []uint64 {
	var out []uint64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Embed implements kernels.Backend.
func (b *Backend) Embed(dst kernels.Buf, table kernels.Tensor, ids []int32) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	t := table.(*tensor)
	if isQuant(t.w.DType) {
		b.quantEmbed(dst, t, ids)
		return
	}
	ip := b.put(kIDs, words(ids))
	// One block for every 256 columns of each row (kernels.cu: embed; the
	// kernel strides past gridDim.y's limit of 65535).
	b.run(fEmbed, len(ids), min(cdiv(t.w.Cols(), 256), 65535), 256, cat([]uint64{ptr(dptr(dst))}, t.wargs(),
		[]uint64{ptr(ip), i32(t.w.Cols())})...)
}

// MatMul implements kernels.Backend: a GEMV that streams the weight once
// for up to 8 rows (decode, small MoE groups), a tensor-core GEMM beyond.
//
// Single-row bf16 GEMVs are deferred: consecutive ones on the same input
// (q, k, v; gate, up) go out as one launch when the next other op comes.
func (b *Backend) MatMul(dst, x kernels.Buf, w kernels.Tensor, rows int) {
	if !b.enterKeep() {
		b.exit()
		return
	}
	defer b.exit()
	if dptr(dst) == b.lt.bfSrc {
		b.lt.bfSrc = 0 // the converted GEMM input's source is overwritten
	}
	t := w.(*tensor)
	if isQuant(t.w.DType) {
		b.flush()
		b.quantMatMul(dst, x, t, rows)
		return
	}
	out, in := t.w.Rows(), t.w.Cols()
	y, xp := ptr(dptr(dst)), ptr(dptr(x))
	fp8ok := t.w.DType == kernels.F8E4M3 && in%16 == 0 && t.w.ScaleBlock[1]%16 == 0
	bf16ok := t.w.DType == kernels.BF16 && in%8 == 0
	if rows == 1 && bf16ok {
		if len(b.pending) > 0 && (b.pending[0].x != xp || b.pending[0].in != in || len(b.pending) == 4) {
			b.flush()
		}
		b.pending = append(b.pending, gemv{y: y, x: xp, w: ptr(t.data), out: out, in: in, t: t})
		return
	}
	b.flush()
	if rows <= 8 {
		switch {
		case bf16ok:
			wpr := b.warpsPerRow(out, in/8)
			b.run(fGemvBF16+rows-1, cdiv(out, 8/wpr), 1, 256, y, xp, ptr(t.data), i32(out), i32(in), i32(wpr))
		case fp8ok && rows == 1 && b.f8mmaGemv(f8R, y, xp, t): // tensor cores (fp8mma.go)
		case fp8ok && rows == 1 && b.gemvR4(y, xp, t):
		case fp8ok:
			wpr := b.warpsPerRow(out, in/16)
			b.run(fGemvFP8+rows-1, cdiv(out, 8/wpr), 1, 256, y, xp, ptr(t.data), ptr(t.scale), i32(out), i32(in),
				i32(t.w.ScaleBlock[0]), i32(t.w.ScaleBlock[1]), i32(t.nsc), i32(wpr))
		default:
			b.run(fMatmulGeneric, cdiv(out, 8), 1, 256, cat([]uint64{y, xp}, t.wargs(), []uint64{i32(rows), i32(out), i32(in)})...)
		}
		return
	}
	if bf16ok && b.ltGemm(dptr(dst), dptr(x), t.data, rows, out, in) {
		if dptr(dst) == b.lt.bfSrc {
			b.lt.bfSrc = 0
		}
		return
	}
	if fp8ok && b.fp8GEMM(dptr(dst), dptr(x), t, rows) {
		return
	}
	f := fGemmGeneric
	switch {
	case bf16ok:
		f = fGemmBF16
	case fp8ok:
		f = fGemmFP8
	}
	b.run(f, cdiv(out, 64), cdiv(rows, 64), 128, cat([]uint64{y, xp}, t.wargs(), []uint64{i32(rows), i32(out), i32(in)})...)
}

type gemv struct {
	y, x, w uint64
	out, in int
	t       *tensor
}

// flush launches the deferred GEMVs: one kernel for one matrix, the
// multi-matrix kernel for several.
func (b *Backend) flush() {
	p := b.pending
	if len(p) == 0 {
		return
	}
	b.pending = b.pending[:0]
	if len(p) == 1 {
		g := p[0]
		if b.gemvR4(g.y, g.x, g.t) {
			return
		}
		wpr := b.warpsPerRow(g.out, g.in/8)
		b.run(fGemvBF16, cdiv(g.out, 8/wpr), 1, 256, g.y, g.x, g.w, i32(g.out), i32(g.in), i32(wpr))
		return
	}
	total := 0
	for _, g := range p {
		total += g.out
	}
	wpr := b.warpsPerRow(total, p[0].in/8)
	args := []uint64{p[0].x, i32(p[0].in), i32(wpr)}
	blocks := 0
	for i := 0; i < 4; i++ {
		g := p[min(i, len(p)-1)]
		if i >= len(p) {
			g.out = 0
		}
		blocks += cdiv(g.out, 8/wpr)
		args = append(args, g.y, g.w, i32(g.out))
		if i < 3 {
			args = append(args, i32(blocks))
		}
	}
	b.run(fGemvMulti, blocks, 1, 256, args...)
}

// warpsPerRow picks how many warps share one output row of a GEMV: the
// fewest that give two blocks per SM and at most 16 chunks of 16 bytes per
// lane (long rows: shorter dependency chains, a shorter tail), while every
// lane keeps at least two.
func (b *Backend) warpsPerRow(out, chunks int) int {
	wpr := 1
	for wpr < 8 && (cdiv(out, 8/wpr) < 2*b.sms || chunks > 16*32*wpr) && chunks >= 2*32*wpr*2 {
		wpr *= 2
	}
	return wpr
}

// RMSNorm implements kernels.Backend.
func (b *Backend) RMSNorm(dst, x kernels.Buf, w kernels.Tensor, rows, dim int, eps float32) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	per := dim
	if dim%4 == 0 {
		per = dim / 4
	}
	bx := min(1024, 32*cdiv(per, 32))
	// Prefill rows of hidden width feed a GEMM next (q/k/v, gate/up): the
	// kernel also writes them as its bf16 input (per-head q/k norms, dim
	// < 512, feed RoPE instead).
	var bf cu.DevicePtr
	if rows >= 16 && dim >= 512 && dim%8 == 0 {
		bf = b.ltInput(rows * dim)
	}
	b.run(fRMSNorm, rows, 1, bx, ptr(dptr(dst)), ptr(dptr(x)), ptr(w.(*tensor).vec), i32(dim), f32(eps), ptr(bf))
	b.ltInputFrom(bf, dptr(dst), rows*dim)
}

func (b *Backend) elementwise(f int, threads int, args ...uint64) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	b.run(f, cdiv(threads, 256), 1, 256, args...)
}

// Add implements kernels.Backend.
func (b *Backend) Add(dst, x, y kernels.Buf, n int) {
	b.elementwise(fAdd, cdiv(n, 4), ptr(dptr(dst)), ptr(dptr(x)), ptr(dptr(y)), uint64(n))
}

// AddBias implements kernels.Backend.
func (b *Backend) AddBias(x kernels.Buf, bias kernels.Tensor, rows, dim int) {
	b.elementwise(fAddBias, rows*dim, ptr(dptr(x)), ptr(bias.(*tensor).vec), uint64(rows*dim), i32(dim))
}

// SwiGLU implements kernels.Backend.
func (b *Backend) SwiGLU(dst, gate, up kernels.Buf, n int) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	// A prefill's activation feeds the down projection: its bf16 input too.
	var bf cu.DevicePtr
	if n >= 1<<16 && n%8 == 0 {
		bf = b.ltInput(n)
	}
	b.run(fSwiGLU, cdiv(cdiv(n, 4), 256), 1, 256, ptr(dptr(dst)), ptr(dptr(gate)), ptr(dptr(up)), uint64(n), ptr(bf)) // 4 per thread
	b.ltInputFrom(bf, dptr(dst), n)
}

type ropeKey struct {
	freq *float32
	n    int
}

// RoPE implements kernels.Backend. Inverse frequencies are uploaded once
// per RoPE table.
func (b *Backend) RoPE(x kernels.Buf, pos []int32, heads, headDim int, r *kernels.RoPE) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	half := r.RotaryDim / 2
	pp := b.put(kPos, words(pos))
	n := len(pos) * heads * half
	b.run(fRoPE, cdiv(n, 256), 1, 256, append([]uint64{ptr(dptr(x)), ptr(pp), ptr(b.ropeFreq(r)), i32(len(pos)), i32(heads),
		i32(headDim)}, ropeArgs(r)...)...)
}

// ropeArgs are the rotary kernels' trailing arguments: half the rotary
// width, NeoX (1) or interleaved (0) pairs, the scale (1 when unset).
func ropeArgs(r *kernels.RoPE) []uint64 {
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	neox := 0
	if r.NeoX {
		neox = 1
	}
	return []uint64{i32(r.RotaryDim / 2), i32(neox), f32(scale)}
}

// ropeFreq is the device copy of r's inverse frequencies, uploaded once
// per RoPE table.
func (b *Backend) ropeFreq(r *kernels.RoPE) cu.DevicePtr {
	half := r.RotaryDim / 2
	key := ropeKey{unsafe.SliceData(r.InvFreq), half}
	fp, ok := b.rope[key]
	if !ok {
		fp = b.upload(unsafe.Pointer(&r.InvFreq[0]), int64(half)*4)
		b.rope[key] = fp
	}
	return fp
}

// Gather implements kernels.Backend.
func (b *Backend) Gather(dst, src kernels.Buf, idx []int32, dim int) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	ip := b.put(kGather, words(idx))
	b.run(fGather, len(idx), 1, 256, ptr(dptr(dst)), ptr(dptr(src)), ptr(ip), i32(dim))
}

// ScatterAdd implements kernels.Backend.
func (b *Backend) ScatterAdd(dst, src kernels.Buf, idx []int32, w []float32, dim int) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	ip := b.put(kScatterIdx, words(idx))
	wp := b.put(kScatterW, fwords(w))
	b.run(fScatterAdd, len(idx), 1, 256, ptr(dptr(dst)), ptr(dptr(src)), ptr(ip), ptr(wp), i32(dim))
}

// Argmax returns the index of the largest of the first n elements of x,
// computed on the device (greedy sampling without reading the logits).
// Where nothing wins (all NaN) it is 0, as session.Argmax answers: the
// kernel leaves an index past n then, and a caller that embedded it as the
// next token faulted the device (IllegalAddress: found with a diagnostic
// build whose activations overflowed).
func (b *Backend) Argmax(x kernels.Buf, n int) int32 {
	if !b.enter() {
		b.exit()
		return -1
	}
	defer b.exit()
	res := b.argmaxScratch()
	b.argmax(res, 0, 0, dptr(x), n, false)
	var out int32
	b.fail(cu.MemcpyDtoHAsync(unsafe.Pointer(&out), res, 4, b.stream))
	b.fail(b.stream.Synchronize())
	if out < 0 || int(out) >= n {
		out = 0
	}
	return out
}

var _ kernels.ArgmaxOps = (*Backend)(nil)

// ArgmaxPair implements kernels.ArgmaxOps with argmax_pair: argmax_mb's
// scan and scratch, its best written as the rank's pair. Inside a capture
// the step's output is then the group's pairs (capture.pairs), from which
// CaptureFeed picks the token.
func (b *Backend) ArgmaxPair(dst, x kernels.Buf, n, offset, slot, slots int) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	s := b.argmaxScratch()
	grid, vec := argmaxShape(dptr(x), n)
	b.run(fArgmaxPair, grid, 1, 256, ptr(dptr(dst)), ptr(dptr(x)), i32(n), i32(vec), ptr(s+argmaxPartV*4),
		ptr(s+argmaxPartI*4), ptr(s+argmaxArrive*4), i32(offset), i32(slot), i32(slots))
	if b.cap != nil {
		// The group's slices are equal (models.Plan's vocabulary split).
		b.cap.pairs, b.cap.pairVocab = slots, n*slots
	}
}

// argmaxShape is the grid of argmax_mb and argmax_pair over x[0:n] (a
// block a 4096 values, at most argmaxBlocks) and whether x takes float4
// loads (vec 1: 16-byte aligned).
func argmaxShape(x cu.DevicePtr, n int) (grid, vec int) {
	grid = min(max(cdiv(n, 4096), 1), argmaxBlocks)
	if x%16 == 0 {
		vec = 1
	}
	return grid, vec
}

// Argmax scratch, one buffer: the token, argmax_mb's per-block partials
// (values, then indices) and its arrival counter, zeroed once (the last
// block leaves the counter at zero).
const (
	argmaxBlocks       = 256
	argmaxPartV        = 64 // word offsets
	argmaxPartI        = argmaxPartV + argmaxBlocks
	argmaxArrive       = argmaxPartI + argmaxBlocks
	argmaxScratchWords = argmaxArrive + 64
)

func (b *Backend) argmaxScratch() cu.DevicePtr {
	if b.amax == 0 {
		b.amax = b.alloc(argmaxScratchWords * 4)
		if b.err == nil {
			b.fail(cu.MemsetD32Async(b.amax, 0, argmaxScratchWords, b.stream))
		}
	}
	return b.amax
}

// argmax launches argmax_mb: out[0] = the index of x[0:n]'s largest value,
// also written to ring[*slot] (a fed step, graph.go) where ring is not
// zero. A block a 4096 values (four float4s a thread, all in flight), at
// most argmaxBlocks. pdl: launched after its predecessor by programmatic
// dependent launch (inside a recorded step).
func (b *Backend) argmax(out, ring, slot, x cu.DevicePtr, n int, pdl bool) {
	s := b.argmaxScratch()
	grid, vec := argmaxShape(x, n)
	args := []uint64{ptr(out), ptr(ring), ptr(slot), i32(feedRingLen - 1), ptr(x), i32(n), i32(vec),
		ptr(s + argmaxPartV*4), ptr(s + argmaxPartI*4), ptr(s + argmaxArrive*4)}
	if pdl {
		b.launchFnPDL(b.fn[fArgmax], grid, 1, 256, 0, args...)
		return
	}
	b.run(fArgmax, grid, 1, 256, args...)
}
