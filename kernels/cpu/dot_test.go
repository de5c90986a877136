package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

func TestDotKernelsMatchPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 31, 32, 33, 64, 100, 1024, 4099} {
		w := make([]uint16, n)
		a := make([]float32, n)
		x := make([]float32, n)
		for i := range w {
			a[i] = rng.Float32()*2 - 1
			w[i] = uint16(math.Float32bits(a[i]) >> 16)
			x[i] = rng.Float32()*2 - 1
		}
		if got, want := dotBF16(w, x), dotBF16Go(w, x); math.Abs(float64(got-want)) > 1e-4*math.Sqrt(float64(n)) {
			t.Errorf("bf16 n=%d: %v vs %v", n, got, want)
		}
		if got, want := dotF32(a, x), dotF32Go(a, x); math.Abs(float64(got-want)) > 1e-4*math.Sqrt(float64(n)) {
			t.Errorf("f32 n=%d: %v vs %v", n, got, want)
		}
		h := make([]uint16, n) // |value| < 1, subnormals included
		for i := range h {
			h[i] = uint16(rng.IntN(2))<<15 | uint16(rng.IntN(15))<<10 | uint16(rng.IntN(1024))
		}
		if got, want := dotF16(h, x), dotF16Go(h, x); math.Abs(float64(got-want)) > 1e-4*math.Sqrt(float64(n)) {
			t.Errorf("f16 n=%d: %v vs %v", n, got, want)
		}
	}
}

// TestF16RowExact: the F16C row conversion gives kernels.F16ToF32's bits
// for every f16 value (zeros, subnormals, infinities; NaN stays NaN).
func TestF16RowExact(t *testing.T) {
	src := make([]uint16, 1<<16+5)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	f16Row(src, dst)
	for i, v := range src {
		want := kernels.F16ToF32(v)
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(dst[i])) {
				t.Fatalf("f16 %#04x: %v, want NaN", v, dst[i])
			}
			continue
		}
		if math.Float32bits(dst[i]) != math.Float32bits(want) {
			t.Fatalf("f16 %#04x: %v, want %v", v, dst[i], want)
		}
	}
}

func BenchmarkDotBF16(b *testing.B) {
	const n = 4096
	w := make([]uint16, n)
	x := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		dotBF16(w, x)
	}
}

func BenchmarkDotF16(b *testing.B) {
	const n = 4096
	w := make([]uint16, n)
	x := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		dotF16(w, x)
	}
}

func BenchmarkDotF16Go(b *testing.B) {
	const n = 4096
	w := make([]uint16, n)
	x := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		dotF16Go(w, x)
	}
}

func TestDot2BitIdenticalToDot(t *testing.T) {
	forEachWidth(t, testDot2BitIdentical)
}

// forEachWidth runs test with the AVX-512 forms off (the AVX2 loops, as on
// CPUs without AVX-512) and, where the CPU has them, on.
func forEachWidth(t *testing.T, test func(*testing.T)) {
	wide := haveAVX512
	defer func() { haveAVX512 = wide }()
	for _, on := range []bool{false, true} {
		if on && !wide {
			continue
		}
		haveAVX512 = on
		t.Run(map[bool]string{false: "avx2", true: "avx512"}[on], test)
	}
}

func testDot2BitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 15, 31, 32, 33, 64, 96, 127, 160, 1000, 4096} {
		w := make([]float32, n)
		wb := make([]uint16, n)
		wh := make([]uint16, n)
		w16 := make([]float32, n)
		x0 := make([]float32, n)
		x1 := make([]float32, n)
		for i := range w {
			wb[i] = uint16(math.Float32bits(rng.Float32()-0.5) >> 16)
			w[i] = bf16(wb[i])
			wh[i] = uint16(rng.Uint32()) & 0xbfff // finite f16s (exponent field ≤ 15)
			w16[i] = f16ToF32(wh[i])
			x0[i] = rng.Float32() - 0.5
			x1[i] = rng.Float32() - 0.5
		}
		var out [2]float32
		dot2(w, x0, x1, &out)
		// Batch invariance: the two-row kernel, the one-row f32 kernel
		// and the bf16 and f16 decode kernels (against the widened row)
		// agree to the bit, in the AVX2 and AVX-512 forms alike.
		if out[0] != dotF32(w, x0) || out[1] != dotF32(w, x1) || out[0] != dotBF16(wb, x0) {
			t.Errorf("n=%d: dot2 %v, dotF32 %v %v, dotBF16 %v", n, out, dotF32(w, x0), dotF32(w, x1), dotBF16(wb, x0))
		}
		if a, b := dotF16(wh, x0), dotF32(w16, x0); a != b {
			t.Errorf("n=%d: dotF16 %v, dotF32 of the widened row %v", n, a, b)
		}
		var four [4]float32
		dot2x2(w, w16, x0, x1, &four)
		if four != [4]float32{dotF32(w, x0), dotF32(w, x1), dotF32(w16, x0), dotF32(w16, x1)} {
			t.Errorf("n=%d: dot2x2 %v", n, four)
		}
	}
}

