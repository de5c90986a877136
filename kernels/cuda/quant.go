//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o quant.ptx quant.cu && gzip -n9f quant.ptx"

import (
	_ "embed"
	"fmt"
	"maps"
	"strings"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/quant"
)

// GGUF block formats on the GPU (kernels in quant.cu): the blocks are
// uploaded as stored and decoded in registers by
//   - MatMul with ≤ 32 rows: a GEMV per format (qgemv_*, passes of ≤ 8 rows), fp32 sums;
//     except one row (decode) of Q4_K, Q6_K and Q8_0: the activations are
//     rounded to int8 per 32 elements and the GEMV sums by dp4a,
//     llama.cpp's mmvq scheme (NMSE ~1e-5): qx_norm + qmv (quant_mmv.go,
//     which also implements the FusedOps for these formats), or with
//     POCKET_QGEMV=v1 the first kernels qx_quant + qgemv8_*;
//     POCKET_QGEMV=exact keeps the fp32 GEMV for these too;
//   - MatMul with more rows (prefill): the weight is dequantized to bf16 into
//     a scratch buffer, at most quantScratch bytes of it at a time (row
//     chunks of the matrix; never a resident full-precision copy), and
//     multiplied by cuBLASLt (or the built-in bf16 GEMM without it);
//   - Embed: the requested rows decoded exactly to float32.
//
// The lattice formats (IQ1_S .. IQ3_S) decode with codebooks in device
// globals that the module load fills from kernels/quant's tables
// (uploadLattices), so there is one transcription of them, on the Go side.
//
// The module is loaded on the first quantized weight, so bf16/FP8-only
// models never JIT it.

//go:embed quant.ptx.gz
var quantPTX []byte

// quantNames maps the executable block formats to their kernel suffix.
var quantNames = map[kernels.DType]string{
	kernels.Q8_0: "q8_0", kernels.Q4_0: "q4_0", kernels.Q4_1: "q4_1", kernels.Q5_0: "q5_0", kernels.Q5_1: "q5_1",
	kernels.Q2_K: "q2_k", kernels.Q3_K: "q3_k", kernels.Q4_K: "q4_k", kernels.Q5_K: "q5_k", kernels.Q6_K: "q6_k",
	kernels.IQ4_NL: "iq4_nl", kernels.IQ4_XS: "iq4_xs", kernels.MXFP4: "mxfp4",
	kernels.IQ1_S: "iq1_s", kernels.IQ1_M: "iq1_m", kernels.IQ2_XXS: "iq2_xxs", kernels.IQ2_XS: "iq2_xs",
	kernels.IQ2_S: "iq2_s", kernels.IQ3_XXS: "iq3_xxs", kernels.IQ3_S: "iq3_s",
}

// latticeGlobals names the device codebook (quant_iq.cuh) that each
// lattice format decodes with; IQ1_M shares IQ1_S's.
var latticeGlobals = map[kernels.DType]string{
	kernels.IQ1_S: "gridIQ1S", kernels.IQ1_M: "gridIQ1S", kernels.IQ2_XXS: "gridIQ2XXS", kernels.IQ2_XS: "gridIQ2XS",
	kernels.IQ2_S: "gridIQ2S", kernels.IQ3_XXS: "gridIQ3XXS", kernels.IQ3_S: "gridIQ3S",
}

// loadable reports whether LoadWeight accepts d: the stored formats the
// kernels read, plus the block formats above. kernels.Executes("cuda", d)
// must agree (quant_test.go checks).
func loadable(d kernels.DType) bool {
	switch d {
	case kernels.F32, kernels.F16, kernels.BF16, kernels.F8E4M3:
		return true
	}
	_, ok := quantNames[d]
	return ok
}

func isQuant(d kernels.DType) bool { _, ok := quantNames[d]; return ok }

// layoutNames maps every layout the block kernels are built for to its
// kernel suffix: the file formats, and the regrouped ones (regroup.go).
func layoutNames() map[kernels.DType]string {
	m := maps.Clone(quantNames)
	m[dtQ6KG], m[dtQ80G], m[dtQ4KG] = "q6_kg", "q8_0g", "q4_kg"
	return m
}

// quantPad is extra device memory after each block tensor: the kernels read
// aligned words and may touch up to 8 bytes past the last block.
const quantPad = 64

