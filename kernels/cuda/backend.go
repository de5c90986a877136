//go:build cuda

package cuda

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

//go:embed kernels.ptx.gz
var ptx []byte

// kernel names, loaded once from the embedded module.
const (
	fEmbed = iota
	fMatmulGeneric
	fGemmGeneric
	fGemmBF16
	fGemmFP8
	fRMSNorm
	fAdd
	fAddBias
	fSwiGLU
	fRoPE
	fGather
	fScatterAdd
	fStoreKV
	fAttnPartial
	fArgmax
	fGemvMulti
	fToBF16
	fAttnPrefill64
	fAttnPrefill128
	fAttnPrefill128x3
	fAttnGQA
	fAttnMerge
	fAttnPrefill128q3
	fAttnPrefill128q4
	fDeqFP8
	fCopyColsF32
	fAttnPrefill256
	fAttnPrefillMLA192
	fAttnPrefillMLA24
	fAttnPrefillMLA192m
	fAttnPrefillMLA24m
	fKVReadCols
	// The float16 KV cache's twins of the kernels above (kvPool.fn).
	fStoreKVh
	fAttnPartialH
	fAttnGQAh
	fAttnPrefill64h
	fAttnPrefill128h
	fAttnPrefill128x3h
	fAttnPrefill128q3h
	fAttnPrefill128q4h
	fAttnPrefill256h
	fArgmaxPair  // a rank's half of the distributed argmax (kernels.ArgmaxOps)
	fArgmaxPairs // the token from the group's pairs, for a fed step
	fGemvBF16    // + rows-1, 8 of them
	fGemvFP8     = fGemvBF16 + 8
	numFuncs     = fGemvFP8 + 8
)

var funcNames = func() []string {
	n := []string{"embed", "matmul_generic", "gemm_generic", "gemm_bf16", "gemm_fp8", "rmsnorm", "add", "add_bias",
		"swiglu", "rope", "gather", "scatter_add", "store_kv", "attn_partial", "argmax_mb", "gemv_bf16_multi",
		"to_bf16", "attn_prefill_64", "attn_prefill_128", "attn_prefill_128_3", "attn_gqa", "attn_merge",
		"attn_prefill_128_q3", "attn_prefill_128_q4", "deq_fp8_bf16", "copy_cols_f32", "attn_prefill_256",
		"attn_prefill_mla_192", "attn_prefill_mla_24", "attn_prefill_mla_192m", "attn_prefill_mla_24m", "kv_read_cols",
		"store_kv_h", "attn_partial_h", "attn_gqa_h", "attn_prefill_64_h", "attn_prefill_128_h", "attn_prefill_128_3_h",
		"attn_prefill_128_q3_h", "attn_prefill_128_q4_h", "attn_prefill_256_h", "argmax_pair", "argmax_pairs"}
	for i := 1; i <= 8; i++ {
		n = append(n, fmt.Sprintf("gemv_bf16_%d", i))
	}
	for i := 1; i <= 8; i++ {
		n = append(n, fmt.Sprintf("gemv_fp8_%d", i))
	}
	return n
}()