// TestMatMulBatchInvariant: a row's MatMul result does not depend on how
// many rows the call has or on where the output rows fall in the prefill
// GEMM's blocks of prefillRows weight rows or in the chunked GEMM's tiles
// (bf16 weights; the prefill path against the one-row decode path, bit
// for bit).
func TestMatMulBatchInvariant(t *testing.T) { forEachWidth(t, testMatMulBatchInvariant) }

func testMatMulBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	b := New(2)
	for _, shape := range [][2]int{{1, 96}, {prefillRows + 1, 96}, {3*prefillRows + 2, 96}, {prefillRows + 1, 128}, {3*prefillRows + 2, 320},
		{6, 1536}, {2*gemmGroup + 3, gemmMinIn + 64}, {gemmGroup - 1, 2*gemmChunk + 64}} {
		// in = 128, 320: whole steps of the AVX-512 loops; 1536: blocks
		// of 4 weight rows (prefillBlock); the last two take the chunked
		// GEMM (gemm_amd64.go), with a short last chunk.
		out, in := shape[0], shape[1]
		data := make([]byte, 2*out*in)
		for i := 0; i < out*in; i++ {
			binary.LittleEndian.PutUint16(data[2*i:], uint16(math.Float32bits(rng.Float32()-0.5)>>16))
		}
		w, err := b.LoadWeight(&kernels.Weight{Name: "w", DType: kernels.BF16, Shape: []int{out, in}, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{2, 3, 7} {
			checkBatchRows(t, rng, b, w, rows)
		}
	}
}

// checkBatchRows checks that every row of a rows-row MatMul by w on random
// input gives the bits of that row's one-row MatMul.
func checkBatchRows(t *testing.T, rng *rand.Rand, b *Backend, w kernels.Tensor, rows int) {
	t.Helper()
	out, in := w.Weight().Rows(), w.Weight().Cols()
	xs := make([]float32, rows*in)
	for i := range xs {
		xs[i] = rng.Float32() - 0.5
	}
	x, dst := b.NewBuf(rows*in), b.NewBuf(rows*out)
	b.Write(x, 0, xs)
	b.MatMul(dst, x, w, rows)
	got := make([]float32, rows*out)
	b.Read(dst, 0, got)
	for r := range rows {
		x1, d1 := b.NewBuf(in), b.NewBuf(out)
		b.Write(x1, 0, xs[r*in:(r+1)*in])
		b.MatMul(d1, x1, w, 1)
		want := make([]float32, out)
		b.Read(d1, 0, want)
		for o := range out {
			if math.Float32bits(got[r*out+o]) != math.Float32bits(want[o]) {
				t.Fatalf("%s %d×%d, rows %d: row %d output %d is %v in the batch, %v alone",
					w.Weight().DType, out, in, rows, r, o, got[r*out+o], want[o])
			}
		}
	}
}

// TestAxpyBitIdentical: the AVX2 axpy (the attention's weighted sum of
// values) gives the portable loop's bits, tails included.
func TestAxpyBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 7, 8, 9, 64, 128, 131} {
		v := make([]float32, n)
		o1 := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32() - 0.5
			o1[i] = rng.Float32() - 0.5
		}
		o2 := append([]float32(nil), o1...)
		w := rng.Float32()
		axpy(o1, v, w)
		axpyGo(o2, v, w)
		for i := range o1 {
			if o1[i] != o2[i] {
				t.Fatalf("n=%d: element %d is %v, the loop gives %v", n, i, o1[i], o2[i])
			}
		}
	}
}

// TestFP8Kernels: the gathered FP8 E4M3 dot and row decode against the
// table loops (the row's values exact; NaN bytes left out of the dot).
func TestFP8Kernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 8, 15, 16, 17, 128, 1000} {
		row := make([]byte, n)
		x := make([]float32, n)
		for i := range row {
			row[i] = byte(rng.IntN(256))
			if row[i]&0x7f == 0x7f {
				row[i] &^= 1 // not NaN
			}
			x[i] = rng.Float32()*2 - 1
		}
		var want float32
		for i, v := range row {
			want += fp8Table[v] * x[i]
		}
		if got := fp8Dot(row, x); math.Abs(float64(got-want)) > 1e-4*math.Sqrt(float64(n))*max(1, math.Abs(float64(want))) {
			t.Errorf("n=%d: dot %v, table loop %v", n, got, want)
		}
		dst := make([]float32, n)
		fp8Row(row, dst, 0.375)
		for i, v := range row {
			if dst[i] != fp8Table[v]*0.375 {
				t.Fatalf("n=%d: row[%d] %v, want %v", n, i, dst[i], fp8Table[v]*0.375)
			}
		}
	}
}

