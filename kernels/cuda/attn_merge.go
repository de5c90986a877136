//go:build cuda

package cuda

import "gorgonia.org/cu"

// The decode attention leaves its split partials unmerged
// (attn_decode_d_E) and the next op that enters the backend merges them:
// a block-format o projection inside its int8 rounding (qx_merge), any
// other op after an attn_merge_E launch (attn_merge.cuh says why). Measured
// on an H200, interleaved: Qwen3-8B Q4_K_M 477.0-481.8 tok/s against
// 460.3-462.3 with the attention merging itself; but Llama-3-8B, whose bf16
// o projection cannot merge, 242.9-243.3 against 246.1-246.3 (with the
// first, slower merge): the merge's own launch costs more than the
// attention's last-split merge. So a
// backend defers only until a deferred merge needs its own launch, and
// from then on the attention merges itself (attnMergeSelf), unless
// SetAttnDefer re-arms it. POCKET_ATTN_DEFER=0 never defers.
//
// At a head dim of 128 the attention's launch itself waits for the next op
// (attnLaunch; POCKET_ATTN_ROUND=0 does not): a block-format o projection
// of its output launches it as attn_decode_q_4, whose last split merges
// and rounds to int8 for the GEMV, so there is no qx_merge launch; any
// other op launches it merging itself (no merge launch either), or, for
// an op that merges (sigmoid_mul_merge_E), as the deferred entry.

// attnDeferred is a decode attention whose merge is pending: its output
// dst, the partials, the device-side start position the kernels derive
// the split count from, and the launch's shape.
type attnDeferred struct {
	dst, part, start            cu.DevicePtr
	heads, splits, hd, minChunk int
	pending                     attnLaunch // not launched yet (its args set)
}

// attnLaunch is a postponed decode attention: its kernel arguments
// (ATTN_DECODE_ARGS_T) and grid, and whether its cache is float16; the
// zero value is none.
type attnLaunch struct {
	args       []uint64
	gx, gy, bx int
	half       bool
}

// launchPartials launches d's attention, if postponed, as the deferred
// entry: its partials for the caller's merge.
func (b *Backend) launchPartials(d attnDeferred) { b.launchPending(d, dAttnDecodeD+d.hd/128) }

// launchPending launches d's attention, if postponed, as decode kernel f,
// and reports whether it was.
func (b *Backend) launchPending(d attnDeferred, f int) bool {
	p := d.pending
	if p.args == nil {
		return false
	}
	b.runDecKV(p.half, f, p.gx, p.gy, p.bx, p.args...)
	return true
}

// launchRounded launches d's postponed attention as attn_decode_q_4, its
// output rounded into xq and xs.
func (b *Backend) launchRounded(d attnDeferred, xq, xs cu.DevicePtr) {
	p := d.pending
	b.runDecKV(p.half, dAttnDecodeQ, p.gx, p.gy, p.bx, append(p.args[:len(p.args):len(p.args)], ptr(xq), ptr(xs))...)
}

// settleAttn launches the pending merge, if any (b.mu held, context
// current).
func (b *Backend) settleAttn() {
	d := b.attnDef
	b.attnDef = attnDeferred{}
	b.mergeAttn(d)
}

// deferAttn reports whether the next decode attention leaves its merge to
// the op after it.
func (b *Backend) deferAttn() bool { return switches.attnDefer && !b.attnMergeSelf }

// SetAttnDefer re-arms (or stops) the deferred merge for this backend, so
// that conformance checks both paths whatever the ops before did; it
// returns the previous setting.
func (b *Backend) SetAttnDefer(on bool) (was bool) { return b.setOff(&b.attnMergeSelf, on) }

// SetAttnRound turns the postponed, rounding attention off (or back on,
// where POCKET_ATTN_ROUND allows it), so that conformance checks qx_merge
// too; it returns the previous setting.
func (b *Backend) SetAttnRound(on bool) (was bool) { return b.setOff(&b.attnRoundOff, on) }

// setOff sets *off to !on under the backend's lock and returns !*off as it
// was.
func (b *Backend) setOff(off *bool, on bool) (was bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	was, *off = !*off, !on
	return was
}

// mergeAttn launches attn_merge_E for d, nothing for the zero value; the
// attention merges itself from then on. A postponed attention launches
// merging itself instead.
func (b *Backend) mergeAttn(d attnDeferred) {
	if b.launchPending(d, dAttnDecode+d.hd/128) {
		return
	}
	if d.dst == 0 {
		return
	}
	b.attnMergeSelf = true
	b.runDec(dAttnMerge+d.hd/128, cdiv(d.heads, 4), 1, 128, ptr(d.dst), ptr(d.part), ptr(d.start), i32(d.heads),
		i32(d.splits), i32(d.minChunk))
}
