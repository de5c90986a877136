//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o sample.ptx sample.cu && gzip -n9f sample.ptx"

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Sampling on the device (sample.cu): a sampled decode step's token drawn
// from the logits where the step left them, reading back one int32.

//go:embed sample.ptx.gz
var samplePTX []byte

type sampleMod struct {
	adjust   cFunc // logit_adjust
	adj      cu.DevicePtr
	adjCap   int64
	ents     cu.DevicePtr
	entsCap  int64
	draw     cFunc
	drawGrid cFunc        // sample_draw_grid (sample_grid.cuh)
	drawFed  cFunc        // sample_draw_grid_f: the same inside a recorded step (CaptureFeedDraw)
	grid     cu.DevicePtr // its GridScratch (sampleGridBytes, zeroed once)
	noGrid   bool         // a cooperative launch was refused: sample_draw only
	probs    cu.DevicePtr // scratch for the probabilities (probsCap bytes)
	probsCap int64
	outWord  cu.DevicePtr
}

const (
	// sampleGridBytes is the size GridScratch is held to (static_assert in
	// sample_grid.cuh).
	sampleGridBytes = 2 << 20
	// drawGridFrom is the least vocabulary the draw spreads over a block an
	// SM: below it one block's passes are short and the grid's barriers
	// cost what they save (20000 ids: the same µs either way on an H200).
	drawGridFrom = 32768
	// drawGridMaxBlocks is sample_grid.cuh's SG_MAXB: GridScratch has
	// slots for that many blocks.
	drawGridMaxBlocks = 160
	// drawGridMinIDs is the fewest ids a block of the grid takes (one a
	// thread), so that smaller vocabularies take fewer blocks than SMs.
	drawGridMinIDs = 1024
	// drawGridMaxIDs bounds the vocabularies the grid takes: its top-p
	// masses are fixed-point sums of 2^40 a probability (sample_grid.cuh's
	// SG_FIX), which must stay below 2^63.
	drawGridMaxIDs = 1 << 23
)

// DrawArgs is a sampled step's rule and uniform variate as sample_draw
// takes them: InvT is float32(1/temperature), TopK ≤ 0, TopP outside
// (0, 1) and MinP ≤ 0 are off, U is in [0, 1).
type DrawArgs struct {
	InvT float32
	TopK int
	TopP float64
	MinP float32
	U    float64
	// Adjust is the step's penalties and bias, applied to a copy of the
	// logits before the draw (nil or empty: none).
	Adjust *LogitAdjust
}

// LogitAdjust is session.Adjust as logit_adjust takes it.
type LogitAdjust struct {
	Repetition float64
	Entries    []LogitAdjustEntry
}

// LogitAdjustEntry is sample.cu's struct LogitAdjust, field for field
// (24 bytes), so that a step's entries are uploaded as they are: the
// token id, which changes apply (session.AdjustRepeat 1, AdjustSub 2,
// AdjustBias 4), the count penalty and the bias.
type LogitAdjustEntry struct {
	ID    int32
	Flags int32
	Sub   float64
	Bias  float32
	_     float32
}

