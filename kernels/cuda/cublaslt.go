//go:build cuda

package cuda

// Prefill GEMMs through cuBLASLt, loaded with dlopen by soname (13, 12,
// 11, then the CUDA 13 toolkit's path) so that one binary runs against
// whichever version the host has, and still runs (on the tf32 kernel)
// where there is none. Activations are converted to bf16 on the device
// (one pass per distinct input), weights are the stored bf16 bytes, the
// accumulation and the output are float32.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <cuda.h>
#include <cublasLt.h>

typedef cublasStatus_t (*pl_create_t)(cublasLtHandle_t*);
typedef cublasStatus_t (*pl_desc_create_t)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
typedef cublasStatus_t (*pl_desc_set_t)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t);
typedef cublasStatus_t (*pl_layout_create_t)(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t, int64_t);
typedef cublasStatus_t (*pl_pref_create_t)(cublasLtMatmulPreference_t*);
typedef cublasStatus_t (*pl_pref_set_t)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t);
typedef cublasStatus_t (*pl_heur_t)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
	cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t*, int*);
typedef cublasStatus_t (*pl_matmul_t)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
	const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
	const cublasLtMatmulAlgo_t*, void*, size_t, CUstream);

static pl_create_t pl_lt_create;
static pl_desc_create_t pl_lt_desc_create;
static pl_desc_set_t pl_lt_desc_set;
static pl_layout_create_t pl_lt_layout_create;
static pl_pref_create_t pl_lt_pref_create;
static pl_pref_set_t pl_lt_pref_set;
static pl_heur_t pl_lt_heur;
static pl_matmul_t pl_lt_matmul;
static cublasLtHandle_t pl_lt_handle;

// pl_lt_open loads the library and creates a handle: 0 on success.
static int pl_lt_open(char *name, int n) {
	const char *names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11",
		"/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcublasLt.so.13",
		"/usr/local/cuda/lib64/libcublasLt.so", 0};
	void *h = 0;
	for (int i = 0; names[i] && !h; i++) {
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (h) { strncpy(name, names[i], n - 1); name[n - 1] = 0; }
	}
	if (!h) return 1;
	pl_lt_create = (pl_create_t)dlsym(h, "cublasLtCreate");
	pl_lt_desc_create = (pl_desc_create_t)dlsym(h, "cublasLtMatmulDescCreate");
	pl_lt_desc_set = (pl_desc_set_t)dlsym(h, "cublasLtMatmulDescSetAttribute");
	pl_lt_layout_create = (pl_layout_create_t)dlsym(h, "cublasLtMatrixLayoutCreate");
	pl_lt_pref_create = (pl_pref_create_t)dlsym(h, "cublasLtMatmulPreferenceCreate");
	pl_lt_pref_set = (pl_pref_set_t)dlsym(h, "cublasLtMatmulPreferenceSetAttribute");
	pl_lt_heur = (pl_heur_t)dlsym(h, "cublasLtMatmulAlgoGetHeuristic");
	pl_lt_matmul = (pl_matmul_t)dlsym(h, "cublasLtMatmul");
	if (!pl_lt_create || !pl_lt_desc_create || !pl_lt_desc_set || !pl_lt_layout_create || !pl_lt_pref_create ||
		!pl_lt_pref_set || !pl_lt_heur || !pl_lt_matmul) return 2;
	if (pl_lt_create(&pl_lt_handle) != CUBLAS_STATUS_SUCCESS) return 3;
	return 0;
}

// A plan: y[M,N] (fp32, row-major) = x[M,K] (bf16) · w[N,K]ᵀ (bf16). In
// cuBLAS's column-major terms D (N×M) = Wᵀ-op(A = w, K×N) · B (x, K×M).
#define PL_ALGOS 8

typedef struct {
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulAlgo_t algos[PL_ALGOS]; // the heuristic's candidates, best guess first
	size_t wss[PL_ALGOS];
	int n, chosen;
} pl_plan;

