package kernels

import "fmt"

// DType is the storage format of a weight. Block formats (GGUF quants) store
// BlockElems elements in BlockBytes bytes along the last dimension.
type DType uint8

const (
	F32 DType = iota
	F16
	BF16
	// F8E4M3 is FP8 E4M3 with a float32 scale per [ScaleBlock[0] ×
	// ScaleBlock[1]] block of the matrix (Weight.Scale), as DeepSeek-V3 and
	// Qwen3-FP8 checkpoints store it (weight_scale_inv).
	F8E4M3
	// GGUF block formats, consumed directly by quant-aware kernels.
	Q8_0
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q2_K
	Q3_K
	Q4_K
	Q5_K
	Q6_K
	IQ1_S
	IQ1_M
	IQ2_XXS
	IQ2_XS
	IQ2_S
	IQ3_XXS
	IQ3_S
	IQ4_NL
	IQ4_XS
	MXFP4
	numDTypes
)

type dtypeInfo struct {
	name       string
	blockElems int
	blockBytes int
}

var dtypeInfos = [numDTypes]dtypeInfo{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	BF16:    {"BF16", 1, 2},
	F8E4M3:  {"F8_E4M3", 1, 1},
	Q8_0:    {"Q8_0", 32, 34},
	Q4_0:    {"Q4_0", 32, 18},
	Q4_1:    {"Q4_1", 32, 20},
	Q5_0:    {"Q5_0", 32, 22},
	Q5_1:    {"Q5_1", 32, 24},
	Q2_K:    {"Q2_K", 256, 84},
	Q3_K:    {"Q3_K", 256, 110},
	Q4_K:    {"Q4_K", 256, 144},
	Q5_K:    {"Q5_K", 256, 176},
	Q6_K:    {"Q6_K", 256, 210},
	IQ1_S:   {"IQ1_S", 256, 50},
	IQ1_M:   {"IQ1_M", 256, 56},
	IQ2_XXS: {"IQ2_XXS", 256, 66},
	IQ2_XS:  {"IQ2_XS", 256, 74},
	IQ2_S:   {"IQ2_S", 256, 82},
	IQ3_XXS: {"IQ3_XXS", 256, 98},
	IQ3_S:   {"IQ3_S", 256, 110},
	IQ4_NL:  {"IQ4_NL", 32, 18},
	IQ4_XS:  {"IQ4_XS", 256, 136},
	MXFP4:   {"MXFP4", 32, 17},
}

func (d DType) String() string {
	if d < numDTypes {
		return dtypeInfos[d].name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Valid reports whether d is a known format.
func (d DType) Valid() bool { return d < numDTypes }

// BlockElems is the number of elements one storage block holds.
func (d DType) BlockElems() int { return dtypeInfos[d].blockElems }

// BlockBytes is the size of one storage block.
func (d DType) BlockBytes() int { return dtypeInfos[d].blockBytes }

// RowBytes is the size of a row of n elements, or an error when n is not a
// whole number of blocks.
func (d DType) RowBytes(n int) (int, error) {
	if !d.Valid() {
		return 0, fmt.Errorf("unknown dtype %d", d)
	}
	be := d.BlockElems()
	if n%be != 0 {
		return 0, fmt.Errorf("%s: row of %d elements is not a multiple of the %d-element block", d, n, be)
	}
	return n / be * d.BlockBytes(), nil
}

// Weight is a host-side view of one stored tensor: its bytes (usually a
// slice of a memory-mapped checkpoint) and how to read them. Matrices are
// [out, in] row-major, as checkpoints store linear layers.
type Weight struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
	// Scale holds F8E4M3 dequantisation factors, float32 row-major
	// [ceil(out/ScaleBlock[0]), ceil(in/ScaleBlock[1])]: value = fp8 * scale.
	Scale      []float32
	ScaleBlock [2]int
}

// Rows and Cols view the weight as a matrix: the last dimension is Cols and
// all leading dimensions multiply into Rows (a vector is one row).
func (w *Weight) Rows() int {
	r := 1
	for _, d := range w.Shape[:max(len(w.Shape)-1, 0)] {
		r *= d
	}
	return r
}

// Cols is the size of the last dimension.
func (w *Weight) Cols() int {
	if len(w.Shape) == 0 {
		return 1
	}
	return w.Shape[len(w.Shape)-1]
}

// Elems is the number of elements.
func (w *Weight) Elems() int { return w.Rows() * w.Cols() }

// Validate checks that Data holds exactly the bytes the shape and dtype
// require, so kernels can index without bounds surprises.
func (w *Weight) Validate() error {
	for _, d := range w.Shape {
		if d <= 0 {
			return fmt.Errorf("%s: bad shape %v", w.Name, w.Shape)
		}
	}
	rb, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		return fmt.Errorf("%s: %w", w.Name, err)
	}
	if want := int64(rb) * int64(w.Rows()); int64(len(w.Data)) != want {
		return fmt.Errorf("%s: %d bytes of data, shape %v of %s needs %d", w.Name, len(w.Data), w.Shape, w.DType, want)
	}
	if w.DType == F8E4M3 {
		bo, bi := w.ScaleBlock[0], w.ScaleBlock[1]
		if bo <= 0 || bi <= 0 {
			return fmt.Errorf("%s: FP8 weight without a scale block size", w.Name)
		}
		want := ceilDiv(w.Rows(), bo) * ceilDiv(w.Cols(), bi)
		if len(w.Scale) != want {
			return fmt.Errorf("%s: %d FP8 scales, need %d", w.Name, len(w.Scale), want)
		}
	}
	return nil
}

