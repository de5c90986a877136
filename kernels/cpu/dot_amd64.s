//go:build amd64

#include "textflag.h"

// DOT_BEGIN loads (w, x, n) into SI, DI, CX and zeroes the accumulators
// Y4..Y7; DOT_END returns their sum (the order every dot here uses, so
// that dot2F32AVX2's rows stay bit-identical to dotF32AVX2).
#define DOT_BEGIN(w, x) \
	MOVQ w+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ n+16(FP), CX \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

#define DOT_END DOT_END_AT(24)

// DOT_END_AT is DOT_END for a result at ret+off(FP).
#define DOT_END_AT(off) \
	DOT_SUM \
	VZEROUPPER \
	VMOVSS X4, ret+off(FP) \
	RET

// DOT_SUM leaves in X4 the sum of the accumulators Y4..Y7, in DOT_END's
// order.
#define DOT_SUM \
	VADDPS Y5, Y4, Y4 \
	VADDPS Y7, Y6, Y6 \
	VADDPS Y6, Y4, Y4 \
	VEXTRACTF128 $1, Y4, X1 \
	VADDPS X1, X4, X4 \
	VHADDPS X4, X4, X4 \
	VHADDPS X4, X4, X4

// DOT_F32_LOOP: the float32 row at DI dotted with SI over CX elements (a
// multiple of 32), into Y4..Y7.
#define DOT_F32_LOOP \
floop: \
	VMOVUPS (SI), Y0 \
	VMOVUPS 32(SI), Y1 \
	VMOVUPS 64(SI), Y2 \
	VMOVUPS 96(SI), Y3 \
	DOT_FMA4 \
	ADDQ $128, SI \
	ADDQ $128, DI \
	SUBQ $32, CX \
	JNZ floop

// DOT_FMA4: the four 8-lane products of Y0..Y3 with the 32 floats at DI.
#define DOT_FMA4 \
	VFMADD231PS (DI), Y0, Y4 \
	VFMADD231PS 32(DI), Y1, Y5 \
	VFMADD231PS 64(DI), Y2, Y6 \
	VFMADD231PS 96(DI), Y3, Y7

// func dotBF16AVX2(w *uint16, x *float32, n int) float32
// n must be a multiple of 32. bf16 widens to float32 by a 16-bit shift.
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	DOT_BEGIN(w, x)
loop:
	PREFETCHT0 1024(SI)
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPMOVZXWD 32(SI), Y2
	VPMOVZXWD 48(SI), Y3
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VPSLLD $16, Y2, Y2
	VPSLLD $16, Y3, Y3
	DOT_FMA4
	ADDQ $64, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ loop
	DOT_END

// func dotF32AVX2(a, b *float32, n int) float32
// n must be a multiple of 32.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	DOT_BEGIN(a, b)
	DOT_F32_LOOP
	DOT_END

// DOT2_LOOP(a, b): two rows' dots sharing each load of SI (CX elements,
// a multiple of 32): row a into Y4..Y7 and row b into Y8..Y11, four
// 8-lane accumulators each, as DOT_FMA4 does for one row (dot2F32AVX2
// and dotRowsF32AVX2).
#define DOT2_LOOP(a, b) \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11 \
dot2loop: \
	VMOVUPS (SI), Y0 \
	VMOVUPS 32(SI), Y1 \
	VMOVUPS 64(SI), Y2 \
	VMOVUPS 96(SI), Y3 \
	VFMADD231PS (a), Y0, Y4 \
	VFMADD231PS 32(a), Y1, Y5 \
	VFMADD231PS 64(a), Y2, Y6 \
	VFMADD231PS 96(a), Y3, Y7 \
	VFMADD231PS (b), Y0, Y8 \
	VFMADD231PS 32(b), Y1, Y9 \
	VFMADD231PS 64(b), Y2, Y10 \
	VFMADD231PS 96(b), Y3, Y11 \
	ADDQ $128, SI \
	ADDQ $128, a \
	ADDQ $128, b \
	SUBQ $32, CX \
	JNZ dot2loop

