//go:build cuda

package cuda

// NCCL, loaded with dlopen by soname (libnccl.so.2) so that one binary runs
// against whichever NCCL the host has and builds where none is installed.
// Only the handful of entry points tensor parallelism needs are bound:
// unique id, communicator init/destroy/abort, the async-error poll and
// float32 sum all-reduce on the rank's stream.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <cuda.h>

typedef struct { char internal[128]; } pl_nccl_id;
typedef void *pl_nccl_comm;

typedef int (*pl_get_unique_id_t)(pl_nccl_id *);
typedef int (*pl_comm_init_rank_t)(pl_nccl_comm *, int, pl_nccl_id, int);
typedef int (*pl_all_reduce_t)(const void *, void *, size_t, int, int, pl_nccl_comm, CUstream);
typedef int (*pl_comm_fn_t)(pl_nccl_comm);
typedef int (*pl_comm_async_error_t)(pl_nccl_comm, int *);
typedef const char *(*pl_error_string_t)(int);
typedef int (*pl_get_version_t)(int *);

static void *pl_nccl_lib;
static pl_get_unique_id_t pl_nccl_get_unique_id;
static pl_comm_init_rank_t pl_nccl_comm_init_rank;
static pl_all_reduce_t pl_nccl_all_reduce;
static pl_comm_fn_t pl_nccl_comm_destroy, pl_nccl_comm_abort;
static pl_comm_async_error_t pl_nccl_comm_async_error;
static pl_error_string_t pl_nccl_error_string;
static pl_get_version_t pl_nccl_get_version;

// pl_nccl_open loads the library once; it returns NULL or what failed.
static const char *pl_nccl_open(void) {
	if (pl_nccl_lib) return NULL;
	void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!h) return dlerror();
#define PL_SYM(var, name) if (!(*(void **)&var = dlsym(h, name))) return name;
	PL_SYM(pl_nccl_get_unique_id, "ncclGetUniqueId")
	PL_SYM(pl_nccl_comm_init_rank, "ncclCommInitRank")
	PL_SYM(pl_nccl_all_reduce, "ncclAllReduce")
	PL_SYM(pl_nccl_comm_destroy, "ncclCommDestroy")
	PL_SYM(pl_nccl_comm_abort, "ncclCommAbort")
	PL_SYM(pl_nccl_comm_async_error, "ncclCommGetAsyncError")
	PL_SYM(pl_nccl_error_string, "ncclGetErrorString")
	PL_SYM(pl_nccl_get_version, "ncclGetVersion")
#undef PL_SYM
	pl_nccl_lib = h;
	return NULL;
}

static int pl_nccl_unique_id(pl_nccl_id *id) { return pl_nccl_get_unique_id(id); }
static int pl_nccl_init(pl_nccl_comm *c, int n, pl_nccl_id *id, int rank) {
	return pl_nccl_comm_init_rank(c, n, *id, rank);
}
// ncclFloat32 = 7, ncclSum = 0 (nccl.h, stable since NCCL 2.0).
static int pl_nccl_allreduce_f32(CUdeviceptr buf, size_t n, pl_nccl_comm c, CUstream s) {
	return pl_nccl_all_reduce((void *)buf, (void *)buf, n, 7, 0, c, s);
}
static int pl_nccl_destroy(pl_nccl_comm c) { return pl_nccl_comm_destroy(c); }
static int pl_nccl_abort(pl_nccl_comm c) { return pl_nccl_comm_abort(c); }
static int pl_nccl_async_error(pl_nccl_comm c, int *r) { return pl_nccl_comm_async_error(c, r); }
static const char *pl_nccl_strerror(int r) { return pl_nccl_error_string(r); }
static int pl_nccl_version(int *v) { return pl_nccl_get_version(v); }
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

// ErrNCCL marks failures of the NCCL library or of a communicator (a peer
// that died or a collective that was aborted): the group must be rebuilt.
var ErrNCCL = errors.New("nccl")

var ncclOnce struct {
	sync.Once
	err error
}

// loadNCCL opens libnccl.so.2 the first time it is needed.
func loadNCCL() error {
	ncclOnce.Do(func() {
		if what := C.pl_nccl_open(); what != nil {
			ncclOnce.err = fmt.Errorf("%w: load libnccl.so.2: %s", ErrNCCL, C.GoString(what))
		}
	})
	return ncclOnce.err
}

func ncclErr(op string, r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s (%d)", ErrNCCL, op, C.GoString(C.pl_nccl_strerror(r)), int(r))
}

// NCCLVersion is the loaded library's version code (e.g. 22803 for 2.28.3).
func NCCLVersion() (int, error) {
	if err := loadNCCL(); err != nil {
		return 0, err
	}
	var v C.int
	err := ncclErr("version", C.pl_nccl_version(&v))
	return int(v), err
}

// UniqueID identifies one NCCL group. Rank 0 makes it and hands it to the
// other ranks out of band (a file, the daemon); its bytes also carry the
// address of rank 0's bootstrap socket, which is how ranks on other hosts
// find the group.
type UniqueID [128]byte