// Draw returns the token drawn from the first n floats of x by the
// session's sampling rule (session.Drawer; sample.cu says where a draw
// may differ by a rounding), or -1 after a failure (b.Err says which).
func (b *Backend) Draw(x kernels.Buf, n int, a DrawArgs) int32 {
	if !b.enter() {
		b.exit()
		return -1
	}
	defer b.exit()
	m := b.sampleModule()
	if m == nil {
		return -1
	}
	probs := b.scratch(&m.probs, &m.probsCap, int64(4*n))
	src := dptr(x)
	if a.Adjust != nil && len(a.Adjust.Entries) > 0 {
		src = b.adjustLogits(m, src, n, a.Adjust)
	}
	switch {
	case a.TopK == 1:
		// Greedy (the session's top-k 1, a penalised or biased greedy
		// generation's rule): argmax_mb, whose ties go to the lowest index
		// as the host's argmax, where the draw would pick among tied maxima
		// by U. All NaN: an index past n, which the callers take for
		// "not a token" and draw on the host (rank.graphDraw).
		b.argmax(m.outWord, 0, 0, src, n, false)
	case !b.drawOnGrid(m, probs, src, n, a):
		b.launchFn(m.draw, 1, 1, 1024, ptr(m.outWord), ptr(probs), ptr(src), i32(n),
			f32(a.InvT), i32(a.TopK), math.Float64bits(a.TopP), f32(a.MinP), math.Float64bits(a.U))
	}
	var out int32 = -1
	b.fail(cu.MemcpyDtoHAsync(unsafe.Pointer(&out), m.outWord, 4, b.stream))
	b.fail(b.stream.Synchronize())
	if b.err != nil {
		return -1
	}
	return out
}

// drawOnGrid launches the draw as a block an SM at once (cooperative),
// meeting at grid barriers, where the vocabulary is large enough; false:
// not launched, the one block draws.
func (b *Backend) drawOnGrid(m *sampleMod, probs, src cu.DevicePtr, n int, a DrawArgs) bool {
	blocks := drawGridBlocks(n, b.sms)
	if blocks <= 1 || m.noGrid || b.err != nil {
		return false
	}
	b.a(ptr(m.outWord), ptr(probs), ptr(src), i32(n), f32(a.InvT), i32(a.TopK),
		math.Float64bits(a.TopP), f32(a.MinP), math.Float64bits(a.U), ptr(m.grid))
	tooLarge, err := launchCoop(m.drawGrid, blocks, 1024, b.s, &b.args, b.nargs)
	b.fail(err)
	// Refused for want of room (not every SM is this context's): the one
	// block from now on, rather than a failed backend.
	m.noGrid = tooLarge
	return !tooLarge
}

// adjustLogits copies the n logits at src to the module's scratch and
// applies adj there (logit_adjust), leaving src as it was (a caller that
// draws again, or on the host, reads the step's own logits); it returns
// the copy.
func (b *Backend) adjustLogits(m *sampleMod, src cu.DevicePtr, n int, adj *LogitAdjust) cu.DevicePtr {
	k := len(adj.Entries)
	size := int64(k) * int64(unsafe.Sizeof(LogitAdjustEntry{}))
	y := b.scratch(&m.adj, &m.adjCap, int64(4*n))
	ents := b.scratch(&m.ents, &m.entsCap, size)
	b.fail(cu.MemcpyDtoDAsync(y, src, int64(4*n), b.stream))
	// From pageable memory: the call returns once the entries are staged,
	// so the caller may reuse them.
	b.fail(cu.MemcpyHtoDAsync(ents, unsafe.Pointer(&adj.Entries[0]), size, b.stream))
	b.launchFn(m.adjust, cdiv(k, 256), 1, 256, ptr(y), i32(n), ptr(ents), i32(k), math.Float64bits(adj.Repetition))
	return y
}

// The entry's layout is the kernel's: each pair fails to compile unless
// the size or offset is exactly the C struct's.
var (
	_ [24 - unsafe.Sizeof(LogitAdjustEntry{})]struct{}
	_ [unsafe.Sizeof(LogitAdjustEntry{}) - 24]struct{}
	_ [4 - unsafe.Offsetof(LogitAdjustEntry{}.Flags)]struct{}
	_ [unsafe.Offsetof(LogitAdjustEntry{}.Flags) - 4]struct{}
	_ [8 - unsafe.Offsetof(LogitAdjustEntry{}.Sub)]struct{}
	_ [unsafe.Offsetof(LogitAdjustEntry{}.Sub) - 8]struct{}
	_ [16 - unsafe.Offsetof(LogitAdjustEntry{}.Bias)]struct{}
	_ [unsafe.Offsetof(LogitAdjustEntry{}.Bias) - 16]struct{}
)

