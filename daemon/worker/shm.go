package worker

import (
	"fmt"
	"os"
	"unsafe"

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
	if _, err := f.ReadAt(f32Bytes(dst), r.off); err != nil {
		return fmt.Errorf("%s from shared memory: %w", what, err)
	}
	return nil
}

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