// Backend implements kernels.Backend on one GPU. See the package comment
// for how calls reach the GPU's thread.
type Backend struct {
	mu     sync.Mutex
	dev    cu.Device
	ctx    cu.CUContext
	stream cu.Stream
	s      cStream
	fn     [numFuncs]cFunc
	dec    [numDecodeFuncs]cFunc // decode.cu
	decH   [numKVDec]cFunc       // decode.cu's float16 KV twins (runDecKV)
	// staging: page-locked chunks for uploads that pass through the host
	// (stagingBufs, hostreg.go)
	staging [2][]byte
	// attnDecOcc[0][i][g-1] is how many blocks of g warps of attn_decode
	// kernel dAttnDecode+i fit on an SM (0: unknown); attnDecOcc[1] is
	// the same for its float16 KV twin.
	attnDecOcc [2][dF8MMA - dAttnDecode][attnDecMaxG]int
	// attnDef is a decode attention whose merge waits for the next op
	// (attn_merge.go).
	attnDef attnDeferred
	// attnMergeSelf: a deferred merge needed its own launch, so the
	// attention merges itself (attn_merge.go).
	attnMergeSelf bool
	// attnRoundOff: no attention waits for its successor to pick the
	// rounding entry (SetAttnRound; attn_merge.go).
	attnRoundOff bool
	// rounded is an activation whose int8 rounding the op that wrote it
	// left in a quant scratch (qmv_swiglu_q): only the op right after may
	// take it (enterTaking, quant_mmv.go).
	rounded roundedAct
	// qadd is a block-format MatMulAdd not yet launched: a NormMatMul or
	// NormSwiGLU right after it on its output launches it as qmv_add_q,
	// which rounds the sum for that op's norm; any other op launches it
	// as it is (quant_mmv.go).
	qadd pendingAdd
	// swiq: block-format SwiGLU GEMVs round their output themselves
	// (POCKET_QMV_SWIQ, SetSwiGLURound).
	swiq bool
	pipe pipeFuncs // fp8pipe.cuh's kernels (fp8pipe.go)
	// fp8 are the FP8 matrices loaded that may get a tiled copy, until
	// PrepareDecode (fp8tiles.go).
	fp8   []*tensor
	sms   int
	args  [32]uint64
	nargs int
	err   error // first failure; later ops are skipped

	uploads [numKinds]upload
	rope    map[ropeKey]cu.DevicePtr
	part    cu.DevicePtr // attention partials
	partN   int64
	// counters: one per (row, head) of a decode attention, for the
	// last-split-merges scheme of attn_partial.
	counters  cu.DevicePtr
	countersN int
	gqaFrom   int        // see SetGQAFrom
	deq       deqScratch // chunked prefill GEMMs over block-format and FP8 weights (deqgemm.go)
	kvHalves  []uint16   // a float16 pool's block on its way to or from the host (kvBlockCopy)
	// prefillSplitOff keeps prefill attention unsplit (SetPrefillSplits).
	prefillSplitOff bool
	amax            cu.DevicePtr // argmax_mb's token, partials and arrival counter (argmaxScratch)
	feed            feedRing     // the fed steps' tokens (graph.go)
	cap             *capture

	pending []gemv     // single-row bf16 GEMVs on one input, not yet launched
	lt      lt         // cuBLASLt prefill GEMMs (cublaslt.go)
	q       *quantMod  // GGUF block-format kernels (quant.go), loaded on first use
	moe     *moeMod    // MoE routing and indexed experts (moe.go), loaded on first use
	hy      *hybridMod // Gated DeltaNet kernels (hybrid.go), loaded on first use
	mla     *mlaMod    // latent attention kernels (mla.go), loaded on first use
	tpnorm  *tpnormMod // split RMSNorm of TP groups (tpnorm.go), loaded on first use
	sample  *sampleMod // sampling on the device (sample.go), loaded on first use
	f8g     *f8gemmMod // E4M3 prefill GEMM (fp8gemm.go), loaded on first use
	attn128 int        // prefill attention kernel for head dim 128

	poolMu sync.Mutex
	free   map[int64][]cu.DevicePtr
	// Resident is the device memory this backend allocated (weights, KV,
	// activations), in bytes.
	Resident int64
}

var _ kernels.Backend = (*Backend)(nil)

// New creates a private context on GPU ordinal and loads the kernels.
func New(ordinal int) (*Backend, error) {
	return newBackend(ordinal, func(dev cu.Device) (cu.CUContext, error) {
		ctx, err := dev.MakeContext(cu.SchedAuto)
		if err != nil {
			return ctx, fmt.Errorf("cuda: context on device %d: %w", ordinal, err)
		}
		return ctx, nil
	})
}

// newBackend makes the context with makeCtx (which leaves it current on
// this locked thread), then the stream, the kernels and cuBLASLt.
func newBackend(ordinal int, makeCtx func(cu.Device) (cu.CUContext, error)) (*Backend, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	ctx, err := makeCtx(dev)
	if err != nil {
		return nil, err
	}
	b := &Backend{dev: dev, ctx: ctx, rope: map[ropeKey]cu.DevicePtr{}, free: map[int64][]cu.DevicePtr{},
		swiq: switches.qmvSwiQ}
	if b.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: stream: %w", err)
	}
	b.s = cstream(b.stream)
	fns := map[string]*cFunc{}
	for i, name := range funcNames {
		fns[name] = &b.fn[i]
	}
	if _, err := loadModule(ptx, "kernels", fns); err != nil {
		return nil, err
	}
	if err := b.loadDecode(); err != nil {
		return nil, err
	}
	if b.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return nil, err
	}
	b.openLt()
	b.attn128 = attnPrefill128[""]
	if f, ok := attnPrefill128[switches.attnPrefill]; ok {
		b.attn128 = f
	}
	if switches.attnOcc2 {
		b.attn128 = fAttnPrefill128
	}
	return b, nil
}

