//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o decode.ptx decode.cu && gzip -n9f decode.ptx"

import (
	_ "embed"
	"fmt"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The fused decode kernels (decode.cu) implement kernels.FusedOps for one
// activation row and bf16 weights; other shapes and formats are declined
// and run unfused. They are launched with programmatic dependent launch
// unless POCKET_PDL=0, and declined altogether with POCKET_FUSED=0 (the
// A/B switches of switches.go).

//go:embed decode.ptx.gz
var decodePTX []byte

// Kernel indices; each GEMV has a bf16 variant and an FP8 one at index+1.
const (
	dGemvNormMulti = iota
	dGemvNormMulti8
	dGemvAdd
	dGemvAdd8
	dGemvNormSwiGLU
	dGemvNormSwiGLU8
	dGemvR4
	dGemvR48
	dGemvHeads
	dGemvHeads8
	dRopeStore
	dAttnDecode                        // attn_decode_2, _4, _8 (elements per lane)
	dAttnDecodeD   = dAttnDecode + 3   // attn_decode_d_2, _4, _8: the merge deferred (attn_merge.go)
	dAttnMerge     = dAttnDecodeD + 3  // attn_merge_2, _4, _8
	dAttnDecodeW   = dAttnMerge + 3    // attn_decode_w_2, _4, _8: q/k norms over all heads (MiniMax-M2)
	dAttnDecodeDW  = dAttnDecodeW + 3  // attn_decode_dw_2, _4, _8: the same, the merge deferred
	dAttnDecodeQ   = dAttnDecodeDW + 3 // attn_decode_q_4: merged and rounded to int8 (attn_merge.go)
	dF8MMA         = dAttnDecodeQ + 1  // the tensor-core FP8 GEMVs of fp8mma.cu (fp8mma.go) from here
	numDecodeFuncs = dF8MMA + numF8MMA
)

var decodeNames = [dF8MMA]string{"gemv_norm_multi", "gemv_norm_multi8", "gemv_add", "gemv_add8",
	"gemv_norm_swiglu", "gemv_norm_swiglu8", "gemv_r4", "gemv_r48", "gemv_heads", "gemv_heads8", "rope_store", "attn_decode_2", "attn_decode_4",
	"attn_decode_8", "attn_decode_d_2", "attn_decode_d_4", "attn_decode_d_8", "attn_merge_2", "attn_merge_4", "attn_merge_8",
	"attn_decode_w_2", "attn_decode_w_4", "attn_decode_w_8", "attn_decode_dw_2", "attn_decode_dw_4", "attn_decode_dw_8",
	"attn_decode_q_4"}

var _ kernels.FusedOps = (*Backend)(nil)

// loadDecode loads the module (at backend creation: it is small, and every
// model uses it).
func (b *Backend) loadDecode() error {
	fns := map[string]*cFunc{}
	for i, name := range decodeNames {
		fns[name] = &b.dec[i]
	}
	for i := range b.decH {
		if name, ok := kvHalfName(dRopeStore + i); ok {
			fns[name] = &b.decH[i]
		}
	}
	mod, err := loadModule(decodePTX, "decode", fns)
	if err != nil {
		return err
	}
	for half := range 2 {
		for i := range b.attnDecOcc[half] {
			name, ok := decodeNames[dAttnDecode+i], true
			if half == 1 {
				name, ok = kvHalfName(dAttnDecode + i)
			}
			fn, err := mod.Function(name)
			if !ok || err != nil {
				continue
			}
			for g := 1; g <= attnDecMaxG; g++ {
				if n, err := fn.MaxActiveBlocksPerMultiProcessor(32*g, 0); err == nil {
					b.attnDecOcc[half][i][g-1] = n
				}
			}
		}
	}
	b.loadF8MMA()
	return nil
}

// attnDecMaxG is decode_attn.cuh's most query heads (warps) per block
// (AD_MAXG).
const attnDecMaxG = 8

// attnDecKernel is the attn_decode variant for head dim hd, with the merge
// deferred and with q/k norms over the whole rows (wide).
func attnDecKernel(deferred, wide bool, hd int) int {
	f := dAttnDecode
	switch {
	case wide && deferred:
		f = dAttnDecodeDW
	case wide:
		f = dAttnDecodeW
	case deferred:
		f = dAttnDecodeD
	}
	return f + hd/128
}

// attnDecPerSM is how many blocks per SM attn_decode kernel f's splits aim
// at for g query heads per kv head: POCKET_ATTN_DEC_BLOCKS (2), or fewer
// where fewer fit (POCKET_ATTN_DEC_OCC=0: not checked). At ~200-250
// registers a thread, two blocks of four warps share an SM but blocks of
// six (MiniMax-M2's 48/8 heads, Qwen3.5's 24/4) do not, and splits for two
// an SM ran in two waves.
func (b *Backend) attnDecPerSM(f, g int, half bool) int {
	occ := &b.attnDecOcc[0]
	if half {
		occ = &b.attnDecOcc[1] // the float16 twins: other registers
	}
	n := switches.attnDecBlocks
	if switches.attnDecNoOcc {
		return n
	}
	if i := f - dAttnDecode; i >= 0 && i < len(occ) && g >= 1 && g <= attnDecMaxG {
		if occ := occ[i][g-1]; occ > 0 {
			n = min(n, occ)
		}
	}
	return n
}

// runDec launches a decode.cu kernel, with PDL unless switched off.
func (b *Backend) runDec(f, gx, gy, bx int, args ...uint64) {
	if len(switches.ablate) > 0 && ablatedDec(f) {
		return
	}
	b.launchFnPDL(b.dec[f], gx, gy, bx, 0, args...)
}

// numKVDec counts the decode kernels that read or write the KV cache and
// so have float16 twins: rope_store and the attn_decode entries (the
// attn_merge ones between them do not touch the cache).
const numKVDec = dAttnDecodeQ - dRopeStore + 1

// hasKVHalf reports whether decode kernel f has a float16 twin: rope_store
// and the attn_decode entries, not the attn_merge ones between them.
func hasKVHalf(f int) bool {
	return f == dRopeStore || f >= dAttnDecode && f <= dAttnDecodeQ && !(f >= dAttnMerge && f < dAttnMerge+3)
}

// kvHalfName is the float16 twin of decode kernel f (decode_attn.cuh:
// attn_decode_4h; rope_store_h), and whether it has one.
func kvHalfName(f int) (string, bool) {
	switch {
	case !hasKVHalf(f):
		return "", false
	case f == dRopeStore:
		return decodeNames[f] + "_h", true
	}
	return decodeNames[f] + "h", true
}

// runDecKV is runDec for a kernel that reads or writes the KV cache: its
// float16 twin over a half pool.
func (b *Backend) runDecKV(half bool, f, gx, gy, bx int, args ...uint64) {
	if !half {
		b.runDec(f, gx, gy, bx, args...)
		return
	}
	if !hasKVHalf(f) { // (no name built: this runs every decode step)
		b.fail(fmt.Errorf("cuda: decode kernel %s has no float16 KV twin", decodeNames[f]))
		return
	}
	if len(switches.ablate) > 0 && ablatedDec(f) {
		return
	}
	b.launchFnPDL(b.decH[f-dRopeStore], gx, gy, bx, 0, args...)
}

// ablatedDec reports whether POCKET_ABLATE names decode kernel f (or
// "attn" for the decode attention).
func ablatedDec(f int) bool {
	if f >= dF8MMA {
		return ablated(f8mmaNames[f-dF8MMA])
	}
	return ablated(decodeNames[f]) || f >= dAttnDecode && ablated("attn")
}

// groupRows is R of decode.cu: the weight rows one warp streams at once.
const groupRows = 4

// groupWarps picks how many warps share a group's columns: the fewest that
// give switches.gemvBlocks blocks (of 8 warps) per SM (default 2), while
// every lane keeps at least four 16-byte chunks per row.
func (b *Backend) groupWarps(groups, chunks int) int {
	wpr := 1
	for wpr < 8 && cdiv(groups, 8/wpr) < switches.gemvBlocks*b.sms && chunks >= 4*32*wpr*2 {
		wpr *= 2
	}
	return wpr
}

// gform is the format of a set of weights the grouped GEMVs read
// together: bf16 (8 elements per 16-byte chunk), or FP8 E4M3 with block
// scales shared in shape (16 per chunk; a chunk never straddles a scale
// block).
type gform struct {
	fp8        bool
	b0, b1, in int
	nsc        int
}

// chunks is the number of 16-byte chunks per row.
func (f gform) chunks() int {
	if f.fp8 {
		return f.in / 16
	}
	return f.in / 8
}

// args are the kernels' trailing format arguments (b0, b1, nsc).
func (f gform) args() []uint64 { return []uint64{i32(f.b0), i32(f.b1), i32(f.nsc)} }

// groupedReads reports whether the grouped GEMVs read weights of w's
// format and width: bf16 rows of a multiple of 8, FP8 rows of a multiple
// of 16 with scale blocks 16-aligned along the row (a chunk never
// straddles one).
func groupedReads(w *kernels.Weight) bool {
	if len(w.Shape) != 2 {
		return false
	}
	switch in := w.Cols(); w.DType {
	case kernels.BF16:
		return in%8 == 0
	case kernels.F8E4M3:
		return in%16 == 0 && w.ScaleBlock[0] > 0 && w.ScaleBlock[1] > 0 && w.ScaleBlock[1]%16 == 0
	}
	return false
}

// formOf is the format of ws, all with in columns, or false when a grouped
// GEMV cannot read them (another dtype, a shape off the chunking, mixed
// formats).
func formOf(in int, ws ...kernels.Tensor) (gform, bool) {
	var f gform
	for i, w := range ws {
		t, ok := w.(*tensor)
		if !ok || t.w.Cols() != in || t.data == 0 || !groupedReads(t.w) {
			return f, false
		}
		g := gform{in: in, b0: 1, b1: 16, nsc: 1}
		if t.w.DType == kernels.F8E4M3 {
			g = gform{fp8: true, in: in, b0: t.w.ScaleBlock[0], b1: t.w.ScaleBlock[1], nsc: t.nsc}
			if t.scale == 0 {
				return f, false
			}
		}
		if i > 0 && g != f {
			return f, false
		}
		f = g
	}
	return f, len(ws) > 0
}

// variant is the kernel index of f's format.
func (f gform) variant(k int) int {
	if f.fp8 {
		return k + 1
	}
	return k
}

// normVec is the float32 device copy of a norm weight of n elements, or 0.
func normVec(w kernels.Tensor, n int) cu.DevicePtr {
	t, ok := w.(*tensor)
	if !ok || t.vec == 0 || len(t.w.Shape) != 1 || t.w.Shape[0] != n {
		return 0
	}
	return t.vec
}

// NormMatMul implements kernels.FusedOps.
func (b *Backend) NormMatMul(dst []kernels.Buf, x kernels.Buf, norm kernels.Tensor, eps float32, ws []kernels.Tensor, rows int) bool {
	if !switches.fused["qkv"] || rows != 1 || len(ws) == 0 || len(ws) > 4 || len(dst) != len(ws) {
		return false
	}
	in := ws[0].Weight().Cols()
	nv := normVec(norm, in)
	if nv == 0 || x.Len() < in {
		return false
	}
	f, ok := formOf(in, ws...)
	if !ok {
		return b.quantNormMatMul(dst, x, nv, eps, ws) // block formats (quant_mmv.go)
	}
	total := 0
	for i, w := range ws {
		if dst[i].Len() < w.Weight().Rows() {
			return false
		}
		total += w.Weight().Rows()
	}
	if total > maxNormMatMulRows {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if f.fp8 && b.f8mmaNormMatMul(dst, ptr(dptr(x)), ptr(nv), eps, ws, f) {
		return true
	}
	wpr := b.groupWarps(cdiv(total, groupRows), f.chunks())
	per := groupRows * 8 / wpr // rows per block
	args := append([]uint64{ptr(dptr(x)), ptr(nv), f32(eps), i32(in), i32(wpr)}, f.args()...)
	blocks := 0
	for i := range 4 {
		j := min(i, len(ws)-1)
		t := ws[j].(*tensor)
		out := t.w.Rows()
		if i >= len(ws) {
			out = 0
		}
		blocks += cdiv(out, per)
		args = append(args, ptr(dptr(dst[j])), ptr(t.data), ptr(t.scale), i32(out))
		if i < 3 {
			args = append(args, i32(blocks))
		}
	}
	// (gemv_norm_multi at four blocks per SM, one call on selected
	// parameters, measured 244.7 against 246.8 tok/s on Llama-3-8B: not
	// kept.)
	b.runDec(f.variant(dGemvNormMulti), blocks, 1, 256, args...)
	return true
}

// maxNormMatMulRows: a bf16 or FP8 NormMatMul of more rows is declined. A
// vocabulary-sized LM head (models.Decoder offers it the final norm) runs
// faster as RMSNorm then MatMul's GEMV, which is tuned for such heights;
// the block formats' fused GEMV is the same kernel as their MatMul.
const maxNormMatMulRows = 1 << 16

// NormSwiGLU implements kernels.FusedOps.
func (b *Backend) NormSwiGLU(act, x kernels.Buf, norm kernels.Tensor, eps float32, gate, up kernels.Tensor, rows int) bool {
	if !switches.fused["mlp"] || rows != 1 {
		return false
	}
	in := gate.Weight().Cols()
	nv := normVec(norm, in)
	if nv == 0 || x.Len() < in {
		return false
	}
	f, ok := formOf(in, gate, up)
	if !ok {
		return b.quantNormSwiGLU(act, x, nv, eps, gate, up) // block formats (quant_mmv.go)
	}
	g, u := gate.(*tensor), up.(*tensor)
	out := g.w.Rows()
	if u.w.Rows() != out || act.Len() < out {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if f.fp8 && b.f8mmaNormSwiGLU(ptr(dptr(act)), ptr(dptr(x)), ptr(nv), eps, g, u, f) {
		return true
	}
	// A group is two gate and two up rows: two outputs.
	wpr := b.groupWarps(cdiv(out, 2), f.chunks())
	args := []uint64{ptr(dptr(act)), ptr(dptr(x)), ptr(nv), f32(eps), ptr(g.data), ptr(g.scale), ptr(u.data), ptr(u.scale),
		i32(out), i32(in), i32(wpr)}
	b.runDec(f.variant(dGemvNormSwiGLU), cdiv(out, 2*8/wpr), 1, 256,
		append(args, f.args()...)...)
	return true
}

// MatMulAdd implements kernels.FusedOps.
func (b *Backend) MatMulAdd(acc, x kernels.Buf, w kernels.Tensor, rows int) bool {
	if !switches.fused["add"] || rows != 1 {
		return false
	}
	in := w.Weight().Cols()
	if x.Len() < in || acc.Len() < w.Weight().Rows() || dptr(acc) == dptr(x) {
		return false
	}
	f, ok := formOf(in, w)
	if !ok {
		return b.quantMatMulAdd(acc, x, w) // block formats (quant_mmv.go)
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if f.fp8 && b.f8mmaGemv(f8Add, ptr(dptr(acc)), ptr(dptr(x)), w.(*tensor)) {
		return true
	}
	b.gemvGroups(f.variant(dGemvAdd), ptr(dptr(acc)), ptr(dptr(x)), w.(*tensor), f)
	return true
}

// gemvGroups launches one of the single-matrix grouped GEMVs (gemv_add,
// gemv_r4 and their FP8 variants).
func (b *Backend) gemvGroups(k int, y, x uint64, t *tensor, f gform) {
	out := t.w.Rows()
	wpr := b.groupWarps(cdiv(out, groupRows), f.chunks())
	args := []uint64{y, x, ptr(t.data), ptr(t.scale), i32(out), i32(f.in), i32(wpr)}
	b.runDec(k, cdiv(out, groupRows*8/wpr), 1, 256, append(args, f.args()...)...)
}

// RoPEStoreKV implements kernels.FusedOps.
func (b *Backend) RoPEStoreKV(q, k, v kernels.Buf, qNorm, kNorm kernels.Tensor, eps float32, kp kernels.KVPool, layer int,
	pos, slots []int32, heads, kvHeads, headDim int, r *kernels.RoPE) bool {
	p, nq, nk, ok := ropeStoreShape(qNorm, kNorm, kp, layer, kvHeads, headDim, r)
	if !switches.fused["rope"] || !ok || len(pos) == 0 || len(pos) != len(slots) || headDim > 256 {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	pp := b.put(kPos, words(pos))
	sp := b.put(kSlots, words(slots))
	b.runDecKV(p.spec.Half, dRopeStore, heads+kvHeads, len(pos), 128, append([]uint64{ptr(dptr(q)), ptr(dptr(k)), ptr(dptr(v)), ptr(nq),
		ptr(nk), f32(eps), ptr(p.kLayer(layer)), ptr(p.vLayer(layer)), ptr(pp), ptr(sp), ptr(b.ropeFreq(r)), i32(heads),
		i32(kvHeads), i32(headDim)}, ropeArgs(r)...)...)
	return true
}

// ropeStoreShape checks what rope_store and attn_decode both need: the
// pool is this backend's with kvHeads heads of headDim for K and V, the
// layer exists, the rotary width is even and within a head, and the q/k
// norms (both or neither) have device vectors of headDim; it returns the
// pool and the norms' vectors (0 without norms).
func ropeStoreShape(qNorm, kNorm kernels.Tensor, kp kernels.KVPool, layer, kvHeads, headDim int,
	r *kernels.RoPE) (p *kvPool, nq, nk cu.DevicePtr, ok bool) {
	p, ok = kp.(*kvPool)
	if !ok || r.RotaryDim > headDim || r.RotaryDim%2 != 0 || p.spec.KVHeads != kvHeads || p.spec.HeadDimK != headDim ||
		p.spec.HeadDimV != headDim || layer < 0 || layer >= p.spec.Layers {
		return nil, 0, 0, false
	}
	if qNorm != nil || kNorm != nil {
		if nq, nk = normVec(qNorm, headDim), normVec(kNorm, headDim); nq == 0 || nk == 0 {
			return nil, 0, 0, false
		}
	}
	return p, nq, nk, true
}

var _ kernels.FusedAttention = (*Backend)(nil)

// RoPEAttention implements kernels.FusedAttention with attn_decode
// (decode_attn.cuh): one query row, K and V head dims equal and one of
// 64/128/256, at most 8 query heads per kv head, q/k norms per head or
// over the whole rows (attn_decode_w_*: MiniMax-M2's rmsnorm, rope,
// store_kv and attention were five launches a layer), at any context (measured
// on an H200, Llama-3-8B: 8000 positions 190.2 tok/s against 178.5 on
// rope_store + attn_gqa; POCKET_ATTN_DEC_FROM sends long ones there).
func (b *Backend) RoPEAttention(dst, q, k, v kernels.Buf, qNorm, kNorm kernels.Tensor, eps float32, kp kernels.KVPool,
	layer int, pos, slots []int32, seq kernels.AttnSeq, heads, kvHeads, headDim int, r *kernels.RoPE, scale float32) bool {
	if !switches.fused["attn"] || switches.oldAttn || len(pos) != 1 || len(slots) != 1 || kvHeads <= 0 ||
		heads%kvHeads != 0 || heads/kvHeads > 8 || (headDim != 64 && headDim != 128 && headDim != 256) || len(seq.Table) == 0 {
		return false
	}
	p, nq, nk, ok := ropeStoreShape(qNorm, kNorm, kp, layer, kvHeads, headDim, r)
	wide := false // norms over the whole q and k rows
	if !ok && qNorm != nil && kNorm != nil {
		if p, _, _, ok = ropeStoreShape(nil, nil, kp, layer, kvHeads, headDim, r); ok {
			nq, nk = normVec(qNorm, heads*headDim), normVec(kNorm, kvHeads*headDim)
			ok, wide = nq != 0 && nk != 0, true
		}
	}
	if !ok {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	ctx := seq.Start + 1
	if b.cap != nil {
		ctx = len(seq.Table) * p.spec.BlockSize
	}
	if ctx >= switches.attnDecFrom {
		// POCKET_ATTN_DEC_FROM: long contexts on rope_store and attn_gqa.
		return false
	}
	// Splits: about attnDecPerSM blocks per SM over the kv heads (one
	// wave), each at least minChunk positions; the kernel re-derives the
	// chunk from the device-side context (whole batches of 64/E
	// positions), so a captured graph spreads a short context over the
	// splits it was sized for.
	const minChunk = 16
	f := attnDecKernel(b.deferAttn(), wide, headDim)
	// Postponed (attn_merge.go): the op after the attention picks the
	// entry; the splits are sized for the rounding one.
	postpone := switches.attnRound && !b.attnRoundOff && b.deferAttn() && headDim == 128 && !wide
	if postpone {
		f = dAttnDecodeQ
	}
	perSM := b.attnDecPerSM(f, heads/kvHeads, p.spec.Half)
	splits := min(max(cdiv(perSM*b.sms, kvHeads), 1), max(cdiv(ctx, minChunk), 1), 256)
	b.attnScratch(heads*splits*(headDim+2), kvHeads)
	pp := b.put(kPos, words(pos))
	sp := b.put(kSlots, words(slots))
	tp := b.put(kTable, words(seq.Table))
	st := b.put(kStart, []uint32{uint32(seq.Start)})
	args := append([]uint64{ptr(dptr(dst)), ptr(b.part), ptr(b.counters), ptr(dptr(q)), ptr(dptr(k)), ptr(dptr(v)), ptr(nq),
		ptr(nk), f32(eps), ptr(p.kLayer(layer)), ptr(p.vLayer(layer)), ptr(pp), ptr(sp), ptr(b.ropeFreq(r)), ptr(tp), ptr(st),
		i32(kvHeads)}, ropeArgs(r)...)
	args = append(args, i32(p.spec.BlockSize), i32(minChunk), f32(scale))
	def := attnDeferred{dst: dptr(dst), part: b.part, start: st, heads: heads, splits: splits, hd: headDim,
		minChunk: minChunk}
	if postpone {
		def.pending = attnLaunch{args: args, gx: kvHeads, gy: splits, bx: 32 * (heads / kvHeads), half: p.spec.Half}
		b.attnDef = def
		return true
	}
	if b.deferAttn() {
		// The merge is left to the next op, which reads dst (attn_merge.go).
		b.runDecKV(p.spec.Half, f, kvHeads, splits, 32*(heads/kvHeads), args...)
		b.attnDef = def
		return true
	}
	b.runDecKV(p.spec.Half, f, kvHeads, splits, 32*(heads/kvHeads), args...)
	return true
}

// gemvR4 launches y = w·x for one row of a bf16 or FP8 weight on the
// grouped GEMV of decode.cu and reports whether it did: MatMul's one-row
// GEMVs use it when the fused kernels are on.
func (b *Backend) gemvR4(y, x uint64, t *tensor) bool {
	if !switches.fused["add"] {
		return false
	}
	f, ok := formOf(t.w.Cols(), t)
	if !ok {
		return false
	}
	b.gemvGroups(f.variant(dGemvR4), y, x, t, f)
	return true
}