// pl_lt_algos asks the heuristic for up to PL_ALGOS algorithms of p's
// descriptor and layouts: 0, a cublasStatus_t plus 1000, or 18 for none.
static int pl_lt_algos(pl_plan *p, size_t wsmax) {
	cublasLtMatmulPreference_t pref;
	if (pl_lt_pref_create(&pref)) return 16;
	if (pl_lt_pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof wsmax)) return 17;
	cublasLtMatmulHeuristicResult_t r[PL_ALGOS];
	int got = 0;
	memset(r, 0, sizeof r);
	int st = pl_lt_heur(pl_lt_handle, p->desc, p->a, p->b, p->c, p->c, pref, PL_ALGOS, r, &got);
	if (st) return 1000 + st; // 15 is NOT_SUPPORTED
	if (got < 1) return 18;
	for (int i = 0; i < got; i++) {
		p->algos[i] = r[i].algo;
		p->wss[i] = r[i].workspaceSize;
	}
	p->n = got;
	p->chosen = 0;
	return 0;
}

static int pl_lt_plan(pl_plan *p, int M, int N, int K, size_t wsmax) {
	if (pl_lt_desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) return 10;
	cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
	if (pl_lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t)) return 11;
	if (pl_lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn)) return 12;
	if (pl_lt_layout_create(&p->a, CUDA_R_16BF, K, N, K)) return 13;
	if (pl_lt_layout_create(&p->b, CUDA_R_16BF, K, M, K)) return 14;
	if (pl_lt_layout_create(&p->c, CUDA_R_32F, N, M, N)) return 15;
	return pl_lt_algos(p, wsmax);
}

static int pl_lt_run_algo(pl_plan *p, int i, CUdeviceptr y, CUdeviceptr x, CUdeviceptr w, CUdeviceptr ws, CUstream s) {
	float one = 1.f, zero = 0.f;
	return (int)pl_lt_matmul(pl_lt_handle, p->desc, &one, (void*)w, p->a, (void*)x, p->b, &zero, (void*)y, p->c,
		(void*)y, p->c, &p->algos[i], (void*)ws, p->wss[i], s);
}

static int pl_lt_run(pl_plan *p, CUdeviceptr y, CUdeviceptr x, CUdeviceptr w, CUdeviceptr ws, CUstream s) {
	return pl_lt_run_algo(p, p->chosen, y, x, w, ws, s);
}

// FP8 plans: y[M,N] = (xq[M,K]·sx)·(w[N,K]·sw)ᵀ on the FP8 tensor cores,
// both operands E4M3 as stored, with DeepSeek-style scales: sw one float
// per 128×128 block of w (the checkpoint's weight_scale_inv, [N/128][K/128]
// row-major), sx one per (row, 128 columns) of xq, stored [K/128][M]. In
// cuBLAS's terms A = w (K×N, transposed) with BLK128x128_32F scales and B
// = xq (K×M) with VEC128_32F. These modes came with cuBLASLt 12.9 and are
// Hopper-only; the values below are 12.9's enums (the headers built
// against may be older). d is the output type (CUDA_R_32F, or
// CUDA_R_16BF where the library has no float output for these modes).
#define PL_DESC_A_SCALE_POINTER 17
#define PL_DESC_B_SCALE_POINTER 18
#define PL_DESC_A_SCALE_MODE 31
#define PL_DESC_B_SCALE_MODE 32
#define PL_SCALE_VEC128_32F 4
#define PL_SCALE_BLK128x128_32F 5
#define PL_R_8F_E4M3 28

