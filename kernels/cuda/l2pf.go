//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o l2pf.ptx l2pf.cu && sed -i 's/^\\.version 7\\.8$/.version 8.0/' l2pf.ptx"

// The weights of a captured decode step asked into L2 ahead of their
// GEMVs, from a side branch of the graph (POCKET_L2PF; off by default
// until it is measured).
//
// Why: a batch-1 step keeps DRAM busy only while a GEMV streams. Between
// GEMVs run chains of short dependent kernels — the attention, the
// roundings, the DeltaNet mix, the all-reduces of a TP rank — and each
// GEMV's own ramp and tail, during which DRAM idles: Qwen3-8B Q4_K_M
// moves its 4.65 GB in 1.98 ms where DRAM alone would take 1.09. Asking
// L2 from inside those kernels lengthened their chains (docs/
// decode-step.md), and a GEMV can stage only a ring's worth of its own
// weights before its PDL wait. Here a small kernel on a second captured
// stream asks L2 for the next GEMV's weights as soon as the GEMV before
// it has finished, so that the bytes move while the chain between them
// runs, and the GEMV then reads them from L2.
//
// Pacing is by the graph's edges, not by the device: the prefetch for
// GEMV j waits (an event) for GEMV j−depth to finish, so at most about
// depth GEMVs' budgets are in L2 ahead of use. The budget is what one
// prefetch may ask for (L2 holds 50 MB on an H100/H200); a matrix larger
// than it gets the same first share of every row.

/*
#include <cuda.h>
#include <string.h>

static CUresult pl_event(CUevent *e) { return cuEventCreate(e, CU_EVENT_DISABLE_TIMING); }
static CUresult pl_record(CUevent e, CUstream s) { return cuEventRecord(e, s); }
static CUresult pl_wait(CUstream s, CUevent e) { return cuStreamWaitEvent(s, e, 0); }

// pl_side_stream is a non-blocking stream of the context's highest
// priority: its kernels' blocks go first when SM slots free up.
static CUresult pl_side_stream(CUstream *s) {
	int lo = 0, hi = 0;
	CUresult r = cuCtxGetStreamPriorityRange(&lo, &hi);
	if (r != CUDA_SUCCESS) return r;
	return cuStreamCreateWithPriority(s, CU_STREAM_NON_BLOCKING, hi);
}

// pl_launch_prio launches f with a launch priority (captured into the
// graph's node).
static CUresult pl_launch_prio(CUfunction f, unsigned gx, unsigned bx, CUstream s, unsigned long long *a, int n) {
	void *params[32];
	for (int i = 0; i < n && i < 32; i++) params[i] = &a[i];
	int lo = 0, hi = 0;
	cuCtxGetStreamPriorityRange(&lo, &hi);
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof attr);
	attr.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
	attr.value.priority = hi;
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = gx;
	cfg.gridDimY = 1;
	cfg.gridDimZ = 1;
	cfg.blockDimX = bx;
	cfg.blockDimY = 1;
	cfg.blockDimZ = 1;
	cfg.hStream = s;
	cfg.attrs = &attr;
	cfg.numAttrs = 1;
	return cuLaunchKernelEx(&cfg, f, params, NULL);
}
*/
import "C"

