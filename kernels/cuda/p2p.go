//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o p2p.ptx p2p.cu && gzip -n9f p2p.ptx"

// A one-shot all-reduce over peer memory (NVLink) for the small all-reduces
// of tensor-parallel decode, where NCCL costs ~6.5 µs per 16 KiB inside a
// graph. Each rank allocates an exchange region (flags + two parities of
// one data slot per source rank) with cuMemAlloc, exports it with
// cuIpcGetMemHandle, and maps every peer's with cuIpcOpenMemHandle; the
// handles travel through files in the group's rendezvous directory, like
// the NCCL unique id. One kernel (p2p.cu, which describes the protocol)
// pushes this rank's buffer into every peer's slot, raises a flag there,
// waits for the peers' flags and sums in rank order: no host involvement,
// so it is captured into decode graphs like any kernel. Up to
// p2pLLFloats (a decode step's block outputs) a low-latency variant
// (p2p_allreduce_ll) sends each value with the call's epoch in one 8-byte
// word instead of data, a release fence and a flag. Above P2PMaxFloats
// (prefill) the all-reduce goes to NCCL.
//
// POCKET_P2P=0 declines the peer path (NCCL for every all-reduce), for A/B
// measurement; read once, here.
//
// (Folding the exchange into the epilogue of the row-split projection
// before it — a GEMV whose blocks swap their rows' partial sums through
// these regions and add them into the residual — was measured on two
// H200s and not kept: Llama-3-8B TP2 graph decode 348.1 against 347.7
// tok/s, eager 292.5 against 281.6. In a graph the separate launch already
// overlaps the next GEMV's weight streaming (PDL); the exchange's own
// latency, which the fusion keeps, is what an all-reduce costs.)

/*
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

static CUresult pl_ipc_get(CUdeviceptr p, void *out) {
	CUipcMemHandle h;
	CUresult r = cuIpcGetMemHandle(&h, p);
	if (r == CUDA_SUCCESS) memcpy(out, &h, sizeof h);
	return r;
}
static CUresult pl_ipc_open(CUdeviceptr *p, const void *in) {
	CUipcMemHandle h;
	memcpy(&h, in, sizeof h);
	return cuIpcOpenMemHandle(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}
static CUresult pl_ipc_close(CUdeviceptr p) { return cuIpcCloseMemHandle(p); }
static int pl_ipc_handle_size(void) { return (int)sizeof(CUipcMemHandle); }
static CUresult pl_bus_id(CUdevice d, char *s, int n) { return cuDeviceGetPCIBusId(s, n, d); }
static CUresult pl_dev_by_bus(CUdevice *d, const char *s) { return cuDeviceGetByPCIBusId(d, s); }
static CUresult pl_can_access(int *ok, CUdevice d, CUdevice peer) { return cuDeviceCanAccessPeer(ok, d, peer); }
static CUresult pl_mem_alloc(CUdeviceptr *p, size_t n) { return cuMemAlloc(p, n); }
static CUresult pl_mem_free(CUdeviceptr p) { return cuMemFree(p); }
static CUresult pl_memset(CUdeviceptr p, size_t n) {
	CUresult r = cuMemsetD8(p, 0, n);
	if (r != CUDA_SUCCESS) return r;
	return cuCtxSynchronize();
}
static CUresult pl_htod(CUdeviceptr p, const void *src, size_t n) { return cuMemcpyHtoD(p, src, n); }
static CUresult pl_host_alloc(void **h, CUdeviceptr *d, size_t n) {
	CUresult r = cuMemHostAlloc(h, n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
	if (r != CUDA_SUCCESS) return r;
	memset(*h, 0, n);
	return cuMemHostGetDevicePointer(d, *h, 0);
}
static CUresult pl_host_free(void *h) { return cuMemFreeHost(h); }
*/
import "C"

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

//go:embed p2p.ptx.gz
var p2pPTX []byte

// ErrP2P marks a failed peer-memory all-reduce (a peer that stopped
// answering within the timeout): the group must be rebuilt.
var ErrP2P = errors.New("p2p all-reduce")

