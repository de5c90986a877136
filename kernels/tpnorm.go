package kernels

// TPNormOps is an optional extension of Backend: an RMSNorm whose rows are
// split by columns over the ranks of a tensor-parallel group. MiniMax-M2
// normalises q (and k) over all heads at once; a rank holding a block of
// the heads computes its part of each row's sum of squares (SumSquares),
// the group sums those (rows floats, kernels.Collective), and each rank
// normalises its columns with the total (RMSNormSum). A backend without it
// cannot run such a model split; the plan reports ErrUnsupported at build
// time.
type TPNormOps interface {
	// SumSquares writes dst[off+r] = Σ_j x[r,j]² for each of rows rows of
	// x [rows, dim]. off lets several norms share one buffer, so that the
	// group sums them in one all-reduce.
	SumSquares(dst Buf, off int, x Buf, rows, dim int)
	// RMSNormSum normalises each of rows rows of x [rows, dim] by a sum of
	// squares given per row: dst[r,:] = x[r,:] * w / sqrt(sumsq[off+r] *
	// scale + eps). scale is 1 over the full (unsplit) row width; w has
	// dim elements; dst may be x.
	RMSNormSum(dst, x, sumsq Buf, off int, w Tensor, rows, dim int, scale, eps float32)
}