// func dot2F32AVX2(w, x0, x1 *float32, n int, out *[2]float32)
// Two dot products sharing each load of the weight row. Each row is
// accumulated exactly as dotF32AVX2 does it (four 8-lane accumulators over
// 32-element steps, the same reduction), so a row's result does not depend
// on how many rows the call had: prefill in one pass or in pieces, and
// decode, give bit-identical activations. n must be a multiple of 32.
TEXT ·dot2F32AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x0+8(FP), R8
	MOVQ x1+16(FP), R9
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DI
	DOT2_LOOP(R8, R9)
	VADDPS Y5, Y4, Y4
	VADDPS Y7, Y6, Y6
	VADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X1
	VADDPS X1, X4, X4
	VHADDPS X4, X4, X4
	VHADDPS X4, X4, X4
	VMOVSS X4, (DI)
	VADDPS Y9, Y8, Y8
	VADDPS Y11, Y10, Y10
	VADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X1
	VADDPS X1, X8, X8
	VHADDPS X8, X8, X8
	VHADDPS X8, X8, X8
	VMOVSS X8, 4(DI)
	VZEROUPPER
	RET

// func bf16ToF32AVX2(src *uint16, dst *float32, n int)
// n must be a multiple of 16.
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), CX
cvt:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ cvt
	VZEROUPPER
	RET

// func axpyF32AVX2(o, v *float32, w float32, n int)
// o[i] += w·v[i] for n (a multiple of 8) elements, the product rounded
// before the sum as the Go loop does (no FMA).
TEXT ·axpyF32AVX2(SB), NOSPLIT, $0-32
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), SI
	VBROADCASTSS w+16(FP), Y0
	MOVQ n+24(FP), CX
axpy:
	VMULPS (SI), Y0, Y1
	VADDPS (DI), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ axpy
	VZEROUPPER
	RET

// func dotF16AVX2(w *uint16, x *float32, n int) float32
// n must be a multiple of 32. f16 widens to float32 exactly by F16C.
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	DOT_BEGIN(w, x)
f16loop:
	PREFETCHT0 1024(SI)
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VCVTPH2PS 32(SI), Y2
	VCVTPH2PS 48(SI), Y3
	DOT_FMA4
	ADDQ $64, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ f16loop
	DOT_END

// func f16ToF32AVX2(src *uint16, dst *float32, n int)
// n must be a multiple of 16.
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), CX
f16cvt:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ f16cvt
	VZEROUPPER
	RET

// FP8 E4M3 bytes decode arithmetically, not by a gather from the table
// (VPGATHERDD is a loop of loads on many cores: on a Zen 3 host the
// gather form took 3449 ns a 4096-element row, the table lookups' time).
// The values are the table's, bit for bit (kernels.FP8E4M3Table, checked
// for all 256 bytes by TestFP8DecodeExact): with em = b & 0x7f,
//   em ≥ 8: the float32 with exponent field e+120 and mantissa m<<20,
//           i.e. (em<<20) + (120<<23);
//   em < 8: the subnormal m·2^-9 (and ±0), float32(em)·2^-9, exact;
// the sign bit from b & 0x80; em = 0x7f is the table's NaN (0x7fc00000,
// no sign).
DATA fp8Low7<>+0(SB)/4, $0x7f
GLOBL fp8Low7<>(SB), RODATA|NOPTR, $4
DATA fp8Sign<>+0(SB)/4, $0x80
GLOBL fp8Sign<>(SB), RODATA|NOPTR, $4
DATA fp8Bias<>+0(SB)/4, $0x3c000000
GLOBL fp8Bias<>(SB), RODATA|NOPTR, $4
DATA fp8Sub<>+0(SB)/4, $0x3b000000
GLOBL fp8Sub<>(SB), RODATA|NOPTR, $4
DATA fp8Eight<>+0(SB)/4, $8
GLOBL fp8Eight<>(SB), RODATA|NOPTR, $4
DATA fp8NaN<>+0(SB)/4, $0x7fc00000
GLOBL fp8NaN<>(SB), RODATA|NOPTR, $4

// FP8_CONSTS loads the decode's constants: Y15 = 0x7f, Y14 = 120<<23,
// Y13 = 2^-9, Y12 = 8, Y11 = 0x80, Y10 = the NaN.
#define FP8_CONSTS \
	VPBROADCASTD fp8Low7<>(SB), Y15 \
	VPBROADCASTD fp8Bias<>(SB), Y14 \
	VPBROADCASTD fp8Sub<>(SB), Y13 \
	VPBROADCASTD fp8Eight<>(SB), Y12 \
	VPBROADCASTD fp8Sign<>(SB), Y11 \
	VPBROADCASTD fp8NaN<>(SB), Y10