// P2P is one rank's peer-memory all-reduce (kernels.Collective) over a
// group that also has an NCCL communicator, which takes the all-reduces
// larger than P2PMaxFloats. Every rank of the group must call it with the
// same sizes in the same order (kernels.Collective's rule).
type P2P struct {
	Comm *Comm // the group's NCCL communicator (large all-reduces, AsyncError, Abort)

	b           *Backend
	rank, world int
	slot        int // floats per source slot
	fn          cFunc
	fnLL        cFunc           // p2p_allreduce_ll (nil: POCKET_P2P_LL=0), for up to p2pLLFloats
	region      C.CUdeviceptr   // this rank's exchange region
	mapped      []C.CUdeviceptr // peers' regions as mapped here (region at rank)
	peers       C.CUdeviceptr   // device copy of mapped, [world]uint64
	state       C.CUdeviceptr   // [64]uint32: epoch, blocks done, error; from 16 p2p_allreduce_ll's epochs
	herr        *uint32         // mapped host word the kernel raises on a timeout
	herrHost    unsafe.Pointer
	herrDev     C.CUdeviceptr
	timeoutNs   uint64
	closed      atomic.Bool
	closeOnce   sync.Once
}

var _ kernels.Collective = (*P2P)(nil)

// NewP2P sets up the peer-memory all-reduce for c's group, exchanging the
// IPC handles through files in dir (the group's private rendezvous
// directory; a fresh one per group). Every rank must call it. join bounds
// the waits for the other ranks' files, spin each in-kernel wait for a peer
// (longer than any skew between ranks at an all-reduce: a kernel that gives
// up breaks the group). It returns an error wrapping ErrP2PUnsupported, on every rank
// alike, when some rank cannot take part (POCKET_P2P=0, a group larger
// than 8, GPUs without peer access, an IPC failure): the caller then keeps
// NCCL. Other errors (a rank that never published) break the join.
func (b *Backend) NewP2P(c *Comm, dir string, join, spin time.Duration) (*P2P, error) {
	p := &P2P{Comm: c, b: b, rank: c.Rank(), world: c.Size(), slot: p2pSlotFloats(P2PMaxFloats),
		timeoutNs: uint64(max(spin, time.Millisecond).Nanoseconds())}
	rec := p2pRecord{Rank: p.rank, Slot: p.slot}
	switch {
	case switches.p2pOff:
		rec.Why = "disabled by POCKET_P2P=0"
	case p.world > p2pMaxWorld:
		rec.Why = fmt.Sprintf("group of %d ranks (at most %d)", p.world, p2pMaxWorld)
	case int(C.pl_ipc_handle_size()) != p2pHandleSize:
		rec.Why = fmt.Sprintf("CUipcMemHandle of %d bytes", int(C.pl_ipc_handle_size()))
	default:
		if err := p.export(&rec); err != nil {
			rec.Why = err.Error()
		} else {
			rec.OK = true
		}
	}
	fail := func(err error) (*P2P, error) {
		p.release()
		return nil, err
	}
	// Round one: every rank's record.
	if err := p2pPublish(dir, "p2p-handle", p.rank, rec); err != nil {
		return fail(err)
	}
	recs, err := p2pGather[p2pRecord](dir, "p2p-handle", p.world, join)
	if err != nil {
		return fail(err)
	}
	if why := p2pCheckRecords(recs); why != "" {
		return fail(fmt.Errorf("%w: %s", ErrP2PUnsupported, why))
	}
	// Round two: could every rank map every peer?
	v := p2pVerdict{Rank: p.rank, OK: true}
	if err := p.mapPeers(recs); err != nil {
		v.OK, v.Why = false, err.Error()
	}
	if err := p2pPublish(dir, "p2p-verdict", p.rank, v); err != nil {
		return fail(err)
	}
	vs, err := p2pGather[p2pVerdict](dir, "p2p-verdict", p.world, join)
	if err != nil {
		return fail(err)
	}
	if why := p2pCheckVerdicts(vs); why != "" {
		return fail(fmt.Errorf("%w: %s", ErrP2PUnsupported, why))
	}
	return p, nil
}