// RowSlice returns rows [lo, hi) of w as a new Weight sharing the data (for
// stacked expert tensors and tensor-parallel shards).
func (w *Weight) RowSlice(name string, lo, hi int, shape []int) (*Weight, error) {
	rb, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		return nil, err
	}
	if lo < 0 || hi > w.Rows() || lo >= hi {
		return nil, fmt.Errorf("%s: rows [%d,%d) out of %d", w.Name, lo, hi, w.Rows())
	}
	s := &Weight{Name: name, DType: w.DType, Shape: shape, Data: w.Data[lo*rb : hi*rb]}
	if w.DType == F8E4M3 {
		bo := w.ScaleBlock[0]
		if lo%bo != 0 {
			return nil, fmt.Errorf("%s: FP8 row slice at %d not aligned to scale block %d", w.Name, lo, bo)
		}
		sc := ceilDiv(w.Cols(), w.ScaleBlock[1])
		s.Scale = w.Scale[lo/bo*sc : ceilDiv(hi, bo)*sc]
		s.ScaleBlock = w.ScaleBlock
	}
	return s, s.Validate()
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// StackRows joins weights of one format and width row-wise, in order, into
// a new weight [Σ rows, cols] (a copy). FP8 pieces must each be whole scale
// blocks of rows, so that the scale rows join the same way.
func StackRows(name string, ws []*Weight) (*Weight, error) {
	if len(ws) == 0 {
		return nil, fmt.Errorf("%s: nothing to stack", name)
	}
	f := ws[0]
	rows, nd, ns := 0, 0, 0
	for _, w := range ws {
		if w.DType != f.DType || w.Cols() != f.Cols() || w.ScaleBlock != f.ScaleBlock {
			return nil, fmt.Errorf("%s: %s (%s, %d columns) does not stack on %s (%s, %d columns)", name, w.Name,
				w.DType, w.Cols(), f.Name, f.DType, f.Cols())
		}
		if w.DType == F8E4M3 && w.Rows()%w.ScaleBlock[0] != 0 {
			return nil, fmt.Errorf("%s: %s: %d FP8 rows are not whole %d-row scale blocks", name, w.Name, w.Rows(), w.ScaleBlock[0])
		}
		rows, nd, ns = rows+w.Rows(), nd+len(w.Data), ns+len(w.Scale)
	}
	s := &Weight{Name: name, DType: f.DType, Shape: []int{rows, f.Cols()}, Data: make([]byte, 0, nd), ScaleBlock: f.ScaleBlock}
	if ns > 0 {
		s.Scale = make([]float32, 0, ns)
	}
	for _, w := range ws {
		s.Data = append(s.Data, w.Data...)
		s.Scale = append(s.Scale, w.Scale...)
	}
	return s, s.Validate()
}
