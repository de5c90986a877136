package kernels

// DeltaShape is the geometry of one Gated DeltaNet (linear attention) layer,
// as Qwen3-Next and Qwen3.5 configure it.
type DeltaShape struct {
	KHeads, VHeads int // query/key heads and value heads; VHeads is a multiple of KHeads
	DK, DV         int // per-head key and value widths
	ConvKernel     int // width of the causal depthwise convolution
}

// ConvDim is the number of convolved channels: queries, keys and values.
func (s DeltaShape) ConvDim() int { return 2*s.KHeads*s.DK + s.VHeads*s.DV }

// ConvStateLen is the float count of a layer's convolution state: the last
// ConvKernel-1 inputs, [ConvKernel-1, ConvDim] oldest first.
func (s DeltaShape) ConvStateLen() int { return (s.ConvKernel - 1) * s.ConvDim() }

// RecStateLen is the float count of a layer's delta-rule state,
// [VHeads, DK, DV] (transformers' recurrent_states layout).
func (s DeltaShape) RecStateLen() int { return s.VHeads * s.DK * s.DV }

// HybridOps is an optional extension of Backend: the operations of hybrid
// models that interleave Gated DeltaNet layers with gated softmax
// attention. A backend without it cannot run those models; model
// construction reports ErrUnsupported (the "supports op" check happens
// once, at build time, not per pass).
type HybridOps interface {
	// CausalConv1D convolves each of the s.ConvDim() channels of x [rows,
	// ch] causally over its rows (time) with w [ch, kernel] (conv1d.weight
	// [ch, 1, kernel]) and applies SiLU, writing dst [rows, ch]; dst must
	// not alias x. state [kernel-1, ch] holds the inputs before row 0,
	// oldest first, and is left holding the last kernel-1 inputs.
	CausalConv1D(dst, x, state Buf, w Tensor, rows int, s DeltaShape)
	// GatedDeltaRule runs the gated delta rule over rows tokens. qkv
	// [rows, s.ConvDim()] holds queries, keys (KHeads×DK each) and values
	// (VHeads×DV) after the convolution; q and k are L2-normalised per head
	// and q is scaled by 1/sqrt(DK); value head h reads query/key head
	// h/(VHeads/KHeads). a and b [rows, VHeads] are the raw gate
	// projections: beta = sigmoid(b), g = -exp(aLog)*softplus(a+dtBias)
	// (aLog, dtBias: [VHeads]). Per token and head, with S the [DK, DV]
	// state: S *= exp(g); S += k ⊗ (beta*(v - Sᵀk)); out = Sᵀq. dst is
	// [rows, VHeads*DV]; state [VHeads, DK, DV] is updated in place.
	GatedDeltaRule(dst, qkv, a, b, state Buf, aLog, dtBias Tensor, rows int, s DeltaShape)
	// RMSNormGated normalises each of rows rows of width dim and gates it:
	// dst = x/rms(x) * w * silu(z). w has dim elements; dst may be x.
	RMSNormGated(dst, x, z Buf, w Tensor, rows, dim int, eps float32)
	// SigmoidMul computes x *= sigmoid(gate) over n elements.
	SigmoidMul(x, gate Buf, n int)
}

// BufCopier is an optional extension of Backend: a copy between two of its
// buffers that stays on the device (a hybrid's recurrent state cloned, or
// restored from a copy its worker keeps, without a trip through the host).
type BufCopier interface {
	// CopyBuf copies src's first n elements to dst's.
	CopyBuf(dst, src Buf, n int)
}

// BufViewer is an optional extension of Backend: a buffer that is a range
// of another, sharing its memory (no copy), alive while the other is. A
// hybrid's prefill pass runs its convolution and delta rule over segments
// of the pass's rows (one per snapshot position inside it), each segment
// a range of the pass's activation buffers.
type BufViewer interface {
	// ViewBuf returns elements [off, off+n) of b; off and n must lie
	// within b.
	ViewBuf(b Buf, off, n int) Buf
}

// DeltaSegmenter is an optional extension of HybridOps: GatedDeltaRule
// over rows as consecutive passes that end after rows ends[0], ends[1],
// … (ascending, inside (0, rows)) and at rows, the state after the pass
// ending at ends[k] also copied into snaps[k]. The results are those of
// those passes run one by one, bit for bit; a backend joins passes into
// one launch where that gives the same results. A hybrid's prefill that
// keeps snapshots inside it (models.MarkingState) calls it.
type DeltaSegmenter interface {
	GatedDeltaRuleSegments(dst, qkv, a, b, state Buf, aLog, dtBias Tensor, rows int, s DeltaShape, ends []int, snaps []Buf)
}

// Segments calls f with the rows [r0, r1) of each pass i of a
// DeltaSegmenter call over rows ending at ends: what it stands for, one
// pass after another.
func Segments(ends []int, rows int, f func(i, r0, r1 int)) {
	r0 := 0
	for i := 0; i <= len(ends); i++ {
		r1 := rows
		if i < len(ends) {
			r1 = ends[i]
		}
		f(i, r0, r1)
		r0 = r1
	}
}

// MemoryRoom is an optional extension of Backend whose buffers live in a
// memory of its own: the bytes that can still be allocated there, so that
// an optional copy (a state snapshot kept on the device) is declined
// before it fails the backend.
type MemoryRoom interface {
	FreeBytes() (int64, error)
}

// DecodePreparer is an optional extension of Backend that spends spare
// memory of its own on second copies of weights in a layout its one-row
// kernels read faster (the CUDA backend's tiled FP8 matrices). Callers run
// PrepareDecode once, after the model is built and its KV pool allocated,
// and before any graph is recorded; it keeps need bytes free beyond the
// backend's own headroom, and describes what it made.
type DecodePreparer interface {
	PrepareDecode(need int64) (string, error)
}
