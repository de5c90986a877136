//go:build !amd64

package cpu

// haveAVX512 is amd64's switch of the wide loops (its tests turn it off
// and on); never set here.
var haveAVX512 = false

// SIMD names the vector loops this CPU runs: the portable ones here.
func SIMD() string { return "portable" }

func dotBF16(w []uint16, x []float32) float32 { return dotBF16Go(w, x) }

func dotF32(a, b []float32) float32 { return dotF32Go(a, b) }

func dot2(w, x0, x1 []float32, out *[2]float32) {
	out[0], out[1] = dotF32Go(w, x0), dotF32Go(w, x1)
}

func dot2x2(w0, w1, x0, x1 []float32, out *[4]float32) {
	out[0], out[1], out[2], out[3] = dotF32Go(w0, x0), dotF32Go(w0, x1), dotF32Go(w1, x0), dotF32Go(w1, x1)
}

func bf16Row(src []uint16, dst []float32) {
	for i, v := range src {
		dst[i] = bf16(v)
	}
}

func axpy(o, v []float32, w float32) { axpyGo(o, v, w) }

func dotRows(q, k []float32, stride int, out []float32, scale float32) {
	for j := range out {
		out[j] = dotF32Go(q, k[j*stride:j*stride+len(q)]) * scale
	}
}

func axpyRows(o, v []float32, stride int, w []float32) {
	for j, wj := range w {
		axpyGo(o, v[j*stride:j*stride+len(o)], wj)
	}
}

func dotF16(w []uint16, x []float32) float32 { return dotF16Go(w, x) }

func f16Row(src []uint16, dst []float32) {
	for i, v := range src {
		dst[i] = f16ToF32(v)
	}
}

func fp8Dot(row []byte, x []float32) float32 {
	var s float32
	for i, v := range row {
		s += fp8Table[v] * x[i]
	}
	return s
}

// fp8DotRowFits: no fused FP8 row dot here (the caller decodes the row).
func fp8DotRowFits(n, bi int) bool { return false }

func fp8DotRow(row []byte, x []float32, scales []float32, bi int) float32 {
	panic("cpu: fp8DotRow without fp8DotRowFits")
}

func fp8Row(row []byte, dst []float32, scale float32) {
	for i, v := range row {
		dst[i] = fp8Table[v] * scale
	}
}

// halfRows: no direct float16 block kernels here (the attention widens a
// half pool's rows first).
func halfRows(dk, dv int) bool { return false }

func dotRowsHalf(q []float32, k []uint16, stride int, out []float32, scale float32) {
	panic("cpu: dotRowsHalf without halfRows")
}

func axpyRowsHalf(o []float32, v []uint16, stride int, w []float32) {
	panic("cpu: axpyRowsHalf without halfRows")
}