func BenchmarkDotFP8(b *testing.B) {
	const n = 4096
	row := make([]byte, n)
	x := make([]float32, n)
	b.SetBytes(n)
	for b.Loop() {
		var s float32
		for lo := 0; lo < n; lo += 128 {
			s += fp8Dot(row[lo:lo+128], x[lo:lo+128])
		}
		_ = s
	}
}

// TestRowsKernelsBitIdentical: the attention's block kernels give the
// bits of a dotF32 and an axpy a row, at the head sizes models use and at
// ones that take the portable loops.
func TestRowsKernelsBitIdentical(t *testing.T) { forEachWidth(t, testRowsBitIdentical) }

func testRowsBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, d := range []int{64, 96, 128, 256} {
		for _, rows := range []int{1, 3, 4, 5, 7, 8, 16, 19} {
			const heads = 3
			stride := heads * d
			k := make([]float32, rows*stride)
			for i := range k {
				k[i] = rng.Float32() - 0.5
			}
			q := make([]float32, d)
			w := make([]float32, rows)
			for i := range q {
				q[i] = rng.Float32() - 0.5
			}
			for i := range w {
				w[i] = rng.Float32()
			}
			base := k[d:] // the second head's rows
			got := make([]float32, rows)
			dotRows(q, base, stride, got, 0.08838835)
			o1, o2 := make([]float32, d), make([]float32, d)
			for i := range o1 {
				o1[i] = rng.Float32()
				o2[i] = o1[i]
			}
			axpyRows(o1, base, stride, w)
			for j := range rows {
				if want := dotF32(q, base[j*stride:j*stride+d]) * 0.08838835; got[j] != want {
					t.Fatalf("d=%d rows=%d: dotRows[%d] %v, dotF32 %v", d, rows, j, got[j], want)
				}
				axpy(o2, base[j*stride:j*stride+d], w[j])
			}
			for i := range o1 {
				if o1[i] != o2[i] {
					t.Fatalf("d=%d rows=%d: axpyRows[%d] %v, axpy a row %v", d, rows, i, o1[i], o2[i])
				}
			}
		}
	}
}

// TestFP8DecodeExact: the AVX2 decode of E4M3 bytes gives the table's
// values bit for bit for all 256 bytes (NaN and ±0 included), through the
// row kernel at scale 1, and the dot of one-hot x picks each of them.
func TestFP8DecodeExact(t *testing.T) {
	row := make([]byte, 256)
	for i := range row {
		row[i] = byte(i)
	}
	dst := make([]float32, 256)
	fp8Row(row, dst, 1)
	for i, v := range dst {
		if math.Float32bits(v) != math.Float32bits(fp8Table[i]) {
			t.Errorf("byte %#02x: %#08x, table %#08x", i, math.Float32bits(v), math.Float32bits(fp8Table[i]))
		}
	}
	// The dot of one-hot x over the row without its NaNs (NaN·0 is NaN).
	row[0x7f], row[0xff] = 0, 0
	x := make([]float32, 256)
	for i := range row {
		if i&0x7f == 0x7f {
			continue
		}
		clear(x)
		x[i] = 1
		if got := fp8Dot(row, x); got != fp8Table[i] && !(got == 0 && fp8Table[i] == 0) {
			t.Errorf("byte %#02x: one-hot dot %v, table %v", i, got, fp8Table[i])
		}
	}
}

// TestFP8MatMulBatchInvariant: an FP8 E4M3 weight's one-row GEMV (a decode
// step: the rows dotted as they widen, fp8DotRow512, where the CPU and the
// widths allow) gives the bits of the same row in a batch (the rows
// decoded, then dot2x2 and dotF32): 128×128 scale blocks, a short last
// block (192, 320), widths of the portable path (100), every byte but NaN.
func TestFP8MatMulBatchInvariant(t *testing.T) { forEachWidth(t, testFP8MatMulBatchInvariant) }

func testFP8MatMulBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	b := New(2)
	for _, shape := range [][2]int{{5, 128}, {9, 192}, {3, 1024}, {130, 320}, {4, 100}} {
		out, in := shape[0], shape[1]
		data := make([]byte, out*in)
		for i := range data {
			if data[i] = byte(rng.IntN(256)); data[i]&0x7f == 0x7f {
				data[i] &^= 1 // not NaN
			}
		}
		nb := (in + 127) / 128
		scale := make([]float32, ((out+127)/128)*nb)
		for i := range scale {
			scale[i] = rng.Float32()*0.01 + 1e-4
		}
		w, err := b.LoadWeight(&kernels.Weight{Name: "w", DType: kernels.F8E4M3, Shape: []int{out, in}, Data: data,
			Scale: scale, ScaleBlock: [2]int{128, 128}})
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{2, 3} {
			checkBatchRows(t, rng, b, w, rows)
		}
	}
}