// Name implements kernels.Backend.
func (b *Backend) Name() string { return "cuda" }

// DeviceName is the GPU's marketing name.
func (b *Backend) DeviceName() string {
	n, _ := b.dev.Name()
	return n
}

// Err reports the first CUDA failure; after one, ops do nothing (a CUDA
// fault poisons the context, so the process should be restarted).
func (b *Backend) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// enter takes the lock, makes the context current on this OS thread and
// launches any deferred work: a decode attention's merge and GEMVs (every
// op may read their outputs).
func (b *Backend) enter() bool {
	_, ok := b.enterTaking(0)
	return ok
}

// taken is what an op whose input is x takes over from the op before it:
// a deferred attention merge whose output is x (the op merges it itself),
// or x's int8 rounding (qmv_swiglu_q).
type taken struct {
	attn    attnDeferred
	rounded roundedAct
	add     pendingAdd // enterNorm only
}

// enterTaking is enter for an op whose input is x: what the op before
// left for x is handed to it (taken) instead of launched or dropped.
func (b *Backend) enterTaking(x cu.DevicePtr) (taken, bool) { return b.enterWith(x, false) }

// enterNorm is enterTaking for a block-format op that norms x itself
// (quantNormMatMul, quantNormSwiGLU): a deferred MatMulAdd into x is
// handed over too.
func (b *Backend) enterNorm(x cu.DevicePtr) (taken, bool) { return b.enterWith(x, true) }

func (b *Backend) enterWith(x cu.DevicePtr, add bool) (taken, bool) {
	if !b.lockOnly() {
		return taken{}, false
	}
	var t taken
	if add && x != 0 && b.qadd.acc == x {
		t.add, b.qadd = b.qadd, pendingAdd{}
	}
	b.launchAdd()
	if x != 0 && b.attnDef.dst == x {
		t.attn, b.attnDef = b.attnDef, attnDeferred{}
	}
	if x != 0 && b.rounded.act == x {
		t.rounded = b.rounded
	}
	b.rounded = roundedAct{}
	b.settleAttn()
	b.flush()
	b.lt.bfSrc = 0 // any op may write the converted GEMM input's source
	return t, true
}

// enterKeep is enter without the GEMV flush (for MatMul, which may join
// the deferred group).
func (b *Backend) enterKeep() bool {
	if !b.lock() {
		return false
	}
	b.settleAttn()
	return true
}

// lock takes the lock and makes the context current on this OS thread,
// and launches a deferred MatMulAdd (every op may read its output).
func (b *Backend) lock() bool {
	if !b.lockOnly() {
		return false
	}
	b.launchAdd()
	return true
}

// lockOnly is lock without the deferred MatMulAdd.
func (b *Backend) lockOnly() bool {
	b.mu.Lock()
	runtime.LockOSThread()
	if b.err != nil {
		return false
	}
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		b.fail(err)
		return false
	}
	return true
}

func (b *Backend) exit() {
	runtime.UnlockOSThread()
	b.mu.Unlock()
}

func (b *Backend) fail(err error) {
	if err != nil && b.err == nil {
		b.err = err
	}
}

// Sync waits for all queued work and returns the first error.
func (b *Backend) Sync() error {
	if b.enter() {
		b.fail(b.stream.Synchronize())
	}
	defer b.exit()
	return b.err
}

// argument building: every kernel parameter is one 64-bit word.
func (b *Backend) a(v ...uint64) { b.nargs = copy(b.args[:], v) }

func ptr(p cu.DevicePtr) uint64 { return uint64(p) }
func i32(v int) uint64          { return uint64(uint32(int32(v))) }
func f32(v float32) uint64      { return uint64(math.Float32bits(v)) }

