//go:build amd64

package quant

import "golang.org/x/sys/cpu"

// The CPU decode GEMV of a GGUF model is these row dot products, and the
// scalar Go ones decode a weight at a time: a Qwen3-0.6B-shaped Q4_K_M ran
// at 6 tok/s on two cores, 5% of what its bytes allow. The K-quants that
// Q4_K_M consists of (Q4_K, and Q6_K for the LM head and some down
// projections) get AVX2+FMA loops (kdot_amd64.s). The Go side unpacks each
// block's packed scales into floats first — the same products the scalar
// decoders form (d·s and dmin·m for Q4_K, d·scale for Q6_K) — so the
// assembly forms every weight exactly as they do, eight at a time, and
// only the order of the sums differs.
var haveKDot = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func q4kDotAVX2(row *byte, x *float32, sc *float32, nb int) float32

//go:noescape
func q6kDotAVX2(row *byte, x *float32, sc *float32, nb int) float32

// kdotChunk is the blocks one assembly call covers: the scale floats of
// a chunk live on the stack.
const kdotChunk = 32

// dotQ4KFast is dotQ4K on AVX2, false where there is none.
func dotQ4KFast(row []byte, x []float32) (float32, bool) {
	if !haveKDot {
		return 0, false
	}
	var sc [kdotChunk * 16]float32
	var total float32
	nb := len(row) / 144
	for b0 := 0; b0 < nb; b0 += kdotChunk {
		n := min(kdotChunk, nb-b0)
		for i := range n {
			blk := row[(b0+i)*144 : (b0+i+1)*144 : (b0+i+1)*144]
			d, dmin := f16at(blk), f16at(blk[2:])
			s := sc[16*i : 16*i+16 : 16*i+16]
			for k := range 8 {
				sk, mk := scaleMinK4(k, blk[4:16])
				s[k], s[8+k] = d*float32(sk), dmin*float32(mk)
			}
		}
		total += q4kDotAVX2(&row[b0*144], &x[b0*256], &sc[0], n)
	}
	return total, true
}

// dotQ6KFast is dotQ6K on AVX2, false where there is none.
func dotQ6KFast(row []byte, x []float32) (float32, bool) {
	if !haveKDot {
		return 0, false
	}
	var sc [kdotChunk * 16]float32
	var total float32
	nb := len(row) / 210
	for b0 := 0; b0 < nb; b0 += kdotChunk {
		n := min(kdotChunk, nb-b0)
		for i := range n {
			blk := row[(b0+i)*210 : (b0+i+1)*210 : (b0+i+1)*210]
			d := f16at(blk[208:])
			for k := range 16 {
				sc[16*i+k] = d * float32(int8(blk[192+k]))
			}
		}
		total += q6kDotAVX2(&row[b0*210], &x[b0*256], &sc[0], n)
	}
	return total, true
}
