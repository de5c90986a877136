package worker

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// DefaultSharedBytes is the size of each rank's shared-memory region
// when Options.SharedBytes is 0: room for a Qwen3.5-27B's recurrent-state
// snapshot (151 MB), which a 4096-token prompt takes 16 of. In frames
// instead, a snapshot cost 120–200 ms against 67 ms through the region
// (BenchmarkSnapshotOverWorker). A memfd's pages are allocated as they
// are first written, so the size costs nothing a model does not use.
const DefaultSharedBytes = 256 << 20

// MaxSharedBytes bounds a region (the Hello's size is checked against
// it on both sides).
const MaxSharedBytes = 1 << 30

// newShared makes a rank's shared-memory region: a memfd of size bytes,
// sealed against growing and shrinking (a worker cannot make the
// daemon's reads fault or come up short), that the worker gets as
// ExtraFiles[1] (fd 4) and maps.
func newShared(name string, size int64) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd seals: %w", err)
	}
	return f, nil
}

// shmRef is where a frame's float32 data lies in the shared region.
type shmRef struct {
	off   int64
	count int
}

func (e *enc) ref(r shmRef) {
	e.u64(uint64(r.off))
	e.u32(uint32(r.count))
}

func (d *dec) ref(what string) shmRef {
	off := d.u64(what)
	n := d.u32(what)
	if d.err == nil && off > MaxSharedBytes {
		d.err = fmt.Errorf("%w: %s at offset %d", ErrBadFrame, what, off)
	}
	return shmRef{off: int64(off), count: int(n)}
}

// check reports whether r lies inside a region of size bytes, aligned
// for float32.
func (r shmRef) check(size int64, what string) error {
	if r.off < 0 || r.count < 0 || r.off%4 != 0 || r.off > size || int64(r.count) > (size-r.off)/4 {
		return fmt.Errorf("%w: %s of %d floats at offset %d outside the %d-byte shared region", ErrBadFrame, what, r.count, r.off, size)
	}
	return nil
}

// readShared copies r's floats from the region f (size bytes) into dst,
// which must hold r.count of them.
func readShared(f *os.File, size int64, r shmRef, dst []float32, what string) error {
	if err := r.check(size, what); err != nil {
		return err
	}
	if len(dst) != r.count {
		return fmt.Errorf("%w: %s of %d floats, want %d", ErrBadFrame, what, r.count, len(dst))
	}
	if r.count == 0 {
		return nil
	}
	return readAtParallel(f, f32Bytes(dst), r.off, what)
}

// parallelCopyMin is the copy above which the daemon splits a transfer
// through the region: a hybrid's recurrent-state snapshot (Qwen3.5-27B:
// 158 MB) read in one pread is one core's memcpy and page faults, ~58 ms
// on the GPU host, 31 of them for a 4096-token prompt with
// cache.host_snapshots (docs/benchmarks.md).
const parallelCopyMin = 16 << 20

// copyParallel runs op over b and the region from off in parallel chunks
// (one a CPU, at most) when b is large: pread or pwrite of disjoint
// parts, each faulting in its own pages.
func copyParallel(b []byte, off int64, op func(part []byte, at int64) (int, error)) error {
	n := min(runtime.GOMAXPROCS(0), len(b)/(parallelCopyMin/2))
	if len(b) < parallelCopyMin || n < 2 {
		_, err := op(b, off)
		return err
	}
	chunk := (len(b)/n + 4095) &^ 4095
	var g errgroup.Group
	for lo := 0; lo < len(b); lo += chunk {
		part, at := b[lo:min(lo+chunk, len(b))], off+int64(lo)
		g.Go(func() error {
			_, err := op(part, at)
			return err
		})
	}
	return g.Wait()
}

// readAtParallel fills b from the region f at off.
func readAtParallel(f *os.File, b []byte, off int64, what string) error {
	if err := copyParallel(b, off, f.ReadAt); err != nil {
		return fmt.Errorf("%s from shared memory: %w", what, err)
	}
	return nil
}

// writeShared puts b at the start of the region f (the daemon's side of a
// request whose data the worker reads from there).
func writeShared(f *os.File, b []byte) error { return copyParallel(b, 0, f.WriteAt) }

// mapping is the worker's view of its shared region.
type mapping struct {
	b []byte
}

// mapShared maps the region the daemon passed (size bytes, as its Hello
// says: the file must be exactly that large).
func mapShared(f *os.File, size int64) (*mapping, error) {
	if size <= 0 || size > MaxSharedBytes || size%4 != 0 {
		return nil, fmt.Errorf("shared region of %d bytes", size)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != size {
		return nil, fmt.Errorf("shared region is %d bytes, hello says %d", st.Size(), size)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap shared region: %w", err)
	}
	return &mapping{b: b}, nil
}

// floats is the region's r as float32s (r checked first).
func (m *mapping) floats(r shmRef, what string) ([]float32, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: %s in shared memory, but none is mapped", errBadRequest, what)
	}
	if err := r.check(int64(len(m.b)), what); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if r.count == 0 {
		return nil, nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&m.b[r.off])), r.count), nil
}

// fits reports whether n floats fit in the region (at offset 0).
func (m *mapping) fits(n int) bool { return m != nil && n > 0 && int64(n)*4 <= int64(len(m.b)) }