// export loads the kernel, allocates and zeroes the region, the state and
// the host error word, and fills rec's bus id and handle.
func (p *P2P) export(rec *p2pRecord) error {
	b := p.b
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	mod, err := loadPTX(p2pPTX)
	if err != nil {
		return fmt.Errorf("load p2p PTX: %w", err)
	}
	f, err := mod.Function("p2p_allreduce")
	if err != nil {
		return fmt.Errorf("kernel p2p_allreduce: %w", err)
	}
	p.fn = cfunc(f)
	if !switches.p2pNoLL {
		name := "p2p_allreduce_ll"
		if switches.p2pEarly {
			name = "p2p_allreduce_ll_e"
		}
		if f, err := mod.Function(name); err == nil {
			p.fnLL = cfunc(f)
		}
	}
	rec.LL = p.fnLL != nil
	var bus [32]C.char
	if err := cuErr("device PCI bus id", C.pl_bus_id(C.CUdevice(b.dev), &bus[0], C.int(len(bus)))); err != nil {
		return err
	}
	rec.Bus = C.GoString(&bus[0])
	n := p2pRegionBytes(p.world, p.slot)
	if err := cuErr("allocate p2p region", C.pl_mem_alloc(&p.region, C.size_t(n))); err != nil {
		return err
	}
	// Zeroed (flags 0: no epoch reached) before any peer can map it.
	if err := cuErr("zero p2p region", C.pl_memset(p.region, C.size_t(n))); err != nil {
		return err
	}
	if err := cuErr("allocate p2p state", C.pl_mem_alloc(&p.state, 256)); err != nil {
		return err
	}
	if err := cuErr("zero p2p state", C.pl_memset(p.state, 256)); err != nil {
		return err
	}
	if err := cuErr("allocate p2p peer table", C.pl_mem_alloc(&p.peers, C.size_t(8*p.world))); err != nil {
		return err
	}
	if err := cuErr("allocate p2p error word", C.pl_host_alloc(&p.herrHost, &p.herrDev, 64)); err != nil {
		return err
	}
	p.herr = (*uint32)(p.herrHost)
	b.Resident += n + 256 + int64(8*p.world)
	h := make([]byte, p2pHandleSize)
	if err := cuErr("IPC handle of the p2p region", C.pl_ipc_get(p.region, unsafe.Pointer(&h[0]))); err != nil {
		return err
	}
	rec.Handle = h
	return nil
}

// mapPeers maps every peer's region (after checking peer access between
// the GPUs) and uploads the table of mapped addresses.
func (p *P2P) mapPeers(recs []p2pRecord) error {
	b := p.b
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	p.mapped = make([]C.CUdeviceptr, p.world)
	for r, x := range recs {
		if r == p.rank {
			p.mapped[r] = p.region
			continue
		}
		bus := C.CString(x.Bus)
		var d C.CUdevice
		err := cuErr("device of PCI bus id "+x.Bus, C.pl_dev_by_bus(&d, bus))
		C.free(unsafe.Pointer(bus))
		if err != nil {
			return fmt.Errorf("rank %d's GPU %s is not visible: %w", r, x.Bus, err)
		}
		if d != C.CUdevice(b.dev) {
			var ok C.int
			if err := cuErr("can access peer", C.pl_can_access(&ok, C.CUdevice(b.dev), d)); err != nil {
				return err
			}
			if ok == 0 {
				return fmt.Errorf("GPU %s cannot access rank %d's GPU %s as a peer", recs[p.rank].Bus, r, x.Bus)
			}
		}
		if err := cuErr(fmt.Sprintf("open rank %d's IPC handle", r), C.pl_ipc_open(&p.mapped[r], unsafe.Pointer(&x.Handle[0]))); err != nil {
			return err
		}
	}
	tab := make([]uint64, p.world)
	for r, m := range p.mapped {
		tab[r] = uint64(m)
	}
	return cuErr("upload p2p peer table", C.pl_htod(p.peers, unsafe.Pointer(&tab[0]), C.size_t(8*p.world)))
}

// release frees what export and mapPeers made (a failed join, or Close).
func (p *P2P) release() {
	b := p.b
	if !b.enter() {
		// The context is poisoned: the process is about to exit, which
		// frees everything.
		b.exit()
		return
	}
	defer b.exit()
	for r, m := range p.mapped {
		if r != p.rank && m != 0 {
			C.pl_ipc_close(m)
		}
	}
	p.mapped = nil
	for _, d := range []*C.CUdeviceptr{&p.region, &p.state, &p.peers} {
		if *d != 0 {
			C.pl_mem_free(*d)
			*d = 0
		}
	}
	if p.herrHost != nil {
		C.pl_host_free(p.herrHost)
		p.herrHost, p.herr = nil, nil
	}
}