// drawGridBlocks is how many blocks a draw over n logits takes: one (the
// single-block sample_draw) for small vocabularies or POCKET_DRAW_GRID=0,
// else a block an SM, each at least drawGridMinIDs ids (or the switch's
// count, for measurement and for conformance to check the fallback).
func drawGridBlocks(n, sms int) int {
	switch {
	case n >= drawGridMaxIDs:
		return 1
	case switches.drawGrid >= 0:
		return max(1, switches.drawGrid) // 0: off; N: any vocabulary over N blocks
	case n < drawGridFrom:
		return 1
	}
	return max(1, min(sms, drawGridMaxBlocks, n/drawGridMinIDs))
}

// PrepareDraw loads the draw's module now (the driver compiles its PTX:
// ~2 s for both draw kernels where its JIT cache does not have them yet),
// so that a process's first sampled step does not wait for it.
func (b *Backend) PrepareDraw() error {
	if b.enter() {
		b.sampleModule()
	}
	defer b.exit()
	return b.err
}

// sampleModule is the loaded module, or nil after a failure (context
// current).
func (b *Backend) sampleModule() *sampleMod {
	if b.sample == nil {
		m := &sampleMod{}
		if _, err := loadModule(samplePTX, "sample", map[string]*cFunc{"sample_draw": &m.draw,
			"sample_draw_grid": &m.drawGrid, "sample_draw_grid_f": &m.drawFed, "logit_adjust": &m.adjust}); err != nil {
			b.fail(err)
			return nil
		}
		m.outWord = b.alloc(4)
		if m.grid = b.alloc(sampleGridBytes); m.grid != 0 {
			b.fail(cu.MemsetD32Async(m.grid, 0, sampleGridBytes/4, b.stream))
		}
		b.sample = m
	}
	return b.sample
}

// DrawCaptured is Draw with its kernel recorded into a graph and replayed
// (a diagnostic for conformance): whether the grid draw, a cooperative
// launch, can be part of a recorded decode step, as a sampled step fed
// on the device would need (docs/decode-step.md). It answers the token
// the replay drew, or an error where recording or replaying failed; a
// vocabulary the one-block draw takes is an error too (nothing to learn).
func (b *Backend) DrawCaptured(x kernels.Buf, n int, a DrawArgs) (int32, error) {
	if !b.enter() {
		b.exit()
		return -1, b.err
	}
	defer b.exit()
	m := b.sampleModule()
	if m == nil || b.err != nil {
		return -1, b.err
	}
	if a.TopK == 1 || a.Adjust != nil || drawGridBlocks(n, b.sms) <= 1 || m.noGrid {
		return -1, fmt.Errorf("cuda: DrawCaptured: not a grid draw: %w", kernels.ErrUnsupported)
	}
	probs := b.scratch(&m.probs, &m.probsCap, int64(4*n))
	b.fail(b.stream.Synchronize())
	if b.err != nil {
		return -1, b.err
	}
	if err := beginCapture(b.s); err != nil {
		return -1, err
	}
	launched := b.drawOnGrid(m, probs, dptr(x), n, a)
	exec, err := endCapture(b.s)
	if !launched {
		err = errors.Join(err, errors.New("cuda: DrawCaptured: the grid draw was not launched"))
	}
	if err != nil {
		if exec != nil {
			graphDestroy(exec)
		}
		b.err = nil // a launch the capture refused is not a failed device
		return -1, fmt.Errorf("cuda: a cooperative draw recorded into a graph: %w", err)
	}
	defer graphDestroy(exec)
	if err := graphLaunch(exec, b.s); err != nil {
		return -1, err
	}
	var out int32 = -1
	b.fail(cu.MemcpyDtoHAsync(unsafe.Pointer(&out), m.outWord, 4, b.stream))
	b.fail(b.stream.Synchronize())
	return out, b.err
}
