package cuda

import (
	"encoding/binary"
	"runtime"
	"strings"
	"sync"

	"github.com/pocketllm/pocketllm/kernels"
)

// Regrouped layouts: the GGUF formats of the batch-1 int8 GEMVs (qmv) are
// held on the device with a group of consecutive blocks re-laid into one
// aligned run of the same bytes, so that every load of qmv is aligned,
// whole lines where it can, and can skip L1. Read through L1 as aligned words
// and funnel shifts, Q6_K's weights took 13 loads a lane a block and
// evicted the activations that qmv keeps there (Qwen3-8B Q4_K_M on an
// H200: 537.5-543.1 tok/s regrouped against 515.6-520.8). A regrouped
// format never leaves the backend: tensor.Weight() is still the file's
// weight, the CPU decodes the file's bytes, and the group has exactly the
// bytes of its blocks, so row sizes do not change.
//
// quant_blocks.cuh's Fmt and sub32 (every generic kernel: prefill
// dequantization, Embed, the fp32 GEMVs, the MoE experts) and
// quant_mmv.cuh's QT and qdotQ4K (qmv) read the regrouped layouts beside
// the stored ones (which the formats' other matrices, and POCKET_REGROUP,
// keep).
//
// Q6_KG, 1024 elements (four Q6_K blocks, 840 bytes, 8-byte aligned),
// for blocks k = 0..3:
//
//	[192k, 192k+128)     block k's ql, in 16-byte lanes: lane t (n = t/4,
//	                     l = t%4) holds ql[64n+8l : +8] then ql[64n+32+8l : +8],
//	                     the two 8-byte runs qmv's lane t of the block reads
//	[192k+128, 192k+192) block k's qh as stored
//	[768+16k, 784+16k)   block k's 16 scales
//	[832+2k, 834+2k)     block k's d
//
// Q8_0G, 256 elements (eight Q8_0 blocks, 272 bytes, 16-byte aligned), for
// blocks k = 0..7:
//
//	[32k, 32k+32)      block k's 32 quants
//	[256+2k, 258+2k)   block k's d
//
// Q4_KG, 2048 elements (eight Q4_K blocks, 1152 bytes, 128-byte aligned),
// for blocks k = 0..7:
//
//	[16k, 16k+16)          block k's header (d, dmin, 12 scale bytes)
//	[128+128k, 256+128k)   block k's 128 quant bytes
//
// Q4_K's blocks are 16-byte aligned, but 144 bytes long, so each 128-byte
// run of quants that one qmv load instruction reads for a block straddles
// two 128-byte lines, and the four blocks' headers of a row lie in four
// lines; regrouped, a load instruction touches half the lines.
const (
	dtQ6KG kernels.DType = 64 // Q6_KG in quant_blocks.cuh; past every file format
	dtQ80G kernels.DType = 65 // Q8_0G
	dtQ4KG kernels.DType = 66 // Q4_KG
)

// regroup is one regrouped layout.
type regroup struct {
	file, dev    kernels.DType
	elems, bytes int // of a group
	group        func(dst, src []byte)
}

var regroups = []regroup{
	{kernels.Q6_K, dtQ6KG, 1024, 4 * q6kBlock, q6kgGroup},
	{kernels.Q8_0, dtQ80G, 256, 8 * q80Block, q80gGroup},
	{kernels.Q4_K, dtQ4KG, 2048, 8 * q4kBlock, q4kgGroup},
}

// The stored formats' block bytes (210, 34, 144), from the format table.
var (
	q6kBlock = kernels.Q6_K.BlockBytes()
	q80Block = kernels.Q8_0.BlockBytes()
	q4kBlock = kernels.Q4_K.BlockBytes()
)

// regroupFor is the layout the device holds w in, if any: w's format has
// one and its rows are whole groups.
func regroupFor(w *kernels.Weight) (regroup, bool) {
	for _, r := range regroups {
		if w.DType == r.file && len(w.Shape) >= 2 && w.Cols()%r.elems == 0 {
			return r, true
		}
	}
	return regroup{}, false
}