// Rank and Size place the collective in its group.
func (p *P2P) Rank() int { return p.rank }
func (p *P2P) Size() int { return p.world }

// timedOut reports whether a kernel gave up waiting for a peer (a plain
// read of mapped host memory: no CUDA call, so a watchdog may call it while
// the stream is stuck).
func (p *P2P) timedOut() bool {
	if p.closed.Load() || p.herr == nil {
		return false
	}
	return atomic.LoadUint32(p.herr) != 0
}

func (p *P2P) errTimedOut() error {
	return fmt.Errorf("%w: a peer did not answer within %v", ErrP2P, time.Duration(p.timeoutNs))
}

// AllReduceSum implements kernels.Collective: the peer-memory kernel for
// up to P2PMaxFloats floats in a 16-byte aligned buffer, NCCL otherwise.
func (p *P2P) AllReduceSum(buf kernels.Buf, n int) error {
	if done, err := p.allReduce(buf, nil, n); done {
		return err
	}
	// (Every rank decides alike: same n, and buffers come from the same
	// allocator sequence.)
	return p.Comm.AllReduceSum(buf, n)
}

// AllReduceSumAdd implements kernels.AllReduceAdder: acc += the sum of buf,
// in the one-shot kernel (no separate add launch), for the sizes
// AllReduceSum runs on P2P; larger ones are declined (NCCL + Add).
func (p *P2P) AllReduceSumAdd(acc, buf kernels.Buf, n int) (bool, error) {
	return p.allReduce(buf, acc, n)
}

// allReduce runs one P2P all-reduce of buf's first n floats, the sums
// written back to buf or, with acc, added into acc; false (nothing done)
// for sizes or alignments the kernel does not take.
func (p *P2P) allReduce(buf, acc kernels.Buf, n int) (bool, error) {
	if n <= 0 {
		return true, nil
	}
	if p.closed.Load() {
		return true, fmt.Errorf("%w: closed", ErrP2P)
	}
	if p.timedOut() {
		return true, p.errTimedOut()
	}
	var accp cu.DevicePtr
	if acc != nil {
		if n > acc.Len() || dptr(acc)%16 != 0 {
			return false, nil
		}
		accp = dptr(acc)
	}
	if n > p.slot || n > buf.Len() || dptr(buf)%16 != 0 {
		return false, nil
	}
	b := p.b
	if !b.enter() {
		b.exit()
		return true, b.err
	}
	defer b.exit()
	p.enqueue(dptr(buf), accp, n)
	return true, b.err
}

// enqueue launches the kernel on the stream (backend lock held); acc 0
// writes the sums to buf.
func (p *P2P) enqueue(buf, acc cu.DevicePtr, n int) {
	b := p.b
	if b.err != nil || ablated("allreduce") { // on every rank alike: no peer waits
		return
	}
	// The kernels differ in one argument: the flag kernel's slot size, the
	// low-latency kernel's offset of its slots in the region.
	fn, slots := p.fn, uint64(p.slot)
	blocks, threads := p2pGrid(n)
	if p.fnLL != nil && p2pLL(n) {
		fn, slots = p.fnLL, uint64(p2pLLOffset(p.world, p.slot))
		blocks, threads = p2pLLGrid(n)
	}
	b.a(ptr(buf), uint64(p.peers), uint64(p.state), uint64(p.herrDev), i32(n), i32(p.rank), i32(p.world), slots,
		p.timeoutNs, ptr(acc))
	if switches.noPDL {
		b.fail(launch(fn, blocks, 1, threads, b.s, &b.args, b.nargs))
		return
	}
	b.fail(launchPDL(fn, blocks, 1, threads, b.s, &b.args, b.nargs))
}