static int pl_lt_plan_fp8(pl_plan *p, int M, int N, int K, size_t wsmax, int d, CUdeviceptr sw, CUdeviceptr sx) {
	if (pl_lt_desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) return 10;
	cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
	int32_t am = PL_SCALE_BLK128x128_32F, bm = PL_SCALE_VEC128_32F;
	void *ap = (void*)sw, *bp = (void*)sx;
	if (pl_lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t)) return 11;
	if (pl_lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn)) return 12;
	if (pl_lt_desc_set(p->desc, (cublasLtMatmulDescAttributes_t)PL_DESC_A_SCALE_MODE, &am, sizeof am)) return 20;
	if (pl_lt_desc_set(p->desc, (cublasLtMatmulDescAttributes_t)PL_DESC_B_SCALE_MODE, &bm, sizeof bm)) return 21;
	if (pl_lt_desc_set(p->desc, (cublasLtMatmulDescAttributes_t)PL_DESC_A_SCALE_POINTER, &ap, sizeof ap)) return 22;
	if (pl_lt_desc_set(p->desc, (cublasLtMatmulDescAttributes_t)PL_DESC_B_SCALE_POINTER, &bp, sizeof bp)) return 23;
	if (pl_lt_layout_create(&p->a, (cudaDataType)PL_R_8F_E4M3, K, N, K)) return 13;
	if (pl_lt_layout_create(&p->b, (cudaDataType)PL_R_8F_E4M3, K, M, K)) return 14;
	if (pl_lt_layout_create(&p->c, (cudaDataType)d, N, M, N)) return 15;
	return pl_lt_algos(p, wsmax);
}

// pl_lt_run_fp8 runs an FP8 plan on this call's scales.
static int pl_lt_run_fp8(pl_plan *p, CUdeviceptr y, CUdeviceptr xq, CUdeviceptr w, CUdeviceptr sx, CUdeviceptr sw,
	CUdeviceptr ws, CUstream s) {
	void *ap = (void*)sw, *bp = (void*)sx;
	if (pl_lt_desc_set(p->desc, (cublasLtMatmulDescAttributes_t)PL_DESC_A_SCALE_POINTER, &ap, sizeof ap)) return 2022;
	if (pl_lt_desc_set(p->desc, (cublasLtMatmulDescAttributes_t)PL_DESC_B_SCALE_POINTER, &bp, sizeof bp)) return 2023;
	return pl_lt_run_algo(p, p->chosen, y, xq, w, ws, s);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"gorgonia.org/cu"
)

const ltWorkspace = 32 << 20

type ltKey struct{ m, n, k int }

type lt struct {
	ok    bool
	name  string
	err   error
	ws    cu.DevicePtr
	plans map[ltKey]*C.pl_plan
	bf    cu.DevicePtr // bf16 copy of the last converted activation
	bfN   int64
	bfSrc cu.DevicePtr // its source (0: none valid)
	bfLen int
	tuned []string // plans tuned: MxNxK:chosen/candidates

	f8plans map[ltKey]*ltFP8Plan // nil entries: no FP8 plan for the shape
	f8why   string               // why the last FP8 plan was not made
}

// ltFP8Plan is a cached FP8 plan (pl_lt_plan_fp8) and whether its output
// is bf16, widened to float after.
type ltFP8Plan struct {
	p    *C.pl_plan
	bf16 bool
}

// openLt loads cuBLASLt (POCKET_CUBLASLT=0 turns it off). Called with the
// context current.
func (b *Backend) openLt() {
	if switches.noCublasLt {
		b.lt.err = fmt.Errorf("disabled by POCKET_CUBLASLT=0")
		return
	}
	var name [256]C.char
	if r := C.pl_lt_open(&name[0], 256); r != 0 {
		b.lt.err = fmt.Errorf("cuBLASLt not loaded (step %d)", int(r))
		return
	}
	b.lt.name = C.GoString(&name[0])
	b.lt.plans = map[ltKey]*C.pl_plan{}
	b.lt.f8plans = map[ltKey]*ltFP8Plan{}
	p, err := cu.MemAlloc(ltWorkspace)
	if err != nil {
		b.lt.err = err
		return
	}
	b.Resident += ltWorkspace
	b.lt.ws = p
	b.lt.ok = true
}

