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
	sc := int8(grp[q6kgScalesOff+16*g+8*n+2*k+l/16])
	d := kernels.F16ToF32(binary.LittleEndian.Uint16(grp[q6kgDOff+2*g:]))
	return d * float32(sc) * float32(q)
}

// TestQ6KGDecodesAsQ6K checks the regrouped layout against the file's:
// every element as the generic kernels decode it equals the CPU's Q6_K
// dequantization, and every lane's run of bytes as qmv's QT<Q6_KG> loads
// it is the run QT<Q6_K> loads from the stored block.
func TestQ6KGDecodesAsQ6K(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1024))
	const rows, cols = 3, 2048
	rb, _ := kernels.Q6_K.RowBytes(cols)
	src := make([]byte, rows*rb)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for o := 0; o < len(src); o += q6kBlock { // finite fp16 d
		binary.LittleEndian.PutUint16(src[o+208:], 0x1400+uint16(rng.IntN(0x800)))
	}
	dst := make([]byte, len(src))
	q6kgRegroup(dst, src)
	want := make([]float32, cols)
	for r := range rows {
		row, grow := src[r*rb:(r+1)*rb], dst[r*rb:(r+1)*rb]
		if err := quant.DequantizeRow(kernels.Q6_K, row, want); err != nil {
			t.Fatal(err)
		}
		for e := range cols {
			grp := grow[e/q6kgElems*q6kgBytes:]
			if got := q6kgElem(grp, e%q6kgElems); got != want[e] {
				t.Fatalf("row %d element %d: Q6_KG %v, Q6_K %v", r, e, got, want[e])
			}
		}
		for b := range cols / 256 {
			blk := row[b*q6kBlock:]
			grp, k := grow[b/4*q6kgBytes:], b%4
			q := grp[192*k:]
			for lane := range 8 {
				n, l8 := lane>>2, lane&3
				runs := [][2][]byte{
					{blk[64*n+8*l8:][:8], q[16*lane:][:8]},
					{blk[64*n+32+8*l8:][:8], q[16*lane+8:][:8]},
					{blk[128+32*n+8*l8:][:8], q[128+8*lane:][:8]},
					{blk[192+8*n:][:8], grp[q6kgScalesOff+16*k+8*n:][:8]},
					{blk[208:][:2], grp[q6kgDOff+2*k:][:2]},
				}
				for i, run := range runs {
					if !bytes.Equal(run[0], run[1]) {
						t.Fatalf("row %d block %d lane %d run %d: % x against % x", r, b, lane, i, run[1], run[0])
					}
				}
			}
		}
	}
}

// TestQ6KGTakes: only Q6_K matrices of whole groups are regrouped, and the
// layout's number is no file format.
func TestQ6KGTakes(t *testing.T) {
	if dtQ6KG.Valid() {
		t.Fatalf("Q6_KG's number %d is a file format's", dtQ6KG)
	}
	for _, c := range []struct {
		dt    kernels.DType
		shape []int
		want  bool
	}{
		{kernels.Q6_K, []int{4, 4096}, true},
		{kernels.Q6_K, []int{8, 4, 1024}, true},
		{kernels.Q6_K, []int{4, 3584}, false},
		{kernels.Q6_K, []int{4096}, false},
		{kernels.Q4_K, []int{4, 4096}, false},
	} {
		if got := q6kgTakes(&kernels.Weight{DType: c.dt, Shape: c.shape}); got != c.want {
			t.Errorf("%s %v: %v, want %v", c.dt, c.shape, got, c.want)
		}
	}
}