// flag is a kernel's int argument 1 for true, 0 for false.
func flag(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// run launches kernel f of kernels.cu.
func (b *Backend) run(f, gx, gy, bx int, args ...uint64) { b.launchFn(b.fn[f], gx, gy, bx, args...) }

// launchFn launches f on a (gx, gy) grid of bx-thread blocks; nothing
// after a failure, nothing for an empty grid.
func (b *Backend) launchFn(f cFunc, gx, gy, bx int, args ...uint64) {
	b.launchFnShm(f, gx, gy, bx, 0, args...)
}

// launchFnShm is launchFn with shm bytes of dynamic shared memory (past
// 48 KiB only for a kernel given more by setMaxShm).
func (b *Backend) launchFnShm(f cFunc, gx, gy, bx, shm int, args ...uint64) {
	if b.err != nil || gx <= 0 || gy <= 0 {
		return
	}
	b.a(args...)
	b.fail(launchShm(f, gx, gy, bx, shm, b.s, &b.args, b.nargs))
}

// launchFnPDL is launchFnShm with programmatic dependent launch (the
// kernel calls griddepcontrol.wait before it reads its predecessor's
// results), or without where POCKET_PDL=0.
func (b *Backend) launchFnPDL(f cFunc, gx, gy, bx, shm int, args ...uint64) {
	if switches.noPDL {
		b.launchFnShm(f, gx, gy, bx, shm, args...)
		return
	}
	if b.err != nil || gx <= 0 || gy <= 0 {
		return
	}
	b.a(args...)
	b.fail(launchPDLShm(f, gx, gy, bx, shm, b.s, &b.args, b.nargs))
}

// loadModule JIT-loads a PTX module (what names it in errors) and
// resolves the kernels fns names into their cFuncs.
func loadModule(gz []byte, what string, fns map[string]*cFunc) (cu.Module, error) {
	mod, err := loadPTX(gz)
	if err != nil {
		return mod, fmt.Errorf("cuda: load %s PTX: %w", what, err)
	}
	names := make(map[string]cFunc, len(fns))
	for name, f := range fns {
		fn, err := mod.Function(name)
		if err != nil {
			return mod, fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		*f = cfunc(fn)
		names[name] = *f
	}
	probeModule(mod, what, names)
	return mod, nil
}

// loadPTX loads a module from its embedded, gzipped PTX. The modules'
// PTX is kept gzipped in the tree (each .go file's `go generate` line
// compresses nvcc's output: 16.6 MB of text is 3.1 MB), so that the
// working tree and a GPU host's copy of it stay small; inflating it
// costs ~0.1 s at a module's first load, beside the driver's JIT.
func loadPTX(gz []byte) (cu.Module, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return cu.Module{}, err
	}
	text, err := io.ReadAll(r)
	if err != nil {
		return cu.Module{}, err
	}
	return cu.LoadData(string(text))
}

// ---------------------------------------------------------------- buffers

// Buf is a float32 device buffer, or a part of one (ViewBuf): the part
// keeps its whole alive, whose finalizer frees the memory.
type Buf struct {
	p     cu.DevicePtr
	n     int
	whole *Buf
}

// Len implements kernels.Buf.
func (d *Buf) Len() int { return d.n }

// Ptr is the device address (for tests and graph inputs).
func (d *Buf) Ptr() uintptr { return uintptr(d.p) }

func dptr(x kernels.Buf) cu.DevicePtr { return x.(*Buf).p }

func (b *Backend) alloc(bytes int64) cu.DevicePtr {
	bytes = (bytes + 255) &^ 255
	b.poolMu.Lock()
	if l := b.free[bytes]; len(l) > 0 {
		p := l[len(l)-1]
		b.free[bytes] = l[:len(l)-1]
		b.poolMu.Unlock()
		return p
	}
	b.poolMu.Unlock()
	p, err := cu.MemAlloc(bytes)
	if err != nil {
		b.fail(fmt.Errorf("cuda: allocate %d bytes: %w", bytes, err))
		return 0
	}
	b.Resident += bytes
	return p
}

// scratch returns at least n bytes at *p (capacity *have), growing it to
// max(n, 1 MiB) when short. The old buffer is not freed: queued work or a
// captured graph may still use it.
func (b *Backend) scratch(p *cu.DevicePtr, have *int64, n int64) cu.DevicePtr {
	if n > *have {
		*have = max(n, 1<<20)
		*p = b.alloc(*have)
	}
	return *p
}

// NewBuf implements kernels.Backend. Buffers come from a per-size free
// list; a collected Buf returns its memory there (stream order keeps a
// re-used buffer's zeroing behind the last kernel that read it).
func (b *Backend) NewBuf(n int) kernels.Buf {
	d := &Buf{n: n}
	if !b.enter() {
		b.exit()
		return d
	}
	defer b.exit()
	bytes := int64(max(n, 1)) * 4
	d.p = b.alloc(bytes)
	if d.p != 0 {
		b.fail(cu.MemsetD32Async(d.p, 0, int64(max(n, 1)), b.stream))
		size := (bytes + 255) &^ 255
		runtime.SetFinalizer(d, func(d *Buf) {
			b.poolMu.Lock()
			b.free[size] = append(b.free[size], d.p)
			b.poolMu.Unlock()
		})
	}
	return d
}

// Write implements kernels.Backend.
func (b *Backend) Write(dst kernels.Buf, off int, src []float32) {
	if len(src) == 0 {
		return
	}
	if b.enter() {
		if b.cap != nil {
			b.cap.err = fmt.Errorf("cuda: Write during graph capture: %w", kernels.ErrUnsupported)
		} else {
			b.fail(cu.MemcpyHtoDAsync(dptr(dst)+cu.DevicePtr(off*4), unsafe.Pointer(&src[0]), int64(len(src))*4, b.stream))
		}
	}
	b.exit()
}

// Read implements kernels.Backend; it waits for the queued work. After a
// CUDA failure dst is filled with NaN.
func (b *Backend) Read(src kernels.Buf, off int, dst []float32) {
	if len(dst) == 0 {
		return
	}
	if b.enter() {
		if b.cap != nil {
			// Remembered as the step's output, not performed (see Graph).
			b.cap.reads++
			b.cap.out, b.cap.outN = src, len(dst)
			b.exit()
			return
		} else {
			b.fail(cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), dptr(src)+cu.DevicePtr(off*4), int64(len(dst))*4, b.stream))
			b.fail(b.stream.Synchronize())
		}
	}
	if b.err != nil {
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
	}
	b.exit()
}