// GEMMLibrary names the prefill GEMM path: the cuBLASLt library loaded, or
// why the built-in tf32 kernel is used.
func (b *Backend) GEMMLibrary() string {
	if !b.lt.ok {
		return "tf32 kernel: " + fmt.Sprint(b.lt.err)
	}
	s := "cublasLt bf16 (" + b.lt.name + ")"
	if len(b.lt.tuned) > 0 {
		s += ", tuned " + strings.Join(b.lt.tuned, " ")
	}
	made, bf := 0, 0
	for _, p := range b.lt.f8plans {
		if p != nil {
			made++
			if p.bf16 {
				bf++
			}
		}
	}
	if made > 0 {
		s += fmt.Sprintf("; FP8 block-scaled plans %d (%d with bf16 output)", made, bf)
	}
	if b.lt.f8why != "" {
		s += "; FP8 declined: " + b.lt.f8why
	}
	return s
}

// ltPlanFP8 returns the FP8 plan for y[M,N] = xq·wᵀ (pl_lt_plan_fp8), made
// on first use with the scales sw and sx, or nil when cuBLASLt has none
// (older than 12.9, not Hopper, a shape it declines): the caller then
// falls back. A float output is asked for first, then bf16.
func (b *Backend) ltPlanFP8(M, N, K int, sw, sx cu.DevicePtr) *ltFP8Plan {
	if !b.lt.ok {
		return nil
	}
	key := ltKey{M, N, K}
	if p, ok := b.lt.f8plans[key]; ok {
		return p
	}
	var plan *ltFP8Plan
	var why []string
	for _, d := range []struct {
		t    C.int
		bf16 bool
	}{{C.CUDA_R_32F, false}, {C.CUDA_R_16BF, true}} {
		p := (*C.pl_plan)(C.calloc(1, C.sizeof_pl_plan))
		r := C.pl_lt_plan_fp8(p, C.int(M), C.int(N), C.int(K), ltWorkspace, d.t, C.CUdeviceptr(sw), C.CUdeviceptr(sx))
		if r == 0 {
			plan = &ltFP8Plan{p: p, bf16: d.bf16}
			break
		}
		C.free(unsafe.Pointer(p))
		why = append(why, fmt.Sprintf("bf16 out %v: step %d", d.bf16, int(r)))
	}
	if plan == nil {
		b.lt.f8why = fmt.Sprintf("%dx%dx%d (%s)", M, N, K, strings.Join(why, ", "))
	}
	b.lt.f8plans[key] = plan
	return plan
}

// ltRunFP8 runs plan p on this call's operands into out (float, or bf16
// where p.bf16).
func (b *Backend) ltRunFP8(p *ltFP8Plan, out, xq, sx, w, sw cu.DevicePtr, M, N, K int) {
	if b.err != nil {
		return
	}
	if r := C.pl_lt_run_fp8(p.p, C.CUdeviceptr(out), C.CUdeviceptr(xq), C.CUdeviceptr(w), C.CUdeviceptr(sx),
		C.CUdeviceptr(sw), C.CUdeviceptr(b.lt.ws), b.s); r != 0 {
		b.fail(fmt.Errorf("cuda: cublasLtMatmul FP8 %dx%dx%d: status %d", M, N, K, int(r)))
	}
}

