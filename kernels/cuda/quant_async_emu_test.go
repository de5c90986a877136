package cuda

// A CPU emulation of qaDot's ring (quant_async.cuh), no GPU needed: one
// warp's copies (qaIssue: the aligned 16-byte chunks of each row's step,
// lane k taking chunks k, k+32, ...) into its ring stage, the commit and
// wait_group schedule, and each lane's reads back (qaLd, ldsu), checked
// against the bytes quant_mmv.cuh's ldW reads from global memory. The
// copies land either at once (a copy that overwrote a stage still to be
// read would show) or as late as cp.async.wait_group S-2 allows (a step
// read before its group completed would show).

import (
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// qaPadEmu is quantPad (quant.go): the zeroed bytes after a block tensor.
const qaPadEmu = 64

// qaSpan is one read of a lane relative to its block: n bytes at off;
// words > 0: through ldsu (words+1 aligned words from off rounded down).
type qaSpan struct{ off, n, words int }

// qaSpans are the reads of QT<F>::ldW / qaLd for lane j of a block.
func qaSpans(dt kernels.DType, j int) []qaSpan {
	switch dt {
	case kernels.Q4_K:
		return []qaSpan{{0, 16, 0}, {16 + 16*j, 16, 0}}
	case kernels.Q6_K:
		n, l8 := j>>2, j&3
		return []qaSpan{{64*n + 8*l8, 8, 2}, {64*n + 32 + 8*l8, 8, 2}, {128 + 32*n + 8*l8, 8, 2}, {192 + 8*n, 8, 2},
			{208, 2, 0}}
	default: // Q8_0: block 8b + j
		return []qaSpan{{34*j + 2, 32, 8}, {34 * j, 2, 0}}
	}
}

type qaCopy struct{ dst, src int }

// qaEmuWarp runs warp `warp` of a block over rows (byte offsets into mem)
// as qaDot does: nb blocks of 256 elements, steps s, s+ss, ...; lazy: the
// copies land as late as allowed. It reports the first mismatch.
func qaEmuWarp(t *testing.T, dt kernels.DType, mem []byte, rows [qaQR]int, nb, s, ss, warp int, active, lazy bool) {
	t.Helper()
	f := qaFmts[dt]
	S, stg, seg := f.stages, f.stage(), f.ch*16
	smem := make([]byte, qaShm)
	for i := range smem {
		smem[i] = 0xA5
	}
	ring := warp * qaRing
	ns := (nb + 3) / 4
	n := 0
	if active && s < ns {
		n = (ns - s + ss - 1) / ss
	}
	var groups [][]qaCopy // committed groups, all lanes together
	landed := 0
	land := func(upTo int) { // groups [landed, upTo) complete
		for ; landed < upTo; landed++ {
			for _, c := range groups[landed] {
				copy(smem[c.dst:c.dst+16], mem[c.src:c.src+16])
			}
		}
	}
	var cur []qaCopy
	issue := func(st, sidx int) {
		if st < ring || st+stg > ring+qaRing {
			t.Fatalf("%s stage at %d outside warp %d's ring", dt, st, warp)
		}
		ln := min(4, nb-4*sidx) * f.bbb
		for r := range qaQR {
			p := rows[r] + sidx*4*f.bbb
			o := p & 15
			if f.aligned && o != 0 {
				t.Fatalf("%s row at %d not 16-byte aligned", dt, rows[r])
			}
			a := p - o
			nch := (o + ln + 15) >> 4
			if nch > f.ch {
				t.Fatalf("%s step %d row %d: %d chunks > %d", dt, sidx, r, nch, f.ch)
			}
			for lane := range 32 {
				for k0 := 0; k0 < f.ch; k0 += 32 {
					if k := k0 + lane; k < nch {
						if a+16*k+16 > len(mem) {
							t.Fatalf("%s step %d row %d: chunk %d reads past the tensor's padding", dt, sidx, r, k)
						}
						cur = append(cur, qaCopy{st + (r*f.ch+k)*16, a + 16*k})
					}
				}
			}
		}
	}
	commit := func() {
		groups = append(groups, cur)
		cur = nil
		if !lazy {
			land(len(groups))
		}
	}
	for i := range S - 1 {
		if i < n {
			issue(ring+i*stg, s+i*ss)
		}
		commit()
	}
	rs, ws := 0, S-1
	for i := range n {
		sidx := s + i*ss
		land(len(groups) - (S - 2)) // cp.async.wait_group S-2
		if i+S-1 < n {
			issue(ring+ws*stg, s+(i+S-1)*ss)
		}
		commit()
		for lane := range 32 {
			bl, j := lane>>3, lane&7
			b := 4*sidx + bl
			if b >= nb {
				continue
			}
			for r := range qaQR {
				sb := ring + rs*stg + r*seg + (rows[r]+sidx*4*f.bbb)&15 + bl*f.bbb
				gb := rows[r] + b*f.bbb
				for _, sp := range qaSpans(dt, j) {
					if sp.words > 0 {
						if end := (sb+sp.off)&^3 + 4*(sp.words+1); end > qaShm {
							t.Fatalf("%s: ldsu reads to %d, past the block's %d bytes", dt, end, qaShm)
						}
					}
					got, want := smem[sb+sp.off:sb+sp.off+sp.n], mem[gb+sp.off:gb+sp.off+sp.n]
					if string(got) != string(want) {
						t.Fatalf("%s nb=%d s=%d ss=%d warp=%d lazy=%v: step %d row %d lane %d span %+v: ring % x, global % x",
							dt, nb, s, ss, warp, lazy, sidx, r, lane, sp, got, want)
					}
				}
			}
		}
		rs, ws = (rs+1)%S, (ws+1)%S
	}
	if len(groups) != S-1+n {
		t.Fatalf("%d groups committed, want %d", len(groups), S-1+n)
	}
}

func TestQMVAsyncRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []kernels.DType{kernels.Q4_K, kernels.Q6_K, kernels.Q8_0} {
		f := qaFmts[dt]
		for _, nb := range []int{1, 2, 3, 4, 5, 7, 9, 12, 16, 23, 48} {
			rb := nb * f.bbb
			const out = 11 // rows: Q6_K's start at every even offset mod 16
			mem := make([]byte, out*rb+qaPadEmu)
			for i := range out * rb {
				mem[i] = byte(rng.Uint32())
			}
			for _, ss := range []int{1, 2, 4, 8} {
				for s := range ss {
					for base := 0; base < out; base += 3 {
						var rows [qaQR]int
						for r := range rows {
							rows[r] = min(base+r, out-1) * rb // qmvBlock's clamp
						}
						for _, warp := range []int{0, 7} {
							for _, lazy := range []bool{false, true} {
								qaEmuWarp(t, dt, mem, rows, nb, s, ss, warp, base < out-2 || s > 0, lazy)
							}
						}
					}
				}
			}
		}
	}
}