import (
	_ "embed"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

//go:embed l2pf.ptx
var l2pfPTX string

// l2pfEvents is the ring of GEMV-finished events: more than the deepest
// depth the switch allows.
const l2pfEvents = 8

// l2pf is a Backend's prefetch branch state; it acts only while a step is
// being captured with the switch on.
type l2pf struct {
	fn    cFunc
	side  C.CUstream
	start C.CUevent // recorded on the main stream when the capture begins
	join  C.CUevent
	marks [l2pfEvents]C.CUevent
	n     int  // GEMVs marked in this capture
	used  bool // the side stream is in this capture
	tried bool // init ran (it runs once, failed or not)
	ready bool
	args  [32]uint64
}

// l2pfInit loads the kernel and makes the side stream and events, once,
// when the switch is on. A failure is the backend's: whoever set the
// switch asked for the branch.
func (b *Backend) l2pfInit() bool {
	p := &b.pf
	if p.ready || switches.l2pfBudget <= 0 || p.tried {
		return p.ready
	}
	p.tried = true
	if _, err := loadModule(l2pfPTX, "l2pf", map[string]*cFunc{"l2_prefetch": &p.fn}); err != nil {
		b.fail(err)
		return false
	}
	err := cuErr("side stream", C.pl_side_stream(&p.side))
	for _, e := range append([]*C.CUevent{&p.start, &p.join}, ptrs(p.marks[:])...) {
		if err == nil {
			err = cuErr("event", C.pl_event(e))
		}
	}
	b.fail(err)
	p.ready = err == nil
	return p.ready
}

// ptrs is the addresses of es's elements.
func ptrs(es []C.CUevent) []*C.CUevent {
	out := make([]*C.CUevent, len(es))
	for i := range es {
		out[i] = &es[i]
	}
	return out
}

// l2pfBegin starts a capture's prefetch branch (BeginCapture, after the
// stream's capture began).
func (b *Backend) l2pfBegin() {
	p := &b.pf
	p.n, p.used = 0, false
	if !b.l2pfInit() {
		return
	}
	b.fail(cuErr("record event", C.pl_record(p.start, b.s)))
}

// l2pfEnd joins the branch back into the main stream (EndCapture, before
// the capture ends: a capture with an unjoined stream fails).
func (b *Backend) l2pfEnd() {
	p := &b.pf
	if !p.used {
		return
	}
	p.used = false
	b.fail(cuErr("record event", C.pl_record(p.join, p.side)))
	b.fail(cuErr("wait event", C.pl_wait(b.s, p.join)))
}

// l2Ahead asks L2 for ts's bytes on the side branch, after the GEMV depth
// GEMVs back has finished (or from the capture's start). Called by the
// GEMV ops inside their enter/exit, before they launch.
func (b *Backend) l2Ahead(ts ...*tensor) {
	p := &b.pf
	if b.cap == nil || !p.ready || b.err != nil {
		return
	}
	mats := make([]l2Mat, 0, len(ts))
	for _, t := range ts {
		if t == nil || t.data == 0 || len(t.w.Shape) != 2 {
			continue
		}
		rb, err := t.w.DType.RowBytes(t.w.Cols())
		if err != nil {
			continue
		}
		mats = append(mats, l2Mat{addr: uint64(t.data), rows: int64(t.w.Rows()), rowBytes: int64(rb)})
	}
	rs := l2Plan(mats, int64(switches.l2pfBudget)<<20)
	if len(rs) == 0 {
		return
	}
	ev := p.start
	if d := switches.l2pfDepth; p.n >= d {
		ev = p.marks[(p.n-d)%l2pfEvents]
	}
	if err := cuErr("wait event", C.pl_wait(p.side, ev)); err != nil {
		b.fail(err)
		return
	}
	p.used = true
	n := 0
	for i := range 3 {
		var r l2Range
		if i < len(rs) {
			r = rs[i]
		}
		n += copy(p.args[n:], []uint64{r.addr, uint64(r.total), uint64(r.stride), uint64(r.take)})
	}
	p.args[n] = uint64(switches.l2pfMode)
	n++
	b.fail(cuErr("launch l2_prefetch", C.pl_launch_prio(p.fn, C.uint(switches.l2pfBlocks), 32, p.side,
		(*C.ulonglong)(unsafe.Pointer(&p.args[0])), C.int(n))))
}

// l2Mark records that the GEMV just launched on the main stream is a
// pacing point: the prefetch depth GEMVs later waits for it.
func (b *Backend) l2Mark() {
	p := &b.pf
	if b.cap == nil || !p.ready || b.err != nil {
		return
	}
	b.fail(cuErr("record event", C.pl_record(p.marks[p.n%l2pfEvents], b.s)))
	p.n++
}

// tensorsOf is ws as this backend's tensors (nil for others).
func tensorsOf(ws []kernels.Tensor) []*tensor {
	out := make([]*tensor, len(ws))
	for i, w := range ws {
		out[i], _ = w.(*tensor)
	}
	return out
}