// ltGemm runs y = x·wᵀ with a bf16 weight through cuBLASLt; false when it
// cannot (no library, no plan), and the caller falls back.
func (b *Backend) ltGemm(y, x, w cu.DevicePtr, M, N, K int) bool {
	if !b.lt.ok || K%8 != 0 || N%8 != 0 {
		return false
	}
	key := ltKey{M, N, K}
	p, ok := b.lt.plans[key]
	if !ok {
		p = (*C.pl_plan)(C.calloc(1, C.sizeof_pl_plan))
		if r := C.pl_lt_plan(p, C.int(M), C.int(N), C.int(K), ltWorkspace); r != 0 {
			C.free(unsafe.Pointer(p))
			p = nil
		}
		b.lt.plans[key] = p
	}
	if p == nil {
		return false
	}
	// Convert x to bf16 unless it is the input converted last (q/k/v and
	// gate/up share theirs; the op that wrote x may have written it too;
	// every other op clears bfSrc).
	if b.lt.bfSrc != x || b.lt.bfLen != M*K {
		n := M * K
		b.run(fToBF16, cdiv(n/8, 256), 1, 256, ptr(b.ltInput(n)), ptr(x), uint64(n))
		b.lt.bfSrc, b.lt.bfLen = x, n
	}
	if b.err != nil {
		return true
	}
	if !ok && switches.ltTune && M >= ltTuneRows && b.cap == nil {
		b.ltTune(p, y, w, M, N, K)
	}
	if r := C.pl_lt_run(p, C.CUdeviceptr(y), C.CUdeviceptr(b.lt.bf), C.CUdeviceptr(w), C.CUdeviceptr(b.lt.ws), b.s); r != 0 {
		b.fail(fmt.Errorf("cuda: cublasLtMatmul %dx%dx%d: status %d", M, N, K, int(r)))
	}
	return true
}

// ltTuneRows is the least M whose plan is tuned: prefill shapes, where a
// GEMM takes long enough for the choice to matter and to time.
const ltTuneRows = 512

// ltTune times each of the heuristic's candidate algorithms on the real
// operands (once to warm, then twice) and keeps the fastest for the plan:
// cuBLASLt's first guess is not always its fastest kernel for our shapes.
// It runs on a plan's first use outside graph capture; the outputs it
// writes are the same product, overwritten by the caller's run.
func (b *Backend) ltTune(p *C.pl_plan, y, w cu.DevicePtr, M, N, K int) {
	if p.n < 2 {
		return
	}
	start, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return
	}
	defer cu.DestroyEvent(&start)
	end, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return
	}
	defer cu.DestroyEvent(&end)
	best, bestMs := 0, 0.0
	for i := 0; i < int(p.n); i++ {
		run := func() bool {
			return C.pl_lt_run_algo(p, C.int(i), C.CUdeviceptr(y), C.CUdeviceptr(b.lt.bf), C.CUdeviceptr(w),
				C.CUdeviceptr(b.lt.ws), b.s) == 0
		}
		if !run() {
			continue
		}
		if start.Record(b.stream) != nil {
			return
		}
		first := run() // two timed runs
		ok := run() && first
		if end.Record(b.stream) != nil || end.Synchronize() != nil {
			return
		}
		ms, err := start.Elapsed(end)
		if !ok || err != nil {
			continue
		}
		if bestMs == 0 || ms < bestMs {
			best, bestMs = i, ms
		}
	}
	p.chosen = C.int(best)
	b.lt.tuned = append(b.lt.tuned, fmt.Sprintf("%dx%dx%d:%d/%d", M, N, K, best, int(p.n)))
}

// ltInput returns the bf16 GEMM input buffer with room for n elements, or
// 0 without cuBLASLt (nothing would read it). An op whose output is the
// next GEMM's input writes it there as well (RMSNorm, SwiGLU, prefill
// attention) and then calls ltInputFrom, sparing the GEMM a to_bf16 pass
// over its input: the same rounding of the same floats.
func (b *Backend) ltInput(n int) cu.DevicePtr {
	if !b.lt.ok {
		return 0
	}
	return b.scratch(&b.lt.bf, &b.lt.bfN, int64(n)*2)
}

// ltInputFrom records that the bf16 input buffer bf (from ltInput; 0:
// nothing written) holds src's n elements.
func (b *Backend) ltInputFrom(bf, src cu.DevicePtr, n int) {
	if bf != 0 && b.err == nil {
		b.lt.bfSrc, b.lt.bfLen = src, n
	}
}