// FP8_DECODE: the eight E4M3 bytes at b(SI) as float32 in out (temps em,
// sg, sub, mask).
#define FP8_DECODE(b, out, em, sg, sub, mask) \
	VPMOVZXBD b(SI), sg \
	VPAND Y15, sg, em \
	VPAND Y11, sg, sg \
	VPSLLD $24, sg, sg \
	VPSLLD $20, em, out \
	VPADDD Y14, out, out \
	VCVTDQ2PS em, sub \
	VMULPS Y13, sub, sub \
	VPCMPGTD em, Y12, mask \
	VBLENDVPS mask, sub, out, out \
	VPOR sg, out, out \
	VPCMPEQD Y15, em, mask \
	VBLENDVPS mask, Y10, out, out

// func fp8DotAVX2(row *byte, x *float32, n int) float32
// Σ w[i]·x[i] for n (a multiple of 16) FP8 E4M3 bytes (w: their table
// values, FP8_DECODE), into Y4 and Y5; Y6 and Y7 serve as temporaries and
// are zero again for DOT_END, as they stayed in the gather form.
TEXT ·fp8DotAVX2(SB), NOSPLIT, $0-28
	DOT_BEGIN(row, x)
	FP8_CONSTS
fp8loop:
	PREFETCHT0 2048(SI)
	FP8_DECODE(0, Y8, Y0, Y2, Y6, Y1)
	FP8_DECODE(8, Y9, Y3, Y7, Y6, Y1)
	VFMADD231PS (DI), Y8, Y4
	VFMADD231PS 32(DI), Y9, Y5
	ADDQ $16, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ fp8loop
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	DOT_END

// func fp8RowAVX2(row *byte, dst *float32, n int, scale float32)
// dst[i] = w[i]·scale for n (a multiple of 8) bytes: the product rowTo
// forms.
TEXT ·fp8RowAVX2(SB), NOSPLIT, $0-28
	MOVQ row+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y5
	FP8_CONSTS
fp8row:
	PREFETCHT0 2048(SI)
	FP8_DECODE(0, Y6, Y0, Y2, Y3, Y1)
	VMULPS Y5, Y6, Y6
	VMOVUPS Y6, (DI)
	ADDQ $8, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ fp8row
	VZEROUPPER
	RET

// func dotRowsF32AVX2(q, k *float32, dk, stride, rows int, out *float32, scale float32)
// dotRowsF32x512 for AVX2 CPUs: out[j] = (q · k[j·stride:][:dk])·scale,
// each dot exactly as dotF32AVX2 computes it. Rows go two at a time,
// sharing each load of q; their reductions run side by side in the two
// 128-bit halves (DOT_END's tree, lane for lane). dk must be a multiple
// of 32; stride is in floats.
TEXT ·dotRowsF32AVX2(SB), NOSPLIT, $0-52
	VBROADCASTSS scale+48(FP), X15
	MOVQ q+0(FP), R8
	MOVQ k+8(FP), R9
	MOVQ dk+16(FP), R10
	MOVQ stride+24(FP), R11
	SHLQ $2, R11
	MOVQ rows+32(FP), R12
	MOVQ out+40(FP), R13
	CMPQ R12, $2
	JLT rows2left
pairloop:
	MOVQ R8, SI
	MOVQ R9, DI
	LEAQ (R9)(R11*1), AX
	MOVQ R10, CX
	DOT2_LOOP(DI, AX)
	// Each row's accumulators as DOT_END adds them, then its halves
	// (low + high 128 bits) for both rows in one add.
	VADDPS Y5, Y4, Y4
	VADDPS Y7, Y6, Y6
	VADDPS Y6, Y4, Y4
	VADDPS Y9, Y8, Y8
	VADDPS Y11, Y10, Y10
	VADDPS Y10, Y8, Y8
	VPERM2F128 $0x20, Y8, Y4, Y0 // low halves: row 0 | row 1
	VPERM2F128 $0x31, Y8, Y4, Y1 // high halves
	VADDPS Y1, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VMULPS X15, X0, X2
	VMOVSS X2, (R13)
	VEXTRACTF128 $1, Y0, X1
	VMULSS X15, X1, X1
	VMOVSS X1, 4(R13)
	ADDQ $8, R13
	LEAQ (R9)(R11*2), R9
	SUBQ $2, R12
	CMPQ R12, $2
	JGE pairloop
