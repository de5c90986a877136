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

// attnDeferred is a decode attention whose merge is pending: its output
// dst, the partials, the device-side start position the kernels derive
// the split count from, and the launch's shape.
type attnDeferred struct {
	dst, part, start            cu.DevicePtr
	heads, splits, hd, minChunk int
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
func (b *Backend) SetAttnDefer(on bool) (was bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	was = !b.attnMergeSelf
	b.attnMergeSelf = !on
	return was
}

// mergeAttn launches attn_merge_E for d, nothing for the zero value; the
// attention merges itself from then on.
func (b *Backend) mergeAttn(d attnDeferred) {
	if d.dst == 0 {
		return
	}
	b.attnMergeSelf = true
	b.runDec(dAttnMerge+d.hd/128, cdiv(d.heads, 4), 1, 128, ptr(d.dst), ptr(d.part), ptr(d.start), i32(d.heads),
		i32(d.splits), i32(d.minChunk))
}
