package models

import (
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
)

// Slicing a checkpoint tensor into one rank's shard, block-scaled FP8
// included.
//
// An FP8 E4M3 weight carries one float32 scale per [bo, bi] block
// (weight_scale_inv, value = fp8 · scale). The scale multiplies the stored
// weight element by element, so a scale is only "the factor of these
// weight elements" and any sub-rectangle of a block can keep it. A slice therefore never needs to fall on block edges:
// it is re-blocked to the largest block edge b' that divides both the old
// edge and every place the slice starts (b' = gcd), so that each new block
// lies inside one old block, and each new block gets a copy of its old
// block's scale.
//
//   - Row (output) splits — q/k/v, gate/up, the head: b' = gcd(bo, starts)
//     rows. The data stays a zero-copy view when there is one range; only
//     the small scale grid is rebuilt (unless the start is on an edge, when
//     the scales are a view too).
//   - Column (input) splits — o_proj, down_proj, out_proj: b' = gcd(bi, lo)
//     columns. This is exact as well: both ranks multiply their halves of
//     one block by the same scale and the all-reduce adds the two partial
//     dot products, which is the single-device sum regrouped. What a column
//     split inside a block costs is speed, not accuracy: the CUDA FP8
//     GEMV/GEMM and the grouped-expert kernels stride the input in 16-wide
//     steps with one scale per step and need bi % 16 == 0, so a re-blocked
//     width that is not a multiple of 16 runs on the generic kernel (the
//     released [128, 128] blocks with widths divisible by 16·world keep the
//     fast path; the Qwen3.5-27B shape at TP 4 splits on 128-edges
//     everywhere). The one path that rounds activations per 128-column
//     group (CUDA prefill on cuBLASLt's FP8 GEMM, DeepSeek's act_quant)
//     takes only [128, 128] blocks: a split on 128-edges keeps TP1's
//     groups, and a re-blocked slice runs on the other paths, which keep
//     the activations whole.
//   - MoE experts: gate/up (row split) and down (column split) of a rank
//     may end up with different blocks ([32, 128] and [128, 32] for
//     GLM-4.5-Air's 1408 over 4 ranks); the CUDA expert kernels take a
//     block shape per side.
//
// Block formats (GGUF k-quants and the like) have no such freedom: their
// scales are inside the bytes, so columns must be cut on block edges.

// rowRange is the rows [lo, hi) of a tensor's first dimension.
type rowRange struct{ lo, hi int }

// sliceRows is rows [lo, hi) of a matrix, or elements [lo, hi) of a
// vector.
func sliceRows(w *kernels.Weight, lo, hi int) (*kernels.Weight, error) {
	if len(w.Shape) == 1 {
		return sliceCols(w, lo, hi)
	}
	return selectRows(w, rowRange{lo, hi})
}