// quantGEMVRows is the most activation rows that go through the GEMV
// kernels (fp32 throughout, in passes of up to 8 rows) rather than the bf16
// GEMM: decode, small MoE groups and short prompts stay exact to fp32.
const quantGEMVRows = 32

// QuantScratchBytes bounds the bf16 scratch of a block-format prefill GEMM
// (conformance lowers it to exercise the chunked path).
var QuantScratchBytes = 256 << 20

// int8Act lists the formats with an int8-activation batch-1 GEMV (qgemv8_*).
var int8Act = map[kernels.DType]bool{kernels.Q4_K: true, kernels.Q6_K: true, kernels.Q8_0: true}

// QuantInt8Act reports whether a one-row MatMul of d rounds the activations
// to int8 (so conformance knows its tolerance).
func QuantInt8Act(d kernels.DType) bool { return int8Act[d] && !switches.exactQGEMV }

type quantFns struct {
	gemv  [4]cFunc // NR = 1, 2, 4, 8
	gemv8 cFunc    // one row, int8 activations (nil: none)
	embed cFunc
	deq   cFunc
}

// qmvKernels are one geometry's qmv, qmv_swiglu, qmv_swiglu_q (and its
// twins for the regrouped layouts, qmv_swiglu_qg, and for Q4_K with a
// warp's passes back to back, qmv_swiglu_qf) and qmv_add_q.
type qmvKernels struct {
	g                                 qmvGeom
	mv, swi, swiq, swiqG, swiqF, addq cFunc
}

type quantMod struct {
	fns   map[kernels.DType]*quantFns
	iqErr error        // why the lattice codebooks could not be filled (their formats then refuse to load)
	qx    cFunc        // qx_quant
	qxn   cFunc        // qx_norm (quant_mmv.go)
	qxm   cFunc        // qx_merge: a deferred attention merged and rounded (attn_merge.go)
	addq2 cFunc        // qmv_add_q2_4: qmv_add_q_4_3 with two steps a warp before the wait (quant_mmv.go)
	kern  []qmvKernels // by qmvGeoms index (quant_mmv.go)
	plan  qmvPlan      // the geometry of each kind of qmv launch (POCKET_QMV_GEOM)
	xq    cu.DevicePtr // int8 activations: xs (float2 per 32) then xq
	xqN   int64
	xq2   cu.DevicePtr // the other scratch: a rounding GEMV writes the one it does not read (qxOther)
	xq2N  int64
	int8  bool
}

// quantModule loads the quant kernels once (context current).
func (b *Backend) quantModule() (*quantMod, error) {
	if b.q != nil {
		return b.q, nil
	}
	mod, err := loadPTX(quantPTX)
	if err != nil {
		return nil, fmt.Errorf("cuda: load quant PTX: %w", err)
	}
	names := map[string]cFunc{}
	get := func(name string) (cFunc, error) {
		f, err := mod.Function(name)
		if err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		names[name] = cfunc(f)
		return cfunc(f), nil
	}
	q := &quantMod{fns: map[kernels.DType]*quantFns{}}
	if q.qx, err = get("qx_quant"); err != nil {
		return nil, err
	}
	if q.qxn, err = get("qx_norm"); err != nil {
		return nil, err
	}
	if q.qxm, err = get("qx_merge"); err != nil {
		return nil, err
	}
	if q.addq2, err = get("qmv_add_q2_4"); err != nil {
		return nil, err
	}
	for _, e := range qmvGeoms {
		k := qmvKernels{g: e.g}
		mv, swi := e.g.entries()
		if k.mv, err = get(mv); err != nil {
			return nil, err
		}
		if k.swi, err = get(swi); err != nil {
			return nil, err
		}
		if k.swiq, err = get(e.g.swiqEntry()); err != nil {
			return nil, err
		}
		if k.swiqG, err = get(e.g.swiqGEntry()); err != nil {
			return nil, err
		}
		if k.swiqF, err = get(e.g.swiqFEntry()); err != nil {
			return nil, err
		}
		if k.addq, err = get(e.g.addqEntry()); err != nil {
			return nil, err
		}
		q.kern = append(q.kern, k)
	}
	q.plan = parseQmvPlan(switches.qmvGeom)
	q.int8 = !switches.exactQGEMV
	q.iqErr = uploadLattices(mod)
	for dt, n := range layoutNames() {
		fs := &quantFns{}
		for i, nr := range []int{1, 2, 4, 8} {
			if fs.gemv[i], err = get(fmt.Sprintf("qgemv_%s_%d", n, nr)); err != nil {
				return nil, err
			}
		}
		if int8Act[dt] {
			if fs.gemv8, err = get("qgemv8_" + n); err != nil {
				return nil, err
			}
		}
		if fs.embed, err = get("qembed_" + n); err != nil {
			return nil, err
		}
		if fs.deq, err = get("qdeq_" + n); err != nil {
			return nil, err
		}
		q.fns[dt] = fs
	}
	probeModule(mod, "quant", names)
	b.q = q
	return q, nil
}

