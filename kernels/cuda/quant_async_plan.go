package cuda

import "github.com/pocketllm/pocketllm/kernels"

// The geometry of qmv_async and qmv_swiglu_async (quant_async.cuh: the
// batch-1 Q4_K/Q6_K/Q8_0 GEMVs with each warp streaming its weights
// through a ring of cp.async stages in shared memory), here without the
// cuda tag so that the emulation test (quant_async_emu_test.go) and the
// grid policy build and run on any machine. Not yet measured on a GPU.

const (
	qaRing  = 13824              // bytes of one warp's ring (QA_RING)
	qaSlack = 16                 // after the last ring: ldsu reads one word past its bytes (QA_SLACK)
	qaShm   = 8*qaRing + qaSlack // dynamic shared memory of a block of 8 warps (QA_SHM)
	qaOcc   = 2                  // blocks per SM: __launch_bounds__(256, 2), 2 × 108 KiB of rings
	qaSMShm = 228 << 10          // shared memory of an sm_90 SM
	qaBlkRS = 1 << 10            // shared memory the driver reserves per block
	qaQR    = 4                  // rows per warp (QR of quant_mmv.cuh, qmvRows)
	qaRed   = 3 * 8 * qaQR * 4   // static shared memory: red[8][QR] of qmvBlock's three formats
)

// qaFmt is QA<F> of quant_async.cuh: bbb bytes per 256-element block
// (Q8_0: 8 blocks of 34), at most ch 16-byte chunks per row and step (4
// blocks), stages of the ring; aligned: rows start 16-byte aligned (only
// Q4_K; the others at any even byte).
type qaFmt struct {
	bbb, ch, stages int
	aligned         bool
}

var qaFmts = map[kernels.DType]qaFmt{
	kernels.Q4_K: {bbb: 144, ch: 36, stages: 6, aligned: true},
	kernels.Q6_K: {bbb: 210, ch: 54, stages: 4},
	kernels.Q8_0: {bbb: 272, ch: 69, stages: 3},
}

// stage is the bytes of one stage of one warp (QR row segments).
func (f qaFmt) stage() int { return qaQR * f.ch * 16 }

// inFlight is the step bytes an SM has in flight when every warp of its
// qaOcc blocks keeps stages-1 full steps of 4 rows copying.
func (f qaFmt) inFlight() int { return qaOcc * 8 * (f.stages - 1) * qaQR * 4 * f.bbb }

// qaWarps picks the warps per row group (wpr: 1, 2, 4 or 8) of the async
// GEMVs for groups groups of 4 rows (qmv_swiglu: 2 gate + 2 up rows) with
// in columns and slots blocks resident at once (qaOcc per SM). A warp streams its steps (1024 columns each)
// through the ring, so unlike qmv's (qmvWarps: one step in flight per
// warp, time ∝ waves × steps per warp) a warp's steps cost bandwidth, not
// a latency each; what matters is that the grid fills the block slots of
// every SM, each holding as many bytes in flight as it can. So:
// the fewest warps per group whose blocks fill 7/8 of the slots, but not
// so many that a warp is left fewer than 2 steps (then it has nothing to
// keep in flight behind the step it computes). Unmeasured: a first policy.
func qaWarps(groups, in, slots int) int {
	steps := (in/256 + 3) / 4
	wpr := 1
	for wpr < 8 {
		blocks := (groups*wpr + 7) / 8
		next := 2 * wpr
		if 8*blocks >= 7*slots || (steps+next-1)/next < 2 {
			break
		}
		wpr = next
	}
	return wpr
}
