package cuda

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/quant"
)

// q6kgElem decodes element e of a Q6_KG group as quant_blocks.cuh's
// sub32<Q6_KG> addresses it (sub-block e/32 of the group).
func q6kgElem(grp []byte, e int) float32 {
	s, l := e/32, e%32
	g, n, k := s>>3, (s>>2)&1, s&3
	ql := grp[192*g+64*n+16*(l/8)+8*(k&1)+l%8]
	qh := grp[192*g+128+32*n+l]
	q := int((ql>>(4*(k>>1)))&15|((qh>>(2*k))&3)<<4) - 32
	sc := int8(grp[768+16*g+8*n+2*k+l/16])
	d := kernels.F16ToF32(binary.LittleEndian.Uint16(grp[832+2*g:]))
	return d * float32(sc) * float32(q)
}

// q80gElem decodes element e of a Q8_0G group as sub32<Q8_0G> does.
func q80gElem(grp []byte, e int) float32 {
	d := kernels.F16ToF32(binary.LittleEndian.Uint16(grp[256+2*(e/32):]))
	return d * float32(int8(grp[e]))
}

// q4kgElem decodes element e of a Q4_KG group as sub32<Q4_KG> does, in
// the CPU dequantizer's order of products.
func q4kgElem(grp []byte, e int) float32 {
	s, l := e/32, e%32
	k, ss := s>>3, s&7
	hd := grp[16*k:]
	d := kernels.F16ToF32(binary.LittleEndian.Uint16(hd))
	dmin := kernels.F16ToF32(binary.LittleEndian.Uint16(hd[2:]))
	sb := hd[4:16]
	var sc, m byte
	if ss < 4 {
		sc, m = sb[ss]&63, sb[ss+4]&63
	} else {
		sc, m = sb[ss+4]&0xF|(sb[ss-4]>>6)<<4, sb[ss+4]>>4|(sb[ss]>>6)<<4
	}
	q := (grp[128+128*k+32*(ss>>1)+l] >> (4 * (ss & 1))) & 15
	return d*float32(sc)*float32(q) - dmin*float32(m)
}

// randomRows are rows of dt's blocks with random bytes and finite fp16
// scales at the offsets named.
func randomRows(rng *rand.Rand, dt kernels.DType, rows, cols int, f16At []int) []byte {
	rb, _ := dt.RowBytes(cols)
	src := make([]byte, rows*rb)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for o := 0; o < len(src); o += dt.BlockBytes() {
		for _, at := range f16At {
			binary.LittleEndian.PutUint16(src[o+at:], 0x1400+uint16(rng.IntN(0x800)))
		}
	}
	return src
}

// TestRegroupDecodesAsStored checks each regrouped layout against the
// file's: every element as the generic kernels decode it equals the CPU's
// dequantization of the stored bytes.
func TestRegroupDecodesAsStored(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1024))
	for _, c := range []struct {
		dt    kernels.DType
		f16At []int
		elem  func([]byte, int) float32
	}{{kernels.Q6_K, []int{208}, q6kgElem}, {kernels.Q8_0, []int{0}, q80gElem}, {kernels.Q4_K, []int{0, 2}, q4kgElem}} {
		const rows, cols = 3, 2048
		src := randomRows(rng, c.dt, rows, cols, c.f16At)
		r, ok := regroupFor(&kernels.Weight{DType: c.dt, Shape: []int{rows, cols}})
		if !ok {
			t.Fatalf("%s: no regrouped layout", c.dt)
		}
		dst := make([]byte, len(src))
		r.regroupRows(dst, src)
		rb := len(src) / rows
		want := make([]float32, cols)
		for row := range rows {
			if err := quant.DequantizeRow(c.dt, src[row*rb:(row+1)*rb], want); err != nil {
				t.Fatal(err)
			}
			for e := range cols {
				grp := dst[row*rb+e/r.elems*r.bytes:]
				if got := c.elem(grp, e%r.elems); got != want[e] {
					t.Fatalf("%s row %d element %d: regrouped %v, stored %v", c.dt, row, e, got, want[e])
				}
			}
		}
	}
}

