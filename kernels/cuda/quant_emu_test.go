package cuda

// A CPU emulation of the batch-1 int8 GEMVs (qx_norm + qmv, quant_mmv.cuh):
// the activation is rounded to int8 per 32 elements with d = max|x|/127 and
// the dp4a sums are exact, so the kernels compute Σ_i w_i·d_b·q_i (w_i the
// exactly decoded weights) up to fp32 rounding. It measures the NMSE that
// this rounding alone gives on conformance's inputs, no GPU needed.

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/quant"
)

// emuBlocks is cmd/pocket-worker's randomBlocks for Q4_K, Q6_K and Q8_0:
// random bits, fp16 scales of about 1e-3.
func emuBlocks(rng *rand.Rand, dt kernels.DType, rows, cols int) []byte {
	rb, _ := dt.RowBytes(cols)
	b := make([]byte, rows*rb)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	offs := map[kernels.DType][]int{kernels.Q4_K: {0, 2}, kernels.Q6_K: {208}, kernels.Q8_0: {0}}[dt]
	bb := dt.BlockBytes()
	for o := 0; o < len(b); o += bb {
		for _, off := range offs {
			binary.LittleEndian.PutUint16(b[o+off:], emuF16(float32(1e-3*(0.5+rng.Float64()))))
		}
	}
	return b
}

func emuF16(f float32) uint16 {
	b := math.Float32bits(f)
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	h := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++
	}
	return uint16(h)
}

// emuInt8 is x as qx_norm leaves it: per 32 elements d·round(x·127/max|x|).
func emuInt8(x []float32) []float64 {
	y := make([]float64, len(x))
	for b := 0; b < len(x); b += 32 {
		var am float32
		for _, v := range x[b : b+32] {
			am = max(am, float32(math.Abs(float64(v))))
		}
		if am == 0 {
			continue
		}
		d, id := am/127, 127/am
		for i := b; i < b+32; i++ {
			y[i] = float64(d) * math.RoundToEven(float64(x[i]*id))
		}
	}
	return y
}

type emuMat struct {
	w          [][]float32 // decoded rows
	rows, cols int
}

func emuMatrix(rng *rand.Rand, dt kernels.DType, rows, cols int) emuMat {
	data := emuBlocks(rng, dt, rows, cols)
	rb, _ := dt.RowBytes(cols)
	m := emuMat{rows: rows, cols: cols}
	for r := 0; r < rows; r++ {
		w := make([]float32, cols)
		if err := quant.DequantizeRow(dt, data[r*rb:(r+1)*rb], w); err != nil {
			panic(err)
		}
		m.w = append(m.w, w)
	}
	return m
}

// mv returns W·x in float64 for x exact and x as the kernels round it.
func (m emuMat) mv(x []float32) (exact, int8 []float64) {
	xq := emuInt8(x)
	exact, int8 = make([]float64, m.rows), make([]float64, m.rows)
	for r, w := range m.w {
		var a, b float64
		for i, v := range w {
			a += float64(v) * float64(x[i])
			b += float64(v) * xq[i]
		}
		exact[r], int8[r] = a, b
	}
	return exact, int8
}

func emuNMSE(got, want []float64) float64 {
	var num, den float64
	for i := range got {
		num += (got[i] - want[i]) * (got[i] - want[i])
		den += want[i] * want[i]
	}
	return num / den
}

// quantNMSE is the NMSE of x's own int8 rounding.
func quantNMSE(x []float32) float64 {
	xq := emuInt8(x)
	var num, den float64
	for i, v := range x {
		num += (xq[i] - float64(v)) * (xq[i] - float64(v))
		den += float64(v) * float64(v)
	}
	return num / den
}

func emuRandn(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

func median(v []float64) (med, hi float64) {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2], s[len(s)-1]
}

// TestInt8RoundingNMSE: conformance's fused cases (x·γ with γ ~ N(0, 1/in)
// as its random norm vector) against its unfused ones (x ~ N(0, 1)).
func TestInt8RoundingNMSE(t *testing.T) {
	if testing.Short() {
		t.Skip("emulation")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const in = 4096
	m := emuMatrix(rng, kernels.Q4_K, 1024, in)
	var plain, normed, gamma1, qPlain, qNormed []float64
	for range 24 {
		x := emuRandn(rng, in, 1)
		e, q := m.mv(x)
		plain = append(plain, emuNMSE(q, e))
		qPlain = append(qPlain, quantNMSE(x))
		// x·γ, conformance's random norm vector (the 1/rms factor is a
		// common scale: it changes no int8 value).
		g := emuRandn(rng, in, 1/math.Sqrt(in))
		xg := make([]float32, in)
		for i := range xg {
			xg[i] = x[i] * g[i]
		}
		e, q = m.mv(xg)
		normed = append(normed, emuNMSE(q, e))
		qNormed = append(qNormed, quantNMSE(xg))
		// A model-like γ near 1.
		for i := range xg {
			xg[i] = x[i] * (1 + 0.1*float32(rng.NormFloat64()))
		}
		e, q = m.mv(xg)
		gamma1 = append(gamma1, emuNMSE(q, e))
	}
	for _, r := range []struct {
		name string
		v    []float64
	}{{"x ~ N(0,1): GEMV", plain}, {"x ~ N(0,1): x's rounding", qPlain}, {"x·γ, γ ~ N(0,1/in): GEMV", normed},
		{"x·γ, γ ~ N(0,1/in): x's rounding", qNormed}, {"x·γ, γ ~ 1 ± 0.1: GEMV", gamma1}} {
		med, hi := median(r.v)
		t.Logf("%-36s NMSE median %.3e max %.3e", r.name, med, hi)
	}
	// The GEMV's NMSE follows the activation's own rounding, which the
	// heavier tails of x·γ double; conformance's int8 cases are checked
	// against the CPU fed the rounded activation (quant_conf.go).
	mp, _ := median(qPlain)
	mn, _ := median(qNormed)
	if mp > 5e-5 || mn < 1.5*mp || mn > 1e-4 {
		t.Errorf("int8 rounding NMSE: x %.3e, x·γ %.3e", mp, mn)
	}
}