rows2left:
	TESTQ R12, R12
	JZ rows2done
	MOVQ R8, SI
	MOVQ R9, DI
	MOVQ R10, CX
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	DOT_F32_LOOP
	DOT_SUM
	VMULSS X15, X4, X4
	VMOVSS X4, (R13)
rows2done:
	VZEROUPPER
	RET

// func axpyRowsF32AVX2(o, v *float32, dv, stride, rows int, w *float32)
// o += w[j]·v[j·stride : j·stride+dv] for j in order, each product
// rounded before its sum as axpyF32AVX2 does, with 64 floats of o held
// in registers across the rows: the same bits as rows calls of axpy. dv
// must be a multiple of 64.
TEXT ·axpyRowsF32AVX2(SB), NOSPLIT, $0-48
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), R9
	MOVQ dv+16(FP), R10
	MOVQ stride+24(FP), R11
	SHLQ $2, R11
	MOVQ rows+32(FP), R12
	MOVQ w+40(FP), R13
chunk2:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	MOVQ R9, SI
	MOVQ R13, DX
	MOVQ R12, CX
row2:
	VBROADCASTSS (DX), Y8
	VMULPS (SI), Y8, Y9
	VADDPS Y9, Y0, Y0
	VMULPS 32(SI), Y8, Y9
	VADDPS Y9, Y1, Y1
	VMULPS 64(SI), Y8, Y9
	VADDPS Y9, Y2, Y2
	VMULPS 96(SI), Y8, Y9
	VADDPS Y9, Y3, Y3
	VMULPS 128(SI), Y8, Y9
	VADDPS Y9, Y4, Y4
	VMULPS 160(SI), Y8, Y9
	VADDPS Y9, Y5, Y5
	VMULPS 192(SI), Y8, Y9
	VADDPS Y9, Y6, Y6
	VMULPS 224(SI), Y8, Y9
	VADDPS Y9, Y7, Y7
	ADDQ R11, SI
	ADDQ $4, DX
	DECQ CX
	JNZ row2
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ $256, DI
	ADDQ $256, R9
	SUBQ $64, R10
	JNZ chunk2
	VZEROUPPER
	RET

// func fp8DotRowAVX2(row *byte, x *float32, n int, scales *float32, bi int) float32
// dotF32AVX2 of the row fp8RowAVX2 would decode (block b of bi columns
// times scales[b]), bit for bit, without storing it (fp8DotRow512's AVX2
// form): each accumulator takes its eight lanes of a 32-element step in
// dotF32AVX2's order, so the four decodes can go one after another
// through the same registers. n and bi multiples of 32 (a last block may
// be shorter).
TEXT ·fp8DotRowAVX2(SB), NOSPLIT, $0-44
	MOVQ row+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ scales+24(FP), R8
	MOVQ bi+32(FP), R9
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	FP8_CONSTS
fdablock:
	VBROADCASTSS (R8), Y9
	MOVQ R9, DX
	CMPQ DX, CX
	CMOVQGT CX, DX
fdaloop:
	PREFETCHT0 2048(SI)
	FP8_DECODE(0, Y0, Y1, Y2, Y3, Y8)
	VMULPS Y9, Y0, Y0
	VFMADD231PS (DI), Y0, Y4
	FP8_DECODE(8, Y0, Y1, Y2, Y3, Y8)
	VMULPS Y9, Y0, Y0
	VFMADD231PS 32(DI), Y0, Y5
	FP8_DECODE(16, Y0, Y1, Y2, Y3, Y8)
	VMULPS Y9, Y0, Y0
	VFMADD231PS 64(DI), Y0, Y6
	FP8_DECODE(24, Y0, Y1, Y2, Y3, Y8)
	VMULPS Y9, Y0, Y0
	VFMADD231PS 96(DI), Y0, Y7
	ADDQ $32, SI
	ADDQ $128, DI
	SUBQ $32, CX
	SUBQ $32, DX
	JNZ fdaloop
	ADDQ $4, R8
	TESTQ CX, CX
	JNZ fdablock
	DOT_END_AT(40)