// AsyncError is the NCCL communicator's, or ErrP2P when a kernel timed out
// waiting for a peer. Like Comm.AsyncError it takes no backend lock.
func (p *P2P) AsyncError() error {
	if p.timedOut() {
		return p.errTimedOut()
	}
	return p.Comm.AsyncError()
}

// Abort aborts the NCCL communicator (the peer regions stay mapped: the
// process is about to exit, and a kernel still spinning ends at its
// timeout).
func (p *P2P) Abort() error { return p.Comm.Abort() }

// Close waits for the queued work, unmaps the peers' regions, frees this
// rank's and closes the NCCL communicator. Every rank should close (a peer
// may still be writing into this rank's region until its last all-reduce
// has ended; a rank that exits instead leaves the driver to reclaim it).
func (p *P2P) Close() error {
	var err error
	p.closeOnce.Do(func() {
		err = p.b.Sync()
		p.closed.Store(true)
		p.release()
		err = errors.Join(err, p.Comm.Close())
	})
	return err
}

// BenchAllReduce is Comm.BenchAllReduce for the peer-memory kernel (n must
// be at most P2PMaxFloats): k back-to-back all-reduces, reps times, eager
// or captured once into a graph and replayed. All ranks must call it alike.
func (p *P2P) BenchAllReduce(n, k, reps int, graph bool) (time.Duration, error) {
	if n > p.slot {
		return 0, fmt.Errorf("%w: %d floats (slots hold %d)", ErrP2P, n, p.slot)
	}
	b := p.b
	buf := b.NewBuf(n)
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	b.Write(buf, 0, ones)
	if err := b.Sync(); err != nil {
		return 0, err
	}
	if !graph {
		for range k {
			if err := p.AllReduceSum(buf, n); err != nil {
				return 0, err
			}
		}
		if err := b.Sync(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		for range reps * k {
			if err := p.AllReduceSum(buf, n); err != nil {
				return 0, err
			}
		}
		if err := b.Sync(); err != nil {
			return 0, err
		}
		if p.timedOut() {
			return 0, p.errTimedOut()
		}
		return time.Since(t0) / time.Duration(reps*k), nil
	}
	if !b.enter() {
		b.exit()
		return 0, b.err
	}
	defer b.exit()
	if err := beginCapture(b.s); err != nil {
		return 0, err
	}
	for range k {
		p.enqueue(dptr(buf), 0, n)
	}
	exec, err := endCapture(b.s)
	if b.err != nil || err != nil {
		if err == nil {
			graphDestroy(exec)
		}
		return 0, errors.Join(b.err, err)
	}
	defer graphDestroy(exec)
	b.fail(graphLaunch(exec, b.s)) // warm-up: graph upload
	b.fail(b.stream.Synchronize())
	t0 := time.Now()
	for range reps {
		b.fail(graphLaunch(exec, b.s))
	}
	b.fail(b.stream.Synchronize())
	d := time.Since(t0) / time.Duration(reps*k)
	if b.err == nil && p.timedOut() {
		return 0, p.errTimedOut()
	}
	return d, b.err
}

// CheckAllReduce runs one all-reduce of n floats where rank r holds
// r+1+i·2^-10 (exact in float32) and checks every element against the
// rank-order sum: a quick test of the exchange on a live group. All ranks
// must call it alike.
func (p *P2P) CheckAllReduce(n int) error {
	if ablated("allreduce") { // the launches are left out: nothing to check
		return nil
	}
	b := p.b
	buf := b.NewBuf(n)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(p.rank+1) + float32(i%1024)/1024
	}
	b.Write(buf, 0, x)
	if err := p.AllReduceSum(buf, n); err != nil {
		return err
	}
	got := make([]float32, n)
	b.Read(buf, 0, got)
	if err := b.Err(); err != nil {
		return err
	}
	if p.timedOut() {
		return p.errTimedOut()
	}
	var bad []string
	for i := range got {
		var want float32
		for r := range p.world {
			want += float32(r+1) + float32(i%1024)/1024
		}
		if got[i] != want && len(bad) < 4 {
			bad = append(bad, fmt.Sprintf("[%d] %g, want %g", i, got[i], want))
		}
	}
	if bad != nil {
		return fmt.Errorf("%w: check of %d floats: %s", ErrP2P, n, strings.Join(bad, ", "))
	}
	return nil
}