// selectRows concatenates the given ranges of w's first dimension (the
// rows of a matrix, the channels of a [C, 1, K] convolution). One range of
// a plain or edge-aligned FP8 tensor is a view of the checkpoint's bytes;
// several are copied.
func selectRows(w *kernels.Weight, rs ...rowRange) (*kernels.Weight, error) {
	if len(w.Shape) < 2 || w.Rows() != w.Shape[0] {
		return nil, fmt.Errorf("%s: %w: cannot select rows of a %v tensor", w.Name, ErrTP, w.Shape)
	}
	rb, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		return nil, err
	}
	total, blk := 0, w.ScaleBlock[0]
	for _, r := range rs {
		if r.lo < 0 || r.hi > w.Shape[0] || r.lo >= r.hi {
			return nil, fmt.Errorf("%s: %w: rows [%d,%d) of %d", w.Name, ErrTP, r.lo, r.hi, w.Shape[0])
		}
		if w.DType == kernels.F8E4M3 {
			blk = gcd(gcd(blk, r.lo), total)
		}
		total += r.hi - r.lo
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s: %w: no rows selected", w.Name, ErrTP)
	}
	shape := append([]int(nil), w.Shape...)
	shape[0] = total
	if len(rs) == 1 && (w.DType != kernels.F8E4M3 || blk == w.ScaleBlock[0]) {
		return w.RowSlice(w.Name, rs[0].lo, rs[0].hi, shape)
	}
	s := &kernels.Weight{Name: w.Name, DType: w.DType, Shape: shape}
	if len(rs) == 1 {
		s.Data = w.Data[rs[0].lo*rb : rs[0].hi*rb]
	} else {
		s.Data = make([]byte, 0, total*rb)
		for _, r := range rs {
			s.Data = append(s.Data, w.Data[r.lo*rb:r.hi*rb]...)
		}
	}
	if w.DType == kernels.F8E4M3 {
		// New block k holds rows [k·blk, (k+1)·blk) of the selection, all
		// inside the old block of its first row, whose scales it copies.
		bo, nsc := w.ScaleBlock[0], ceilDiv(w.Cols(), w.ScaleBlock[1])
		s.ScaleBlock = [2]int{blk, w.ScaleBlock[1]}
		s.Scale = make([]float32, 0, ceilDiv(total, blk)*nsc)
		for _, r := range rs {
			for row := r.lo; row < r.hi; row += blk {
				old := row / bo * nsc
				s.Scale = append(s.Scale, w.Scale[old:old+nsc]...)
			}
		}
	}
	return s, s.Validate()
}

// selectElems concatenates the given ranges of a vector's elements
// (sliceCols of each: their bounds on block edges).
func selectElems(w *kernels.Weight, rs ...rowRange) (*kernels.Weight, error) {
	if len(w.Shape) != 1 || len(rs) == 0 {
		return nil, fmt.Errorf("%s: %w: cannot select elements of a %v tensor", w.Name, ErrTP, w.Shape)
	}
	s := &kernels.Weight{Name: w.Name, DType: w.DType}
	n := 0
	for _, r := range rs {
		p, err := sliceCols(w, r.lo, r.hi)
		if err != nil {
			return nil, err
		}
		s.Data = append(s.Data, p.Data...)
		n += r.hi - r.lo
	}
	s.Shape = []int{n}
	return s, s.Validate()
}

// sliceCols copies columns [lo, hi) of every row into a new weight. Block
// formats need the bounds on block edges; FP8 is re-blocked (see above).
func sliceCols(w *kernels.Weight, lo, hi int) (*kernels.Weight, error) {
	cols := w.Cols()
	be, bb := w.DType.BlockElems(), w.DType.BlockBytes()
	if lo < 0 || hi > cols || lo >= hi || lo%be != 0 || ((hi-lo)%be != 0 && hi != cols) {
		return nil, fmt.Errorf("%s: %w: columns [%d,%d) of %d (blocks of %d)", w.Name, ErrTP, lo, hi, cols, be)
	}
	rb, err := w.DType.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	off, n := lo/be*bb, (hi-lo)/be*bb
	rows := w.Rows()
	data := make([]byte, rows*n)
	for r := range rows {
		copy(data[r*n:(r+1)*n], w.Data[r*rb+off:r*rb+off+n])
	}
	shape := append([]int(nil), w.Shape...)
	shape[len(shape)-1] = hi - lo
	s := &kernels.Weight{Name: w.Name, DType: w.DType, Shape: shape, Data: data}
	if w.DType == kernels.F8E4M3 {
		bo, bi := w.ScaleBlock[0], w.ScaleBlock[1]
		blk := gcd(bi, lo)
		full, part := ceilDiv(cols, bi), ceilDiv(hi-lo, blk)
		s.ScaleBlock = [2]int{bo, blk}
		s.Scale = make([]float32, 0, ceilDiv(rows, bo)*part)
		for r := range ceilDiv(rows, bo) {
			for c := lo; c < hi; c += blk {
				s.Scale = append(s.Scale, w.Scale[r*full+c/bi])
			}
		}
	}
	return s, s.Validate()
}