// TestQmvLanes: every run of bytes that qmv's lanes load from a regrouped
// row (QT<Q6_KG>::ldW, QT<Q8_0G>::ldW, qdotQ4K<G = true>'s load) is the
// run the stored format's loads read (QT<Q6_K>, QT<Q8_0>, qdotQ4K<false>).
func TestQmvLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1024))
	const cols = 4096
	for _, c := range []struct {
		dt    kernels.DType
		f16At []int
		// runs lists, for 256-element block b and lane j (0..7) of it,
		// pairs of (offset, length) into the stored row and the regrouped one.
		runs func(b, j int) [][3]int
	}{
		{kernels.Q6_K, []int{208}, func(b, j int) [][3]int {
			st, g, k := b*q6kBlock, b/4*4*q6kBlock, b%4
			n, l8 := j>>2, j&3
			return [][3]int{
				{st + 64*n + 8*l8, g + 192*k + 16*j, 8},
				{st + 64*n + 32 + 8*l8, g + 192*k + 16*j + 8, 8},
				{st + 128 + 32*n + 8*l8, g + 192*k + 128 + 8*j, 8},
				{st + 192 + 8*n, g + 768 + 16*k + 8*n, 8},
				{st + 208, g + 832 + 2*k, 2},
			}
		}},
		{kernels.Q8_0, []int{0}, func(b, j int) [][3]int {
			st, g := (8*b+j)*q80Block, b*8*q80Block
			return [][3]int{{st + 2, g + 32*j, 32}, {st, g + 256 + 2*j, 2}}
		}},
		{kernels.Q4_K, []int{0, 2}, func(b, j int) [][3]int {
			st, g, k := b*q4kBlock, b/8*8*q4kBlock, b%8
			return [][3]int{{st + 16 + 16*j, g + 128 + 128*k + 16*j, 16}, {st, g + 16*k, 16}}
		}},
	} {
		src := randomRows(rng, c.dt, 1, cols, c.f16At)
		r, _ := regroupFor(&kernels.Weight{DType: c.dt, Shape: []int{1, cols}})
		dst := make([]byte, len(src))
		r.regroupRows(dst, src)
		for b := range cols / 256 {
			for j := range 8 {
				for i, run := range c.runs(b, j) {
					if !bytes.Equal(src[run[0]:run[0]+run[2]], dst[run[1]:run[1]+run[2]]) {
						t.Fatalf("%s block %d lane %d run %d differs", c.dt, b, j, i)
					}
				}
			}
		}
	}
}

// TestRegroupFor: only matrices of whole groups are regrouped, and the
// layouts' numbers are no file format's.
func TestRegroupFor(t *testing.T) {
	for _, r := range regroups {
		if r.dev.Valid() {
			t.Fatalf("%s's regrouped number %d is a file format's", r.file, r.dev)
		}
		if rb, _ := r.file.RowBytes(r.elems); rb != r.bytes {
			t.Fatalf("%s: a group of %d elements is %d bytes, not %d", r.file, r.elems, rb, r.bytes)
		}
	}
	for _, c := range []struct {
		dt    kernels.DType
		shape []int
		want  kernels.DType
	}{
		{kernels.Q6_K, []int{4, 4096}, dtQ6KG},
		{kernels.Q6_K, []int{8, 4, 1024}, dtQ6KG},
		{kernels.Q6_K, []int{4, 3584}, 0},
		{kernels.Q6_K, []int{4096}, 0},
		{kernels.Q8_0, []int{4, 3584}, dtQ80G},
		{kernels.Q8_0, []int{4, 96}, 0},
		{kernels.Q4_K, []int{4, 4096}, dtQ4KG},
		{kernels.Q4_K, []int{4, 5120}, 0},
		{kernels.Q5_K, []int{4, 4096}, 0},
	} {
		r, ok := regroupFor(&kernels.Weight{DType: c.dt, Shape: c.shape})
		if got := r.dev; ok != (c.want != 0) || got != c.want {
			t.Errorf("%s %v: %v %v, want %v", c.dt, c.shape, got, ok, c.want)
		}
	}
}

func TestRegroupSwitch(t *testing.T) {
	for _, c := range []struct {
		v    string
		kept []kernels.DType
	}{
		{"", nil},
		{"0", []kernels.DType{kernels.Q4_K, kernels.Q6_K, kernels.Q8_0}},
		{"q4_k", []kernels.DType{kernels.Q6_K, kernels.Q8_0}},
		{"Q6_K, q8_0", []kernels.DType{kernels.Q4_K}},
	} {
		got := regroupSwitch(c.v)
		if len(got) != len(c.kept) {
			t.Errorf("%q: %v, want %v", c.v, got, c.kept)
		}
		for _, d := range c.kept {
			if !got[d] {
				t.Errorf("%q: %v, want %v", c.v, got, c.kept)
			}
		}
	}
}

// TestRegroupParallel: the parallel regrouping is the serial one.
func TestRegroupParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for _, r := range regroups {
		for _, groups := range []int{1, 255, 1000, 4099} {
			src := make([]byte, groups*r.bytes)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			want, got := make([]byte, len(src)), make([]byte, len(src))
			r.regroupRows(want, src)
			r.regroupParallel(got, src)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, %d groups: the parallel regrouping differs", r.file, groups)
			}
		}
	}
}

func TestParallelCopy(t *testing.T) {
	for _, n := range []int{0, 1, 1 << 20, 5<<20 + 3} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		dst := make([]byte, n)
		parallelCopy(dst, src)
		if !bytes.Equal(dst, src) {
			t.Fatalf("%d bytes: the copy differs", n)
		}
	}
}
