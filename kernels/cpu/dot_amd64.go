//go:build amd64

package cpu

import "golang.org/x/sys/cpu"

// The decode GEMV is bound by how fast weight bytes stream through the
// cores; scalar Go converts and multiplies one element at a time, so the
// two hot dot products have AVX2+FMA versions (32 elements per step, four
// accumulators). Other CPUs use the portable loops.
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// haveAVX512: the float dots' AVX-512 forms (dot512_amd64.s) for whole
// 64-element steps, one accumulation order for all of them (dot2 stays
// bit-identical to dotF32, and the widening dots to dotF32 over the
// widened row). On a Zen 5 core dot2 alone gains only where its rows sit
// in L1 (1024 elements: 72 → 62–67 ns; 3072: 233 → 245–250), but a
// Qwen3-0.6B-shaped prompt prefills 20–25% faster end to end
// (docs/benchmarks.md).
var haveAVX512 = haveAVX2 && cpu.X86.HasAVX512F

//go:noescape
func dotF32x512(a, b *float32, n int) float32

//go:noescape
func dotBF16x512(w *uint16, x *float32, n int) float32

//go:noescape
func dotF16x512(w *uint16, x *float32, n int) float32

//go:noescape
func dot2F32x512(w, x0, x1 *float32, n int, out *[2]float32)

//go:noescape
func dot2x2F32x512(w0, w1, x0, x1 *float32, n int, out *[4]float32)

// dot2x2 computes w0·x0, w0·x1, w1·x0 and w1·x1 into out, each
// bit-identical to dotF32 (the prefill GEMM's 2×2 tile: a load serves two
// products instead of dot2's one and a half).
func dot2x2(w0, w1, x0, x1 []float32, out *[4]float32) {
	if n := len(w0) &^ 63; haveAVX512 && n > 0 && n == len(w0) {
		w1, x0, x1 = w1[:n], x0[:n], x1[:n]
		dot2x2F32x512(&w0[0], &w1[0], &x0[0], &x1[0], n, out)
		return
	}
	var a [2]float32
	dot2(w0, x0, x1, &a)
	out[0], out[1] = a[0], a[1]
	dot2(w1, x0, x1, &a)
	out[2], out[3] = a[0], a[1]
}

//go:noescape
func dotRowsF32x512(q, k *float32, dk, stride, rows int, out *float32, scale float32)

//go:noescape
func axpyRowsF32x512(o, v *float32, dv, stride, rows int, w *float32)

//go:noescape
func dotRowsF16x512(q *float32, k *uint16, dk, stride, rows int, out *float32, scale float32)

//go:noescape
func axpyRowsF16x512(o *float32, v *uint16, dv, stride, rows int, w *float32)

// halfRows reports whether the attention's block kernels read float16
// rows of dk-wide keys and dv-wide values directly (AVX-512); elsewhere
// a half pool's rows are widened into a scratch first.
func halfRows(dk, dv int) bool { return haveAVX512 && dk%64 == 0 && dv%128 == 0 }

// dotRowsHalf is dotRows over float16 rows, with halfRows' shapes.
func dotRowsHalf(q []float32, k []uint16, stride int, out []float32, scale float32) {
	n, dk := len(out), len(q)
	if n == 0 {
		return
	}
	_ = k[(n-1)*stride+dk-1]
	dotRowsF16x512(&q[0], &k[0], dk, stride, n, &out[0], scale)
}

// axpyRowsHalf is axpyRows over float16 rows, with halfRows' shapes.
func axpyRowsHalf(o []float32, v []uint16, stride int, w []float32) {
	n, dv := len(w), len(o)
	if n == 0 {
		return
	}
	_ = v[(n-1)*stride+dv-1]
	axpyRowsF16x512(&o[0], &v[0], dv, stride, n, &w[0])
}

//go:noescape
func dotRowsF32AVX2(q, k *float32, dk, stride, rows int, out *float32, scale float32)

//go:noescape
func axpyRowsF32AVX2(o, v *float32, dv, stride, rows int, w *float32)

// dotRows sets out[j] to dotF32(q, k[j·stride:][:len(q)])·scale for
// every j, the same bits, in one call where the rows fit the AVX-512 loop
// (the attention's scaled scores over a KV block: a call a position cost
// more than its 128-element dot).
func dotRows(q, k []float32, stride int, out []float32, scale float32) {
	n, dk := len(out), len(q)
	if n == 0 {
		return
	}
	_ = k[(n-1)*stride+dk-1] // bounds, once
	if haveAVX512 && dk%64 == 0 {
		dotRowsF32x512(&q[0], &k[0], dk, stride, n, &out[0], scale)
		return
	}
	if haveAVX2 && !haveAVX512 && dk%32 == 0 {
		dotRowsF32AVX2(&q[0], &k[0], dk, stride, n, &out[0], scale)
		return
	}
	for j := range out {
		out[j] = dotF32(q, k[j*stride:j*stride+dk]) * scale
	}
}