// ---------------------------------------------------------------- host arrays

// Small host arrays (token ids, positions, slots, block tables, indices)
// reach kernels through one device buffer per kind. A copy is queued on
// the stream only when the contents change, so the 64 RoPE calls of a step
// share one upload of the positions.
const (
	kIDs = iota
	kPos
	kSlots
	kTable
	kStart
	kGather
	kScatterIdx
	kScatterW
	kDeltaSnaps
	kFeedSlot // a fed step's place in the token ring (graph.go)
	kDrawRule // a fed draw's rule and variate (sample_draw_grid_f's DrawRule)
	numKinds
)

type upload struct {
	p    cu.DevicePtr
	cap  int
	last []uint32
	ok   bool
}

// put returns a device copy of v (32-bit words) for kind.
func (b *Backend) put(kind int, v []uint32) cu.DevicePtr {
	if b.cap != nil {
		return b.cap.put(b, kind, v)
	}
	u := &b.uploads[kind]
	if u.ok && slices.Equal(u.last, v) {
		return u.p
	}
	if len(v) > u.cap {
		if u.p != 0 {
			b.fail(b.stream.Synchronize())
			cu.MemFree(u.p)
		}
		u.cap = max(len(v), 256) // at least 32: attn_decode reads a table's first 32 words whatever its length
		p, err := cu.MemAlloc(int64(u.cap) * 4)
		b.fail(err)
		u.p = p
	}
	u.last = append(u.last[:0], v...)
	u.ok = true
	if len(v) > 0 {
		b.fail(cu.MemcpyHtoDAsync(u.p, unsafe.Pointer(&u.last[0]), int64(len(v))*4, b.stream))
	}
	return u.p
}

func words(v []int32) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
}
func fwords(v []float32) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
}
