package cpu

import (
	"fmt"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

// tensor is a weight as the CPU reads it: the mapped bytes themselves.
type tensor struct {
	w    *kernels.Weight
	u16  []uint16  // F16/BF16 view of w.Data
	f    []float32 // F32 view of w.Data
	rowB int       // bytes per row (block formats)
	// vec caches small 1-D weights (norm scales) as float32; they are a few
	// KB per layer, so this is not a copy of the model.
	vec []float32
}

func (t *tensor) Weight() *kernels.Weight { return t.w }

// LoadWeight implements kernels.Backend.
func (b *Backend) LoadWeight(w *kernels.Weight) (kernels.Tensor, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	t := &tensor{w: w}
	switch w.DType {
	case kernels.F32:
		t.f = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(w.Data))), len(w.Data)/4)
	case kernels.F16, kernels.BF16:
		t.u16 = unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(w.Data))), len(w.Data)/2)
	case kernels.F8E4M3:
	default:
		if !blockSupported(w.DType) {
			return nil, fmt.Errorf("%s: %s: %w", w.Name, w.DType, kernels.ErrUnsupported)
		}
		rb, err := w.DType.RowBytes(w.Cols())
		if err != nil {
			return nil, err
		}
		t.rowB = rb
	}
	if len(w.Shape) == 1 && w.Elems() <= 1<<16 {
		t.vec = make([]float32, w.Elems())
		t.rowTo(0, t.vec)
	}
	return t, nil
}

func (t *tensor) vector() []float32 {
	if t.vec == nil {
		t.vec = make([]float32, t.w.Elems())
		for r := 0; r < t.w.Rows(); r++ {
			t.rowTo(r, t.vec[r*t.w.Cols():(r+1)*t.w.Cols()])
		}
	}
	return t.vec
}

func bf16(v uint16) float32 { return kernels.BF16ToF32(v) }

// rowTo decodes row r into dst (len = Cols).
func (t *tensor) rowTo(r int, dst []float32) {
	n := t.w.Cols()
	switch t.w.DType {
	case kernels.F32:
		copy(dst, t.f[r*n:(r+1)*n])
	case kernels.BF16:
		bf16Row(t.u16[r*n:(r+1)*n], dst)
	case kernels.F16:
		f16Row(t.u16[r*n:(r+1)*n], dst)
	case kernels.F8E4M3:
		bo, bi := t.w.ScaleBlock[0], t.w.ScaleBlock[1]
		sc := t.w.Scale[(r/bo)*((n+bi-1)/bi):]
		row := t.w.Data[r*n : (r+1)*n]
		for blk := 0; blk*bi < n; blk++ {
			lo, hi := blk*bi, min((blk+1)*bi, n)
			fp8Row(row[lo:hi], dst[lo:hi], sc[blk])
		}
	default:
		// Validated at load time; a failure here cannot happen for a
		// tensor that passed LoadWeight.
		_ = blockDequant(t.w.DType, t.w.Data[r*t.rowB:(r+1)*t.rowB], dst)
	}
}

// fp8Fused reports whether an FP8 tensor's rows are dotted as they widen
// (fp8RowDot) on this CPU.
func (t *tensor) fp8Fused() bool {
	return t.w.DType == kernels.F8E4M3 && fp8DotRowFits(t.w.Cols(), t.w.ScaleBlock[1])
}

// fp8RowDot is dotF32(x, row r decoded by rowTo) of an FP8 tensor, bit for
// bit, without decoding the row; only where t.fp8Fused().
func (t *tensor) fp8RowDot(r int, x []float32) float32 {
	n := t.w.Cols()
	bo, bi := t.w.ScaleBlock[0], t.w.ScaleBlock[1]
	return fp8DotRow(t.w.Data[r*n:(r+1)*n], x, t.w.Scale[(r/bo)*((n+bi-1)/bi):], bi)
}

// dots writes dst[i] = t.dot(lo+i, x) for rows lo..hi-1: a block format's
// run of rows in one quant.DotRows (its checks and loop chosen once).
func (t *tensor) dots(lo, hi int, x, dst []float32) {
	switch t.w.DType {
	case kernels.F32, kernels.BF16, kernels.F16, kernels.F8E4M3:
		for o := lo; o < hi; o++ {
			dst[o-lo] = t.dot(o, x)
		}
	default:
		blockDots(t.w.DType, t.w.Data[lo*t.rowB:hi*t.rowB], x, dst[:hi-lo])
	}
}

// dot computes row r · x directly from the stored format.
func (t *tensor) dot(r int, x []float32) float32 {
	n := t.w.Cols()
	switch t.w.DType {
	case kernels.F32:
		return dotF32(t.f[r*n:(r+1)*n], x)
	case kernels.BF16:
		return dotBF16(t.u16[r*n:(r+1)*n], x)
	case kernels.F16:
		return dotF16(t.u16[r*n:(r+1)*n], x)
	case kernels.F8E4M3:
		bo, bi := t.w.ScaleBlock[0], t.w.ScaleBlock[1]
		sc := t.w.Scale[(r/bo)*((n+bi-1)/bi):]
		row := t.w.Data[r*n : (r+1)*n]
		var total float32
		for blk := 0; blk*bi < n; blk++ {
			lo, hi := blk*bi, min((blk+1)*bi, n)
			total += fp8Dot(row[lo:hi], x[lo:hi]) * sc[blk]
		}
		return total
	default:
		return blockDot(t.w.DType, t.w.Data[r*t.rowB:(r+1)*t.rowB], x)
	}
}

func dotF32Go(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotF16Go(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += f16ToF32(w[i]) * x[i]
		s1 += f16ToF32(w[i+1]) * x[i+1]
		s2 += f16ToF32(w[i+2]) * x[i+2]
		s3 += f16ToF32(w[i+3]) * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += f16ToF32(w[i]) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotBF16Go(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += bf16(w[i]) * x[i]
		s1 += bf16(w[i+1]) * x[i+1]
		s2 += bf16(w[i+2]) * x[i+2]
		s3 += bf16(w[i+3]) * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += bf16(w[i]) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func f16ToF32(h uint16) float32 { return kernels.F16ToF32(h) }

// fp8Table decodes FP8 E4M3 bytes.
var fp8Table = kernels.FP8E4M3Table()