// NewUniqueID makes a fresh group id (rank 0 only).
func NewUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := loadNCCL(); err != nil {
		return id, err
	}
	var cid C.pl_nccl_id
	if err := ncclErr("get unique id", C.pl_nccl_unique_id(&cid)); err != nil {
		return id, err
	}
	copy(id[:], C.GoBytes(unsafe.Pointer(&cid), 128))
	return id, nil
}

// Comm is one rank's NCCL communicator, bound to a Backend's GPU and
// stream. It implements kernels.Collective: the backend's tensor-parallel
// all-reduce. Create it once per group and keep it for the model's life.
type Comm struct {
	b          *Backend
	c          C.pl_nccl_comm
	rank, size int
	mu         sync.Mutex // guards c against Close/Abort racing each other
}

var _ kernels.Collective = (*Comm)(nil)

// NewComm joins the group id as rank of size. It blocks until every rank
// has joined (ncclCommInitRank is collective), on the backend's context.
func (b *Backend) NewComm(id UniqueID, rank, size int) (*Comm, error) {
	if err := loadNCCL(); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrNCCL, rank, size)
	}
	if !b.enter() {
		b.exit()
		return nil, b.err
	}
	defer b.exit()
	cid := (*C.pl_nccl_id)(unsafe.Pointer(&id[0]))
	var c C.pl_nccl_comm
	if err := ncclErr("comm init rank", C.pl_nccl_init(&c, C.int(size), cid, C.int(rank))); err != nil {
		return nil, err
	}
	return &Comm{b: b, c: c, rank: rank, size: size}, nil
}

// Rank and Size place the communicator in its group.
func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// AllReduceSum implements kernels.Collective: an in-place float32 sum over
// the group, queued on the backend's stream after the ops before it (so
// it is captured into a graph when a capture is running).
func (c *Comm) AllReduceSum(buf kernels.Buf, n int) error {
	b := c.b
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	c.mu.Lock()
	comm := c.c
	c.mu.Unlock()
	if comm == nil {
		return fmt.Errorf("%w: communicator closed or aborted", ErrNCCL)
	}
	if n <= 0 {
		return nil
	}
	return ncclErr("all-reduce", C.pl_nccl_allreduce_f32(C.CUdeviceptr(dptr(buf)), C.size_t(n), comm, b.s))
}

// AsyncError polls the communicator for a failure detected in the
// background (a peer gone, a network error); nil while healthy. It does not
// take the backend's lock, so a watchdog can call it while a step waits.
func (c *Comm) AsyncError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return nil
	}
	var r C.int
	if err := ncclErr("get async error", C.pl_nccl_async_error(c.c, &r)); err != nil {
		return err
	}
	if r == 7 { // ncclInProgress: not an error
		return nil
	}
	return ncclErr("async", r)
}

// Abort tears the communicator down without waiting for peers: collectives
// in flight return, so a rank stuck on a dead peer can report and exit.
// It does not take the backend's lock (the stuck step holds it).
func (c *Comm) Abort() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return nil
	}
	err := ncclErr("comm abort", C.pl_nccl_abort(c.c))
	c.c = nil
	return err
}

// Close destroys the communicator after its queued work (collective: every
// rank should close).
func (c *Comm) Close() error {
	b := c.b
	if !b.enter() {
		b.exit()
		return b.err
	}
	defer b.exit()
	c.mu.Lock() // lock order: the backend, then the communicator
	defer c.mu.Unlock()
	if c.c == nil {
		return nil
	}
	err := ncclErr("comm destroy", C.pl_nccl_destroy(c.c))
	c.c = nil
	return err
}

// BenchAllReduce times k back-to-back all-reduces of n floats (a decode
// step's worth), repeated reps times, and returns the time per all-reduce:
// eager (one ncclAllReduce call each, as an eager decode step issues them)
// or, with graph, captured once into a CUDA graph and replayed (as a
// captured decode step runs them). All ranks must call it alike.
func (c *Comm) BenchAllReduce(n, k, reps int, graph bool) (time.Duration, error) {
	b := c.b
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
		for range k { // warm-up: connections, first-use set-up
			if err := c.AllReduceSum(buf, n); err != nil {
				return 0, err
			}
		}
		if err := b.Sync(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		for range reps * k {
			if err := c.AllReduceSum(buf, n); err != nil {
				return 0, err
			}
		}
		if err := b.Sync(); err != nil {
			return 0, err
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
	var qerr error
	c.mu.Lock()
	comm := c.c
	c.mu.Unlock()
	for range k {
		if qerr == nil {
			qerr = ncclErr("all-reduce (capture)", C.pl_nccl_allreduce_f32(C.CUdeviceptr(dptr(buf)), C.size_t(n), comm, b.s))
		}
	}
	exec, err := endCapture(b.s)
	if qerr != nil || err != nil {
		if err == nil {
			graphDestroy(exec)
		}
		return 0, errors.Join(qerr, err)
	}
	defer graphDestroy(exec)
	b.fail(graphLaunch(exec, b.s)) // warm-up: graph upload
	b.fail(b.stream.Synchronize())
	t0 := time.Now()
	for range reps {
		b.fail(graphLaunch(exec, b.s))
	}
	b.fail(b.stream.Synchronize())
	return time.Since(t0) / time.Duration(reps*k), b.err
}
