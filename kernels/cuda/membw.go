//go:build cuda

package cuda

//go:generate sh -c "bash ../../scripts/nvcc12.sh -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o membw.ptx membw.cu && gzip -n9f membw.ptx"

import (
	_ "embed"
	"fmt"
	"time"

	"gorgonia.org/cu"
)

// The streaming-read microbenchmarks of membw.cu (which says why): how
// fast N SMs, one block each, read DRAM by plain loads, by the decode
// rings' cp.async copies, or by the tensor-memory engine's bulk copies.
// A measurement for `pocket-worker membw`, outside every model's path.

//go:embed membw.ptx.gz
var membwPTX []byte

// StreamCase is one streaming-read measurement: Mode "ldg" (plain loads),
// "ring" (cp.async rings of Stages 2 KiB units a warp: 3, 4, 6 or 8) or
// "bulk" (cp.async.bulk rings of Stages chunks of Chunk bytes a warp: 2,
// 3, 4 or 8 stages, Chunk a multiple of 16), on SMs blocks of Warps warps.
type StreamCase struct {
	Mode                      string
	SMs, Warps, Stages, Chunk int
}

// String is the case as `pocket-worker membw` prints it.
func (c StreamCase) String() string {
	switch c.Mode {
	case "ring":
		return fmt.Sprintf("ring %dw×%d", c.Warps, c.Stages)
	case "bulk":
		return fmt.Sprintf("bulk %dw×%d×%dK", c.Warps, c.Stages, c.Chunk/1024)
	}
	return fmt.Sprintf("ldg %dw", c.Warps)
}

// membwSource is the bytes read: regions of SMs·per bytes, each rep the
// next, so that no rep finds the last one's bytes in the 50 MB L2.
const membwSource = 4 << 30

// StreamRead runs each case reps times over per bytes a block (a multiple
// of 16 KiB) and returns the read rates in GB/s. Each block takes more than
// half an SM's shared memory, so that the blocks sit on distinct SMs.
func (b *Backend) StreamRead(cases []StreamCase, per int64, reps int) ([]float64, error) {
	if per <= 0 || per%(16<<10) != 0 || reps <= 0 {
		return nil, fmt.Errorf("cuda: StreamRead of %d bytes a block, %d reps", per, reps)
	}
	if !b.enter() {
		b.exit()
		return nil, b.Err()
	}
	defer b.exit()
	// The kernels by name: membw_ldg, membw_ring_S, membw_bulk_S.
	fns := map[string]*cFunc{"membw_ldg": new(cFunc)}
	for _, s := range []int{3, 4, 6, 8} {
		fns[fmt.Sprintf("membw_ring_%d", s)] = new(cFunc)
	}
	for _, s := range []int{2, 3, 4, 8} {
		fns[fmt.Sprintf("membw_bulk_%d", s)] = new(cFunc)
	}
	mod, err := loadModule(membwPTX, "membw", fns)
	if err != nil {
		return nil, err
	}
	defer mod.Unload()
	perSM, err := b.dev.Attribute(cu.MaxSharedMemoryPerMultiprocessor)
	if err != nil {
		return nil, fmt.Errorf("cuda: shared memory per SM: %w", err)
	}
	maxShm := min(perSM-1024, 227*1024)
	src, err := cu.MemAlloc(membwSource)
	if err != nil {
		return nil, fmt.Errorf("cuda: StreamRead source: %w", err)
	}
	defer cu.MemFree(src)
	sink, err := cu.MemAlloc(4)
	if err != nil {
		return nil, fmt.Errorf("cuda: StreamRead sink: %w", err)
	}
	defer cu.MemFree(sink)
	if err := cu.MemsetD8Async(src, 1, membwSource, b.stream); err != nil {
		return nil, fmt.Errorf("cuda: StreamRead fill: %w", err)
	}
	out := make([]float64, len(cases))
	for i, c := range cases {
		name, shm := "", 0
		args := []uint64{0, uint64(per)} // the source's region, set by launch
		switch c.Mode {
		case "ldg":
			name = "membw_ldg"
		case "ring":
			name, shm = fmt.Sprintf("membw_ring_%d", c.Stages), c.Warps*c.Stages*2048
		case "bulk":
			name, shm = fmt.Sprintf("membw_bulk_%d", c.Stages), c.Warps*c.Stages*(c.Chunk+8)
			if c.Chunk <= 0 || c.Chunk%16 != 0 || per%int64(c.Chunk) != 0 {
				name = ""
			}
			args = append(args, i32(c.Chunk))
		}
		args = append(args, ptr(sink))
		var f cFunc
		if p := fns[name]; p != nil {
			f = *p
		}
		// One block an SM: more than half of an SM's shared memory.
		shm = max(shm, perSM/2+1024)
		if f == nil || c.SMs < 1 || c.SMs > b.sms || c.Warps < 1 || c.Warps > 32 || shm > maxShm {
			return nil, fmt.Errorf("cuda: StreamRead case %+v: no kernel takes it on this device", c)
		}
		if err := setMaxShm(f, shm); err != nil {
			return nil, err
		}
		span := int64(c.SMs) * per
		if span > membwSource {
			return nil, fmt.Errorf("cuda: StreamRead case %+v: %d bytes a rep, more than the %d of the source", c, span, membwSource)
		}
		regions := membwSource / span
		launch := func(r int) {
			args[0] = ptr(src + cu.DevicePtr(int64(r)%regions*span))
			b.launchFnShm(f, c.SMs, 1, 32*c.Warps, shm, args...)
		}
		launch(0) // warm: the module's first launch, the TLB
		if err := b.stream.Synchronize(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		for r := 1; r <= reps; r++ {
			launch(r)
		}
		if err := b.stream.Synchronize(); err != nil {
			return nil, err
		}
		if b.err != nil {
			return nil, b.err
		}
		out[i] = float64(reps) * float64(span) / time.Since(t0).Seconds() / 1e9
	}
	return out, nil
}