// QuantFormats lists the GGUF block formats this backend executes.
func QuantFormats() string {
	var s []string
	for d := kernels.DType(0); d.Valid(); d++ {
		if isQuant(d) {
			s = append(s, d.String())
		}
	}
	return strings.Join(s, " ")
}

// uploadLattices copies the IQ codebooks into the module's device
// globals, checking each global's size against the table (a mismatch means
// quant_iq.cuh and kernels/quant disagree on a format).
func uploadLattices(mod cu.Module) error {
	done := map[string]bool{}
	for dt, name := range latticeGlobals {
		if done[name] {
			continue
		}
		vals, _, ok := quant.Lattice(dt)
		if !ok {
			return fmt.Errorf("cuda: no codebook for %s", dt)
		}
		p, size, err := mod.Global(name)
		if err != nil {
			return fmt.Errorf("cuda: codebook %s: %w", name, err)
		}
		if size != int64(len(vals)) {
			return fmt.Errorf("cuda: codebook %s holds %d bytes, %s has %d", name, size, dt, len(vals))
		}
		if err := cu.MemcpyHtoD(p, unsafe.Pointer(&vals[0]), size); err != nil {
			return fmt.Errorf("cuda: codebook %s: %w", name, err)
		}
		done[name] = true
	}
	return nil
}

// loadQuant uploads a block-format weight as stored (plus padding).
func (b *Backend) loadQuant(w *kernels.Weight) (*tensor, error) {
	q, err := b.quantModule()
	if err != nil {
		return nil, err
	}
	if _, lattice := latticeGlobals[w.DType]; lattice && q.iqErr != nil {
		// Only the lattice formats depend on the codebooks: the others
		// keep working.
		return nil, fmt.Errorf("load %s: %w", w.Name, q.iqErr)
	}
	t := &tensor{w: w}
	if r, ok := regroupFor(w); ok && !switches.noRegroup[r.file] {
		t.regroup = &r
	}
	n := int64(len(w.Data))
	t.data = b.alloc(n + quantPad)
	if t.data != 0 {
		b.fail(cu.MemsetD8(t.data, 0, n+quantPad))
		if t.regroup != nil {
			b.uploadStaged(t.data, w.Data, t.regroup.bytes, t.regroup.regroupParallel)
		} else {
			b.uploadWeight(t.data, w.Data)
		}
	}
	if b.err != nil {
		return nil, fmt.Errorf("load %s: %w", w.Name, b.err)
	}
	return t, nil
}

// uploadStaged copies src to dst through the two page-locked staging
// buffers (stagingBufs) in chunks of ~32 MB (whole units of unit bytes),
// each chunk put into the buffer by fill: every core fills the next chunk
// while this thread copies the last. fill regroups rows (regroup.go) or
// copies them; either way the host never holds a second copy of a
// matrix, and the DMA reads locked pages instead of the driver staging a
// pageable source itself.
func (b *Backend) uploadStaged(dst cu.DevicePtr, src []byte, unit int, fill func(dst, src []byte)) {
	chunk := max(1, (32<<20)/unit) * unit
	bufs := b.stagingBufs(32 << 20)
	n0 := min(chunk, len(src))
	fill(bufs[0][:n0], src[:n0])
	for o, k := 0, 0; o < len(src) && b.err == nil; o, k = o+chunk, k+1 {
		var wg sync.WaitGroup
		if next := o + chunk; next < len(src) {
			nn := min(chunk, len(src)-next)
			wg.Add(1)
			go func() {
				defer wg.Done()
				fill(bufs[(k+1)%2][:nn], src[next:next+nn])
			}()
		}
		n := min(chunk, len(src)-o)
		b.fail(cu.MemcpyHtoD(dst+cu.DevicePtr(o), unsafe.Pointer(&bufs[k%2][0]), int64(n)))
		wg.Wait()
	}
}

