//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Tiled FP8 copies for the ring GEMVs (fp8pipe.cuh, "Tiled weights"): a
// dense FP8 matrix may get a second copy laid out tile by tile, 16 rows ×
// 128 columns a run of 2048 bytes, which the one-row pipe kernels read in
// place of the stored rows. The stored rows stay: cuBLASLt's FP8 prefill
// GEMM, Embed and every other kernel read them.
//
// Why a copy and not a repack: read tile by tile, the Qwen3.5-27B FP8
// decode step is 1.3% faster (130.0-130.5 against 128.4-128.5 tok/s on an
// H200, docs/benchmarks.md, 2026-12-02 from 00:31), but cuBLASLt takes only
// the row layout, and without it a prefill would fall back to kernels
// several times slower. So the copies cost the dense FP8 weights' bytes
// once more (24.35 GB there), and are made only where the device keeps
// room for everything else after them (PrepareDecode's reserve).

// tiledBytes is the size of t's tiled copy, or 0 where t cannot have one:
// not a 2-D FP8 matrix of 128-column scale blocks with in % 128 == 0, an
// expert (fp8pipe_moe.cuh reads rows), or past the pipe kernels' 32-bit
// offsets.
func (t *tensor) tiledBytes() int64 {
	w := t.w
	if w.DType != kernels.F8E4M3 || len(w.Shape) != 2 || t.expert || w.ScaleBlock[1] != f8mmaUnit ||
		w.ScaleBlock[0] <= 0 {
		return 0
	}
	rows, in := w.Rows(), w.Cols()
	if rows <= 0 || in <= 0 || in%f8mmaUnit != 0 {
		return 0
	}
	n := int64(cdiv(rows, 16)) * 16 * int64(in)
	if n >= 1<<32 {
		return 0
	}
	return n
}

// pipeWeight is the matrix the pipe kernels read for t and its layout bit
// (1: the tiled copy).
func (t *tensor) pipeWeight() (uint64, uint64) {
	if t.tiled != 0 {
		return ptr(t.tiled), 1
	}
	return ptr(t.data), 0
}

// tileFP8 makes t's tiled copy (fp8_tile16) and reports whether it did.
// The caller holds the backend.
func (b *Backend) tileFP8(t *tensor) bool {
	n := t.tiledBytes()
	if n == 0 || t.tiled != 0 || b.pipe.tile == nil || b.err != nil {
		return t.tiled != 0
	}
	p := b.alloc(n)
	if p == 0 {
		return false
	}
	pieces := n / 16
	blocks := int(min(cdiv64(pieces, 256), 65535))
	b.launchFn(b.pipe.tile, blocks, 1, 256, ptr(p), ptr(t.data), i32(t.w.Rows()), i32(t.w.Cols()), uint64(pieces))
	if b.err != nil {
		return false
	}
	t.tiled = p
	return true
}

func cdiv64(a, b int64) int64 { return (a + b - 1) / b }

// TileFP8 gives the FP8 matrix w a tiled copy where it can have one
// (conformance checks the pipe kernels on both layouts with it).
func (b *Backend) TileFP8(w kernels.Tensor) bool {
	t, ok := w.(*tensor)
	if !ok || !b.enter() {
		b.exit()
		return false
	}
	defer b.exit()
	return b.tileFP8(t)
}

// decodeTiles is what PrepareDecode did: the matrices given tiled copies,
// their bytes, and those left without one for want of room.
type decodeTiles struct {
	Matrices, Skipped int
	Bytes             int64
}

func (d decodeTiles) String() string {
	return fmt.Sprintf("%d FP8 matrices tiled for decode (%.2f GB), %d left in rows for want of room", d.Matrices,
		float64(d.Bytes)/1e9, d.Skipped)
}

// PrepareDecode implements kernels.DecodePreparer: the FP8 matrices loaded
// so far (experts excepted) get their tiled copies, in load order, as long
// as the device keeps need bytes free after each, plus a headroom of an
// eighth of its memory (at least 4 GiB) for what a daemon allocates later
// (recurrent states and their snapshots, scratch, graphs). A matrix left
// without a copy runs on its rows as before. POCKET_FP8_TILES=0 makes none.
func (b *Backend) PrepareDecode(need int64) (string, error) {
	if switches.noFP8Tiles {
		return "no FP8 matrices tiled for decode (POCKET_FP8_TILES=0)", nil
	}
	d, err := b.prepareTiles(need)
	return d.String(), err
}

func (b *Backend) prepareTiles(need int64) (decodeTiles, error) {
	var d decodeTiles
	free, err := b.FreeBytes()
	if err != nil {
		return d, err
	}
	if !b.enter() {
		b.exit()
		return d, b.err
	}
	defer b.exit()
	if b.cap != nil {
		return d, fmt.Errorf("cuda: PrepareDecode during graph capture")
	}
	_, total, err := cu.MemInfo()
	if err != nil {
		return d, err
	}
	reserve := need + max(4<<30, total/8)
	for _, t := range b.fp8 {
		n := t.tiledBytes()
		if n == 0 || t.tiled != 0 {
			continue
		}
		if free-n < reserve {
			d.Skipped++
			continue
		}
		if !b.tileFP8(t) {
			return d, b.err
		}
		free -= (n + 255) &^ 255
		d.Matrices++
		d.Bytes += n
	}
	b.fp8 = nil // the list only served this
	return d, b.err
}

var _ kernels.DecodePreparer = (*Backend)(nil)