// axpyRows adds w[j]·v[j·stride:][:len(o)] to o for j in order, the same
// bits as one axpy a row (each product rounded before its sum), with o
// held in registers where it fits the AVX-512 loop.
func axpyRows(o, v []float32, stride int, w []float32) {
	n, dv := len(w), len(o)
	if n == 0 || dv == 0 {
		return
	}
	_ = v[(n-1)*stride+dv-1]
	if haveAVX512 && dv%128 == 0 {
		axpyRowsF32x512(&o[0], &v[0], dv, stride, n, &w[0])
		return
	}
	if haveAVX2 && dv%64 == 0 {
		axpyRowsF32AVX2(&o[0], &v[0], dv, stride, n, &w[0])
		return
	}
	for j, wj := range w {
		axpy(o, v[j*stride:j*stride+dv], wj)
	}
}

// SIMD names the vector loops this CPU runs: "avx512", "avx2" or
// "portable" (what a benchmark's numbers depend on).
func SIMD() string {
	switch {
	case haveAVX512:
		return "avx512"
	case haveAVX2:
		return "avx2"
	}
	return "portable"
}

// haveF16C adds the f16 conversions (F16 checkpoints: GGUF F16 files and
// fp16 safetensors, whose scalar loop converted a weight at a time).
var haveF16C = haveAVX2 && cpu.X86.HasF16C

//go:noescape
func dotBF16AVX2(w *uint16, x *float32, n int) float32

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

func dotBF16(w []uint16, x []float32) float32 {
	if n := len(w) &^ 63; haveAVX512 && n > 0 {
		x = x[:len(w)]
		return dotBF16x512(&w[0], &x[0], n) + dotBF16Go(w[n:], x[n:])
	}
	n := len(w) &^ 31
	if !haveAVX2 || n == 0 {
		return dotBF16Go(w, x)
	}
	x = x[:len(w)]
	s := dotBF16AVX2(&w[0], &x[0], n)
	if n < len(w) {
		s += dotBF16Go(w[n:], x[n:])
	}
	return s
}

func dotF32(a, b []float32) float32 {
	if n := len(a) &^ 63; haveAVX512 && n > 0 {
		b = b[:len(a)]
		return dotF32x512(&a[0], &b[0], n) + dotF32Go(a[n:], b[n:])
	}
	n := len(a) &^ 31
	if !haveAVX2 || n == 0 {
		return dotF32Go(a, b)
	}
	b = b[:len(a)]
	s := dotF32AVX2(&a[0], &b[0], n)
	if n < len(a) {
		s += dotF32Go(a[n:], b[n:])
	}
	return s
}

//go:noescape
func dot2F32AVX2(w, x0, x1 *float32, n int, out *[2]float32)

// dot2 computes w·x0 and w·x1, each bit-identical to dotF32.
func dot2(w, x0, x1 []float32, out *[2]float32) {
	if n := len(w) &^ 63; haveAVX512 && n > 0 {
		x0, x1 = x0[:len(w)], x1[:len(w)]
		dot2F32x512(&w[0], &x0[0], &x1[0], n, out)
		out[0] += dotF32Go(w[n:], x0[n:])
		out[1] += dotF32Go(w[n:], x1[n:])
		return
	}
	n := len(w) &^ 31
	if !haveAVX2 || n == 0 {
		out[0], out[1] = dotF32Go(w, x0), dotF32Go(w, x1)
		return
	}
	x0, x1 = x0[:len(w)], x1[:len(w)]
	dot2F32AVX2(&w[0], &x0[0], &x1[0], n, out)
	if n < len(w) {
		out[0] += dotF32Go(w[n:], x0[n:])
		out[1] += dotF32Go(w[n:], x1[n:])
	}
}

//go:noescape
func bf16ToF32AVX2(src *uint16, dst *float32, n int)

// bf16Row widens a bf16 row to float32 (prefill decodes each weight row
// once per GEMM, so this is on the prefill hot path).
func bf16Row(src []uint16, dst []float32) {
	n := len(src) &^ 15
	if haveAVX2 && n > 0 {
		dst = dst[:len(src)]
		bf16ToF32AVX2(&src[0], &dst[0], n)
	} else {
		n = 0
	}
	for i := n; i < len(src); i++ {
		dst[i] = bf16(src[i])
	}
}

//go:noescape
func axpyF32AVX2(o, v *float32, w float32, n int)