// regroupRows regroups src, whole rows of whole groups, into dst (the
// same length).
func (r regroup) regroupRows(dst, src []byte) {
	for o := 0; o+r.bytes <= len(src); o += r.bytes {
		r.group(dst[o:o+r.bytes], src[o:o+r.bytes])
	}
}

// onCores runs f over the units [0, n) cut into one contiguous range per
// core, each at least minPer units (less work runs on one core).
func onCores(n, minPer int, f func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), max(1, n/minPer))
	per := (n + parts - 1) / parts
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// parallelCopy copies src into dst (the same length) on every core, in
// ranges of at least 1 MB.
func parallelCopy(dst, src []byte) {
	onCores(len(src), 1<<20, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
}

// regroupParallel is regroupRows on every core: one core regroups 6-10
// GB/s, and a model's weights are gigabytes (a Qwen3-8B Q4_K_M took 1.9 s
// longer to load on one).
func (r regroup) regroupParallel(dst, src []byte) {
	onCores(len(src)/r.bytes, 256, func(lo, hi int) {
		a, b := lo*r.bytes, hi*r.bytes
		r.regroupRows(dst[a:b], src[a:b])
	})
}

var le = binary.LittleEndian

// q6kgGroup regroups four Q6_K blocks src (840 bytes) into dst.
func q6kgGroup(dst, src []byte) {
	_, _ = dst[4*q6kBlock-1], src[4*q6kBlock-1]
	for k := range 4 {
		blk := src[k*q6kBlock : (k+1)*q6kBlock]
		q := dst[192*k : 192*k+192]
		for t := range 8 {
			n, l := t/4, t%4
			le.PutUint64(q[16*t:], le.Uint64(blk[64*n+8*l:]))
			le.PutUint64(q[16*t+8:], le.Uint64(blk[64*n+32+8*l:]))
		}
		copy(q[128:192], blk[128:192])
		copy(dst[768+16*k:768+16*k+16], blk[192:208])
		copy(dst[832+2*k:832+2*k+2], blk[208:210])
	}
}

// q80gGroup regroups eight Q8_0 blocks src (272 bytes) into dst: their
// quants at 32k, their d at 256 + 2k.
func q80gGroup(dst, src []byte) { splitGroup(dst, src, 8, q80Block, 2, 256, 0) }

// q4kgGroup regroups eight Q4_K blocks src (1152 bytes) into dst: their
// headers at 16k, their quants at 128 + 128k.
func q4kgGroup(dst, src []byte) { splitGroup(dst, src, 8, q4kBlock, 16, 0, 128) }

// splitGroup regroups n blocks of bb bytes, each a head of hb bytes and
// then a body, into the heads at headAt + hb·k and the bodies at
// bodyAt + (bb-hb)·k.
func splitGroup(dst, src []byte, n, bb, hb, headAt, bodyAt int) {
	_, _ = dst[n*bb-1], src[n*bb-1]
	for k := range n {
		blk := src[k*bb : (k+1)*bb]
		copy(dst[headAt+hb*k:headAt+hb*(k+1)], blk[:hb])
		copy(dst[bodyAt+(bb-hb)*k:bodyAt+(bb-hb)*(k+1)], blk[hb:])
	}
}

// regroupSwitch reads POCKET_REGROUP into the file formats to hold as
// stored: "" none, "0" all, else those not in the list.
func regroupSwitch(v string) map[kernels.DType]bool {
	if v == "" {
		return nil
	}
	keep := map[kernels.DType]bool{}
	for _, r := range regroups {
		keep[r.file] = true
	}
	for _, f := range strings.Split(v, ",") {
		for _, r := range regroups {
			if strings.EqualFold(strings.TrimSpace(f), r.file.String()) {
				delete(keep, r.file)
			}
		}
	}
	return keep
}
