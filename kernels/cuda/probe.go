//go:build cuda

package cuda

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"
)

// The host half of the in-graph timeline probes (probe.cuh). A module
// built with -DPOCKET_PROBE holds a pocket_probe table; loadModule finds
// it, and from then on every launch is logged by name and grid (and graph
// captures by a marker line), so that the records, which know only their
// launch's %gridid, can be matched to kernels. Production PTX has no such
// table: then nothing is logged and nothing is written.
//
// It is a process-wide registry rather than a Backend field because the
// launch helpers (driver.go) take only driver handles; it exists for a
// measurement run of pocket-worker bench, one device.
var probe struct {
	on     atomic.Bool
	mu     sync.Mutex
	names  map[cFunc]string
	tables []probeTable
	log    []string
}

type probeTable struct {
	module string
	ptr    cu.DevicePtr
	bytes  int64
}

// probeModule registers mod's kernels' names and, if it was built with
// probes, its table (which starts zeroed: a module's globals are).
func probeModule(mod cu.Module, what string, fns map[string]cFunc) {
	for name, f := range fns {
		probeName(f, name)
	}
	ptr, n, err := mod.Global("pocket_probe")
	if err != nil || n <= 0 {
		return
	}
	probe.mu.Lock()
	probe.tables = append(probe.tables, probeTable{what, ptr, n})
	probe.mu.Unlock()
	probe.on.Store(true)
}

// probeName names f in the launch log (for kernels loaded outside
// loadModule).
func probeName(f cFunc, name string) {
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if probe.names == nil {
		probe.names = map[cFunc]string{}
	}
	probe.names[f] = name
}

// probeNote logs a launch of f (only once a probed module is loaded).
func probeNote(f cFunc, gx, gy, bx int) {
	if !probe.on.Load() {
		return
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if len(probe.log) >= probeLogMax {
		return
	}
	name := probe.names[f]
	if name == "" {
		name = "?"
	}
	probe.log = append(probe.log, fmt.Sprintf("%s %d %d %d", name, gx, gy, bx))
}

// probeLogMax bounds the launch log (a probed worker serving requests
// would otherwise grow it for ever); a capture starts it afresh, since
// the summary reads the last captured graph and what follows it.
const probeLogMax = 1 << 20

// probeRecord is the bytes of one block's record in the .bin file: the
// eight fields of probe.cuh's slot (grid, block/SM/blocks, start, wait,
// end, first warp's end, mark, mark2), little-endian.
const probeRecord = 64

// probeMark logs a marker line ("# capture", "# end capture").
func probeMark(what string) {
	if !probe.on.Load() {
		return
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if what == "capture" {
		probe.log = probe.log[:0]
	}
	probe.log = append(probe.log, "# "+what)
}

// ProbeDump writes the launch log to path+".log" and the probe tables'
// filled records (the 8 little-endian uint64 of probe.cuh's) to
// path+".bin", when the loaded PTX carries probes; otherwise it reports
// that there is nothing to write. The device must be idle.
func (b *Backend) ProbeDump(path string) error {
	ok := b.lock()
	defer b.exit()
	if !ok {
		return b.err
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if len(probe.tables) == 0 {
		return fmt.Errorf("cuda: no probes: the PTX was not built with -DPOCKET_PROBE (scripts/probe-build.sh)")
	}
	lf, err := os.Create(path + ".log")
	if err != nil {
		return err
	}
	lw := bufio.NewWriter(lf)
	for _, l := range probe.log {
		fmt.Fprintln(lw, l)
	}
	if err := lw.Flush(); err != nil {
		lf.Close()
		return err
	}
	if err := lf.Close(); err != nil {
		return err
	}
	bf, err := os.Create(path + ".bin")
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(bf)
	for _, t := range probe.tables {
		host := make([]uint64, t.bytes/8)
		if err := cu.MemcpyDtoH(unsafe.Pointer(&host[0]), t.ptr, t.bytes); err != nil {
			bf.Close()
			return fmt.Errorf("cuda: probe table of %s: %w", t.module, err)
		}
		for i := 0; i+8 <= len(host); i += 8 {
			if host[i] == 0 {
				continue
			}
			var rec [probeRecord]byte
			for k := range probeRecord / 8 {
				binary.LittleEndian.PutUint64(rec[8*k:], host[i+k])
			}
			if _, err := bw.Write(rec[:]); err != nil {
				bf.Close()
				return err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		bf.Close()
		return err
	}
	return bf.Close()
}