// axpy adds w·v to o (equal lengths), each product rounded before its sum
// as in the portable loop, so the results are the same bits.
func axpy(o, v []float32, w float32) {
	n := len(o) &^ 7
	if haveAVX2 && n > 0 {
		v = v[:len(o)]
		axpyF32AVX2(&o[0], &v[0], w, n)
	} else {
		n = 0
	}
	axpyGo(o[n:], v[n:], w)
}

//go:noescape
func dotF16AVX2(w *uint16, x *float32, n int) float32

//go:noescape
func f16ToF32AVX2(src *uint16, dst *float32, n int)

func dotF16(w []uint16, x []float32) float32 {
	if n := len(w) &^ 63; haveAVX512 && haveF16C && n > 0 {
		x = x[:len(w)]
		return dotF16x512(&w[0], &x[0], n) + dotF16Go(w[n:], x[n:])
	}
	n := len(w) &^ 31
	if !haveF16C || n == 0 {
		return dotF16Go(w, x)
	}
	x = x[:len(w)]
	s := dotF16AVX2(&w[0], &x[0], n)
	if n < len(w) {
		s += dotF16Go(w[n:], x[n:])
	}
	return s
}

// f16Row widens an f16 row to float32 (prefill's row decode), exactly.
func f16Row(src []uint16, dst []float32) {
	n := len(src) &^ 15
	if haveF16C && n > 0 {
		dst = dst[:len(src)]
		f16ToF32AVX2(&src[0], &dst[0], n)
	} else {
		n = 0
	}
	for i := n; i < len(src); i++ {
		dst[i] = f16ToF32(src[i])
	}
}

//go:noescape
func fp8DotAVX2(row *byte, x *float32, n int) float32

//go:noescape
func fp8RowAVX2(row *byte, dst *float32, n int, scale float32)

//go:noescape
func fp8Row512(row *byte, dst *float32, n int, scale float32)

//go:noescape
func fp8DotRow512(row *byte, x *float32, n int, scales *float32, bi int) float32

// fp8DotRowFits reports whether fp8DotRow takes rows of n columns in
// blocks of bi on this CPU: the bits are dotF32's only where each form
// runs beside the dotF32 loop of its width (haveAVX512 decides; the tests
// turn it off alone).
func fp8DotRowFits(n, bi int) bool {
	switch {
	case n <= 0 || bi <= 0:
		return false
	case haveAVX512:
		return haveFP8Row512 && n%64 == 0 && bi%64 == 0
	}
	return haveAVX2 && n%32 == 0 && bi%32 == 0
}

// fp8DotRow is dotF32 of the row that rowTo decodes from the E4M3 bytes
// row (block b of bi columns times scales[b]), bit for bit, without the
// decoded row (fp8DotRow512, fp8DotRowAVX2). Only where
// fp8DotRowFits(len(row), bi); x and scales must cover the row.
func fp8DotRow(row []byte, x []float32, scales []float32, bi int) float32 {
	n := len(row)
	x, scales = x[:n], scales[:(n+bi-1)/bi]
	if haveAVX512 {
		// + dotF32Go's empty tail, as dotF32 adds it (a -0 sum becomes +0).
		return fp8DotRow512(&row[0], &x[0], n, &scales[0], bi) + dotF32Go(nil, nil)
	}
	return fp8DotRowAVX2(&row[0], &x[0], n, &scales[0], bi)
}

//go:noescape
func fp8DotRowAVX2(row *byte, x *float32, n int, scales *float32, bi int) float32

// haveFP8Row512: fp8Row512's word compares into a mask need AVX-512BW and
// VL besides F.
var haveFP8Row512 = haveAVX512 && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL

// fp8Dot is Σ fp8Table[row[i]]·x[i] (FP8 E4M3 checkpoints on the CPU,
// whose scalar loop looked a weight up at a time): eight bytes decoded
// to the table's values at a time (dot_amd64.s).
func fp8Dot(row []byte, x []float32) float32 {
	n := len(row) &^ 15
	var s float32
	if haveAVX2 && n > 0 {
		s = fp8DotAVX2(&row[0], &x[0], n)
	} else {
		n = 0
	}
	for i := n; i < len(row); i++ {
		s += fp8Table[row[i]] * x[i]
	}
	return s
}

// fp8Row writes dst[i] = fp8Table[row[i]]·scale.
func fp8Row(row []byte, dst []float32, scale float32) {
	if n := len(row) &^ 15; haveFP8Row512 && n > 0 {
		dst = dst[:len(row)]
		fp8Row512(&row[0], &dst[0], n, scale)
		row, dst = row[n:], dst[n:]
	}
	n := len(row) &^ 7
	if haveAVX2 && n > 0 {
		dst = dst[:len(row)]
		fp8RowAVX2(&row[0], &dst[0], n, scale)
	} else {
		n = 0
	}
	for i := n; i < len(row); i++ {
		dst[i] = fp8Table[row[i]] * scale
	}
}
