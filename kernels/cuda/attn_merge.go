//go:build cuda

package cuda

import "gorgonia.org/cu"

// With POCKET_ATTN_DEFER=1 (not yet measured; off by default) the decode
// attention leaves its split partials unmerged (attn_decode_d_E) and the
// next op that enters the backend merges them: a block-format o
// projection inside its int8 rounding (qx_merge), anything else by an
// attn_merge_E launch first (attn_merge.cuh says why).

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

// mergeAttn launches attn_merge_E for d, nothing for the zero value.
func (b *Backend) mergeAttn(d attnDeferred) {
	if d.dst == 0 {
		return
	}
	b.runDec(dAttnMerge+d.hd/128, cdiv(d.heads, 4), 1, 128, ptr(d.dst), ptr(d.part), ptr(d.start), i32(d.heads),
		i32(d.splits), i32(d.minChunk))
}
