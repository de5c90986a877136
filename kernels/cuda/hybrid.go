//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o hybrid.ptx hybrid.cu && gzip -n9f hybrid.ptx"
//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o hybrid_chunk.ptx hybrid_chunk.cu && gzip -n9f hybrid_chunk.ptx"

import (
	_ "embed"
	"fmt"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Gated DeltaNet ops (kernels.HybridOps) on the GPU, kernels in hybrid.cu.
// The module is loaded on the first call, so models without linear
// attention never JIT it. No op uploads host data or reads device data,
// so a decode step that runs them stays graph-capturable; the recurrent
// state is updated in place in its device buffer.

//go:embed hybrid.ptx.gz
var hybridPTX []byte

//go:embed hybrid_chunk.ptx.gz
var hybridChunkPTX []byte

var _ kernels.HybridOps = (*Backend)(nil)

// Limits of the kernels (hybrid.cu: CMAXK, GW*GMAXR).
const (
	maxConvKernel = 8
	// convChunk is the rows one thread of causal_conv1d walks: at least
	// maxConvKernel-1, so that a chunk's window lies in x.
	convChunk  = 32
	maxDeltaDK = 256
)

// The chunked delta rule (hybrid.cu: DC, DKC): chunks of deltaChunk
// tokens, for key heads of at most maxChunkDK; passes of more than
// deltaChunkFrom rows take it (POCKET_DELTA_CHUNK_FROM). From 16 rows, not
// 64: on an H200 a 64-token Qwen3.5-27B FP8 pass took 23.1–23.7 ms with
// it against 25.7 token by token (a 32-token one 21.9–22.1 against 22.3),
// where the token-by-token kernel had been 23% of the pass (ncu).
const (
	deltaChunk     = 64
	deltaChunkFrom = 16
	maxChunkDK     = 128
)

type hybridMod struct {
	loaded    bool
	conv      [maxConvKernel]cFunc // causal_conv1d_K
	delta     cFunc
	deltaLean cFunc // gated_delta_rule_l (the default; POCKET_DELTA_LEAN=0 takes delta)
	// deltaSide and stateUpdate are the delta rule split for decode graphs:
	// gated_delta_rule_s and delta_state_update (delta_side.go).
	deltaSide, stateUpdate cFunc
	side                   deltaSideState
	normGated              cFunc
	// normGatedLean is rms_norm_gated_l (POCKET_HYBRID_LEAN, the default).
	normGatedLean cFunc
	sigmoid       cFunc
	// sigmoidMerge is sigmoid_mul_merge_E by head dim (64, 128, 256): the
	// gate applied where a deferred decode attention's splits are merged.
	sigmoidMerge [3]cFunc

	// The chunked kernels' module (hybrid_chunk.cu), loaded on the first
	// chunked pass only (decode-only workers never need it).
	chunkLoaded bool
	chunkKQ     cFunc // delta_chunk_kq
	chunk       cFunc // delta_chunk

	// chunked selects the chunked delta rule for long passes (the
	// default; POCKET_DELTA_CHUNK=0 and SetDeltaChunk turn it off).
	chunked bool
	// Scratch of the chunked form: the chunks' Gram matrices and the
	// rows' l2 factors (hybrid.cu: delta_chunk_kq).
	kq, inv   cu.DevicePtr
	kqN, invN int64
}

// hybridState is the module's state, made on first use without loading
// anything (b.mu held).
func (b *Backend) hybridState() *hybridMod {
	if b.hy == nil {
		b.hy = &hybridMod{chunked: !switches.noDeltaChunk}
	}
	return b.hy
}

// hybridModule loads the kernels once (context current).
func (b *Backend) hybridModule() (*hybridMod, error) {
	m := b.hybridState()
	if m.loaded {
		return m, nil
	}
	names := map[string]*cFunc{"gated_delta_rule": &m.delta, "gated_delta_rule_l": &m.deltaLean,
		"gated_delta_rule_s": &m.deltaSide, "delta_state_update": &m.stateUpdate,
		"rms_norm_gated": &m.normGated, "rms_norm_gated_l": &m.normGatedLean, "sigmoid_mul": &m.sigmoid}
	for k := 1; k <= maxConvKernel; k++ {
		names[fmt.Sprintf("causal_conv1d_%d", k)] = &m.conv[k-1]
	}
	for i := range m.sigmoidMerge {
		names[fmt.Sprintf("sigmoid_mul_merge_%d", 2<<i)] = &m.sigmoidMerge[i]
	}
	if _, err := loadModule(hybridPTX, "hybrid", names); err != nil {
		return nil, err
	}
	m.loaded = true
	return m, nil
}

// chunkModule loads the chunked delta rule's kernels once (context
// current).
func (b *Backend) chunkModule(m *hybridMod) error {
	if m.chunkLoaded {
		return nil
	}
	if _, err := loadModule(hybridChunkPTX, "hybrid_chunk", map[string]*cFunc{"delta_chunk_kq": &m.chunkKQ,
		"delta_chunk": &m.chunk}); err != nil {
		return err
	}
	m.chunkLoaded = true
	return nil
}

// SetDeltaChunk turns the chunked delta rule for passes of more than 64
// rows on or off (default on; POCKET_DELTA_CHUNK=0 off), so that conformance can
// check both paths; it returns the previous setting.
func (b *Backend) SetDeltaChunk(on bool) (was bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.hybridState()
	was, m.chunked = m.chunked, on
	return was
}

// hybridEnter is enter plus the module; false means skip the op (the
// failure, if any, is recorded in b.err).
func (b *Backend) hybridEnter() (*hybridMod, bool) {
	if !b.enter() {
		return nil, false
	}
	m, err := b.hybridModule()
	if err != nil {
		b.fail(err)
		return nil, false
	}
	return m, true
}

// vecOf returns the float32 device copy of a 1-D weight (LoadWeight
// makes one for every vector), failing the backend when there is none.
func (b *Backend) vecOf(w kernels.Tensor, what string) cu.DevicePtr {
	t, ok := w.(*tensor)
	if !ok || t.vec == 0 {
		b.fail(fmt.Errorf("cuda: %s must be a 1-D weight of this backend: %w", what, kernels.ErrUnsupported))
		return 0
	}
	return t.vec
}

// CausalConv1D implements kernels.HybridOps: one thread per channel.
func (b *Backend) CausalConv1D(dst, x, state kernels.Buf, w kernels.Tensor, rows int, s kernels.DeltaShape) {
	m, ok := b.hybridEnter()
	defer b.exit()
	if !ok {
		return
	}
	t, isT := w.(*tensor)
	switch {
	case !isT:
		b.fail(fmt.Errorf("cuda: conv1d weight of another backend: %w", kernels.ErrUnsupported))
		return
	case s.ConvKernel < 1 || s.ConvKernel > maxConvKernel:
		b.fail(fmt.Errorf("cuda: conv1d kernel width %d outside 1..%d: %w", s.ConvKernel, maxConvKernel, kernels.ErrUnsupported))
		return
	case t.w.DType != kernels.F32 && t.w.DType != kernels.F16 && t.w.DType != kernels.BF16:
		b.fail(fmt.Errorf("cuda: conv1d weight %s in %s: %w", t.w.Name, t.w.DType, kernels.ErrUnsupported))
		return
	case t.w.Elems() != s.ConvDim()*s.ConvKernel:
		b.fail(fmt.Errorf("cuda: conv1d weight %s has %d elements, want %d×%d", t.w.Name, t.w.Elems(), s.ConvDim(), s.ConvKernel))
		return
	}
	ch := s.ConvDim()
	// Rows per block: whole passes up to convChunk rows (a decode step is
	// one), chunks of it beyond (hybrid.cu: conv1d).
	b.runHybrid(m.conv[s.ConvKernel-1], cdiv(ch, 128), cdiv(rows, convChunk), 128, ptr(dptr(dst)), ptr(dptr(x)),
		ptr(dptr(state)), ptr(t.data), uint64(t.w.DType), i32(rows), i32(ch), i32(convChunk), flag(switches.hybridLean))
}

// GatedDeltaRule implements kernels.HybridOps: one block per value head
// and 32 state columns, the state in registers for the whole pass, token
// by token; with the chunked form switched on, passes of more than
// deltaChunkFrom rows (key head dim ≤ 128) run it in chunks of 64 tokens
// instead (hybrid.cu: delta_chunk).
func (b *Backend) GatedDeltaRule(dst, qkv, a, bb, state kernels.Buf, aLog, dtBias kernels.Tensor, rows int, s kernels.DeltaShape) {
	m, ok := b.hybridEnter()
	defer b.exit()
	if !ok {
		return
	}
	if !b.deltaShapeOK(s) {
		return
	}
	r := deltaRows{dptr(dst), dptr(qkv), dptr(a), dptr(bb)}
	if b.deltaRuleSide(m, r, dptr(state), aLog, dtBias, rows, s) {
		return
	}
	b.deltaRule(m, r, dptr(state), aLog, dtBias, rows, s, 0)
}

// deltaShapeOK fails the backend for a shape the delta-rule kernels do
// not take.
func (b *Backend) deltaShapeOK(s kernels.DeltaShape) bool {
	if s.DK < 1 || s.DK > maxDeltaDK || s.DV < 1 || s.KHeads < 1 || s.VHeads%s.KHeads != 0 {
		b.fail(fmt.Errorf("cuda: delta rule shape %+v (key head dim ≤ %d): %w", s, maxDeltaDK, kernels.ErrUnsupported))
		return false
	}
	return true
}

// chunkedRows says whether a pass of rows takes the chunked form.
func (m *hybridMod) chunkedRows(rows int, s kernels.DeltaShape) bool {
	return m.chunked && rows > switches.deltaChunkFrom && s.DK <= maxChunkDK
}

// deltaRows are the device addresses of a delta-rule pass's row buffers.
type deltaRows struct{ dst, qkv, a, b cu.DevicePtr }

// at is r moved forward by rows rows.
func (r deltaRows) at(rows int, s kernels.DeltaShape) deltaRows {
	cd := cu.DevicePtr(4 * s.ConvDim())
	vh := cu.DevicePtr(4 * s.VHeads)
	n := cu.DevicePtr(rows)
	return deltaRows{r.dst + n*vh*cu.DevicePtr(s.DV), r.qkv + n*cd, r.a + n*vh, r.b + n*vh}
}

// deltaRule launches a pass of the delta rule (hybridEnter held); snaps,
// for the chunked form only, is the device array of per-chunk snapshot
// addresses of delta_chunk (0: none).
func (b *Backend) deltaRule(m *hybridMod, r deltaRows, state cu.DevicePtr, aLog, dtBias kernels.Tensor, rows int, s kernels.DeltaShape, snaps cu.DevicePtr) {
	al, dt := b.vecOf(aLog, "A_log"), b.vecOf(dtBias, "dt_bias")
	if m.chunkedRows(rows, s) {
		// The chunked form: the chunks' Gram matrices and l2 factors per key
		// head first, then one block per value head and 32 state columns.
		if err := b.chunkModule(m); err != nil {
			b.fail(err)
			return
		}
		chunks := cdiv(rows, deltaChunk)
		kq := b.scratch(&m.kq, &m.kqN, int64(s.KHeads*chunks)*2*deltaChunk*deltaChunk*4)
		inv := b.scratch(&m.inv, &m.invN, int64(rows*s.KHeads)*2*4)
		b.launchFn(m.chunkKQ, chunks, s.KHeads, 256, ptr(kq), ptr(inv), ptr(r.qkv), i32(rows), i32(s.KHeads),
			i32(s.VHeads), i32(s.DK), i32(s.DV))
		b.launchFn(m.chunk, s.VHeads*cdiv(s.DV, 32), 1, 256, ptr(r.dst), ptr(r.qkv), ptr(r.a),
			ptr(r.b), ptr(state), ptr(al), ptr(dt), ptr(kq), ptr(inv), i32(rows), i32(s.KHeads),
			i32(s.VHeads), i32(s.DK), i32(s.DV), ptr(snaps))
		return
	}
	f := m.delta
	if switches.deltaLean {
		f = m.deltaLean
	}
	b.runHybrid(f, s.VHeads*cdiv(s.DV, 32), 1, 256, ptr(r.dst), ptr(r.qkv), ptr(r.a), ptr(r.b),
		ptr(state), ptr(al), ptr(dt), i32(rows), i32(s.KHeads), i32(s.VHeads), i32(s.DK), i32(s.DV))
}

var _ kernels.DeltaSegmenter = (*Backend)(nil)

// GatedDeltaRuleSegments implements kernels.DeltaSegmenter. Consecutive
// passes that would each take the chunked form, and whose boundaries fall
// on the first one's chunk boundaries, are one delta_chunk launch that
// writes the state at those boundaries (the chunks are the same, so are
// the results); any other pass runs alone, its snapshot a device copy.
func (b *Backend) GatedDeltaRuleSegments(dst, qkv, a, bb, state kernels.Buf, aLog, dtBias kernels.Tensor, rows int, s kernels.DeltaShape, ends []int, snaps []kernels.Buf) {
	m, ok := b.hybridEnter()
	defer b.exit()
	if !ok {
		return
	}
	if !b.deltaShapeOK(s) {
		return
	}
	if len(snaps) != len(ends) {
		b.fail(fmt.Errorf("cuda: %d snapshots for %d segment ends", len(snaps), len(ends)))
		return
	}
	bounds := append(slices.Clone(ends), rows)
	base := deltaRows{dptr(dst), dptr(qkv), dptr(a), dptr(bb)}
	st, n := dptr(state), int64(s.RecStateLen())*4
	r0 := 0
	for k := 0; k < len(bounds); {
		j := k // the run: passes k..j from r0
		if m.chunkedRows(bounds[k]-r0, s) {
			for j+1 < len(bounds) && (bounds[j]-r0)%deltaChunk == 0 && m.chunkedRows(bounds[j+1]-bounds[j], s) {
				j++
			}
		}
		var addrs cu.DevicePtr
		if j > k { // snapshots inside the run, by chunk
			per := make([]uint64, cdiv(bounds[j]-r0, deltaChunk))
			for x := k; x < j; x++ {
				per[(bounds[x]-r0)/deltaChunk-1] = uint64(dptr(snaps[x]))
			}
			addrs = b.put(kDeltaSnaps, unsafe.Slice((*uint32)(unsafe.Pointer(&per[0])), 2*len(per)))
		}
		b.deltaRule(m, base.at(r0, s), st, aLog, dtBias, bounds[j]-r0, s, addrs)
		if j < len(ends) { // the run ends on a snapshot
			b.fail(cu.MemcpyDtoDAsync(dptr(snaps[j]), st, n, b.stream))
		}
		r0, k = bounds[j], j+1
	}
}

// RMSNormGated implements kernels.HybridOps: one block per row.
func (b *Backend) RMSNormGated(dst, x, z kernels.Buf, w kernels.Tensor, rows, dim int, eps float32) {
	m, ok := b.hybridEnter()
	defer b.exit()
	if !ok {
		return
	}
	wv := b.vecOf(w, "gated norm weight")
	f, bx := m.normGated, min(256, 32*cdiv(dim, 32))
	if switches.hybridLean && dim <= 4*bx {
		f = m.normGatedLean
	}
	b.runHybrid(f, rows, 1, bx, ptr(dptr(dst)), ptr(dptr(x)), ptr(dptr(z)), ptr(wv), i32(dim), f32(eps))
}

// runHybrid launches f with programmatic dependent launch unless
// POCKET_HYBRID_PDL=0 (causal_conv1d, gated_delta_rule and rms_norm_gated
// wait for their predecessor themselves; measured on an H200, Qwen3.5-27B
// FP8 decode 122.8 against 120.4 tok/s). With the three on PDL, one
// clustered kernel for a layer's whole one-token mix (a cluster per key
// head) measured 122.7 against 122.6 and was not kept.
func (b *Backend) runHybrid(f cFunc, gx, gy, bx int, args ...uint64) {
	if ablated("hybrid") {
		return
	}
	if !switches.hybridPDL {
		b.launchFn(f, gx, gy, bx, args...)
		return
	}
	b.launchFnPDL(f, gx, gy, bx, 0, args...)
}

// SigmoidMul implements kernels.HybridOps. After a decode attention whose
// merge was left to the op after it (attn_merge.go) and whose output is x,
// the merge happens here, in the same launch (sigmoid_mul_merge_E), and
// the attention keeps deferring.
func (b *Backend) SigmoidMul(x, gate kernels.Buf, n int) {
	t, ok := b.enterTaking(dptr(x))
	defer b.exit()
	if !ok {
		return
	}
	m, err := b.hybridModule()
	if err != nil {
		b.fail(err)
		return
	}
	lean := flag(switches.hybridLean)
	if d := t.attn; d.dst != 0 {
		if (d.hd == 64 || d.hd == 128 || d.hd == 256) && d.heads*d.hd == n {
			// A block a head, a warp per sixteen splits (at most 8).
			warps := min(max(cdiv(d.splits, 16), 1), 8)
			b.launchPartials(d)
			b.runHybrid(m.sigmoidMerge[d.hd/128], d.heads, 1, 32*warps, ptr(dptr(x)), ptr(dptr(gate)), ptr(d.part),
				ptr(d.start), i32(d.heads), i32(d.splits), i32(d.minChunk), lean)
			return
		}
		b.mergeAttn(d)
	}
	b.runHybrid(m.sigmoid, cdiv(n, 256), 1, 256, ptr(dptr(x)), ptr(dptr(gate)), uint64(n), lean)
}