// uploadWeight copies a weight's bytes to dst: staged where it is large
// (Llama-3-8B bf16 on an H200 loaded in 0.64 s staged, 2.21 s straight
// from the file's pages), straight where it is small.
func (b *Backend) uploadWeight(dst cu.DevicePtr, src []byte) {
	if len(src) < 1<<20 {
		b.fail(cu.MemcpyHtoD(dst, unsafe.Pointer(&src[0]), int64(len(src))))
		return
	}
	b.uploadStaged(dst, src, 1, parallelCopy)
}

// layout is the format t's device bytes are in: its weight's, or the
// regrouped one loadQuant chose. Kernels are chosen by it.
func (t *tensor) layout() kernels.DType {
	if t.regroup != nil {
		return t.regroup.dev
	}
	return t.w.DType
}

func (t *tensor) rowBytes() int {
	rb, _ := t.w.DType.RowBytes(t.w.Cols())
	return rb
}

// quantEmbed decodes the rows ids of a block-format table.
func (b *Backend) quantEmbed(dst kernels.Buf, t *tensor, ids []int32) {
	fs := b.q.fns[t.layout()]
	ip := b.put(kIDs, words(ids))
	cols := t.w.Cols()
	b.launchFn(fs.embed, len(ids), 1, min(256, 32*cdiv(cols/32, 32)), ptr(dptr(dst)), ptr(t.data), ptr(ip), i32(cols), uint64(t.rowBytes()))
}

// quantMatMul is MatMul for a block-format weight (deferred GEMVs already
// flushed).
func (b *Backend) quantMatMul(dst, x kernels.Buf, t *tensor, rows int) {
	fs := b.q.fns[t.layout()]
	out, in := t.w.Rows(), t.w.Cols()
	y, xp := dptr(dst), dptr(x)
	if rows == 1 && b.quantGEMV1(y, xp, t) {
		return
	}
	if rows == 1 && b.q.int8 && fs.gemv8 != nil && in%256 == 0 {
		// The first int8 kernels (POCKET_QGEMV=v1).
		xs, xq, _ := b.qxBuf(in)
		b.launchFn(b.q.qx, cdiv(in/4, 256), 1, 256, ptr(xq), ptr(xs), ptr(xp), i32(in))
		b.launchFn(fs.gemv8, cdiv(out, 4), 1, 128, ptr(y), ptr(xq), ptr(xs), ptr(t.data), i32(out), i32(in),
			uint64(t.rowBytes()))
		return
	}
	if rows <= quantGEMVRows {
		// Warps per group: about four sub-blocks per thread (prefetched
		// together), 16/wpg output rows per block.
		nsub := in / 32
		wpg := 1
		for wpg < 8 && nsub >= 256*wpg {
			wpg *= 2
		}
		perBlock := 8 / wpg * 2 // groups × R rows
		for r := 0; r < rows; {
			k := 3
			for 1<<k > rows-r {
				k--
			}
			nr := 1 << k
			b.launchFn(fs.gemv[k], cdiv(out, perBlock), 1, 256, ptr(y+cu.DevicePtr(r*out*4)), ptr(xp+cu.DevicePtr(r*in*4)),
				ptr(t.data), i32(out), i32(in), uint64(t.rowBytes()), i32(wpg))
			r += nr
		}
		return
	}
	// Prefill: dequantize row chunks to bf16 and multiply.
	b.deqGEMM(y, xp, rows, out, in, max(64, QuantScratchBytes/(2*in)/64*64), func(dst cu.DevicePtr, c0, n int) {
		b.launchFn(fs.deq, cdiv(n*in/32, 256), 1, 256, ptr(dst), ptr(t.data+cu.DevicePtr(c0*t.rowBytes())), i32(n), i32(in),
			uint64(t.rowBytes()))
	})
}