// TestQMVAsyncGeometry checks quant_async.cuh's constants as the Go side
// holds them: the chunk counts cover a step at any allowed misalignment,
// the stages fit a ring, two blocks fit an SM, and the bytes in flight
// reach the aim (96 KiB per SM).
func TestQMVAsyncGeometry(t *testing.T) {
	for dt, f := range qaFmts {
		worst := 14
		if f.aligned {
			worst = 0
		}
		if need := (worst + 4*f.bbb + 15) / 16; f.ch != need {
			t.Errorf("%s: %d chunks per row, a step needs %d", dt, f.ch, need)
		}
		if f.stages*f.stage() > qaRing {
			t.Errorf("%s: %d stages of %d bytes > ring %d", dt, f.stages, f.stage(), qaRing)
		}
		if (f.stages+1)*f.stage() <= qaRing {
			t.Errorf("%s: a stage more (%d) fits the ring", dt, f.stages+1)
		}
		if fl := f.inFlight(); fl < 96<<10 {
			t.Errorf("%s: %d bytes in flight per SM < 96 KiB", dt, fl)
		}
	}
	if need := qaOcc * (qaShm + qaRed + qaBlkRS); need > qaSMShm {
		t.Errorf("%d blocks take %d bytes of shared memory > %d per SM", qaOcc, need, qaSMShm)
	}
}

// TestQMVAsyncWarps pins qaWarps on Qwen3-8B's shapes (132 SMs of an
// H200): a warp keeps 2+ steps and the grid fills the block slots.
func TestQMVAsyncWarps(t *testing.T) {
	for _, c := range []struct{ groups, in, want int }{
		{1024, 4096, 2},  // q or o_proj 4096×4096: 256 blocks of 264 slots, 2 steps per warp
		{1536, 4096, 2},  // q, k, v together (6144 rows): 384 blocks
		{6144, 4096, 1},  // gate/up 12288 (2 outputs per group): 768 blocks
		{1024, 12288, 2}, // ffn_down 4096×12288: 256 blocks, 6 steps per warp
		{37984, 4096, 1}, // output 151936×4096
		{256, 12288, 8},  // 1024×12288: 256 blocks, 2 steps per warp
		{2, 256, 1},      // tiny: one step, nothing to split
		{9, 1280, 1},     // 2 steps: splitting would leave 1
	} {
		if got := qaWarps(c.groups, c.in, qaOcc*132); got != c.want {
			t.Errorf("qaWarps(%d groups, in %d) = %d, want %d", c.groups, c.in, got, c.want)
		}
	}
}
