//go:build amd64

#include "textflag.h"

// AVX-512 forms of dot_amd64.s's float dots, for CPUs with 512-bit units
// (Zen 5: twice the AVX2 loop's work a cycle). All of them accumulate the
// same way (four 16-lane accumulators over 64-element steps, one
// reduction), so dot2F32x512's rows stay bit-identical to dotF32x512 and
// the widening dots (bf16, f16) to dotF32x512 over the widened row: a
// prefill (rows widened, dot2) computes what a decode step (dotBF16)
// computes. dot_amd64.go picks them for whole 64-element steps.

#define DOT512_BEGIN(w, x) \
	MOVQ w+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ n+16(FP), CX \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7

// DOT512_SUM reduces Z4..Z7 (acc a..a+3) into Xa's low lane.
#define DOT512_SUM(z0, z1, z2, z3, y0, x0) \
	VADDPS z1, z0, z0 \
	VADDPS z3, z2, z2 \
	VADDPS z2, z0, z0 \
	VEXTRACTF64X4 $1, z0, Y1 \
	VADDPS Y1, y0, y0 \
	VEXTRACTF128 $1, y0, X1 \
	VADDPS X1, x0, x0 \
	VHADDPS x0, x0, x0 \
	VHADDPS x0, x0, x0

#define DOT512_END \
	DOT512_SUM(Z4, Z5, Z6, Z7, Y4, X4) \
	VZEROUPPER \
	VMOVSS X4, ret+24(FP) \
	RET

// DOT512_FMA4: the four 16-lane products of Z0..Z3 with the 64 floats at DI.
#define DOT512_FMA4 \
	VFMADD231PS (DI), Z0, Z4 \
	VFMADD231PS 64(DI), Z1, Z5 \
	VFMADD231PS 128(DI), Z2, Z6 \
	VFMADD231PS 192(DI), Z3, Z7

// func dotF32x512(a, b *float32, n int) float32
// n must be a multiple of 64.
TEXT ·dotF32x512(SB), NOSPLIT, $0-28
	DOT512_BEGIN(a, b)
floop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	DOT512_FMA4
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $64, CX
	JNZ floop
	DOT512_END

// func dotBF16x512(w *uint16, x *float32, n int) float32
// n must be a multiple of 64. bf16 widens to float32 by a 16-bit shift.
TEXT ·dotBF16x512(SB), NOSPLIT, $0-28
	DOT512_BEGIN(w, x)
bloop:
	PREFETCHT0 1024(SI)
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPMOVZXWD 64(SI), Z2
	VPMOVZXWD 96(SI), Z3
	VPSLLD $16, Z0, Z0
	VPSLLD $16, Z1, Z1
	VPSLLD $16, Z2, Z2
	VPSLLD $16, Z3, Z3
	DOT512_FMA4
	ADDQ $128, SI
	ADDQ $256, DI
	SUBQ $64, CX
	JNZ bloop
	DOT512_END

// func dotF16x512(w *uint16, x *float32, n int) float32
// n must be a multiple of 64. f16 widens to float32 exactly.
TEXT ·dotF16x512(SB), NOSPLIT, $0-28
	DOT512_BEGIN(w, x)
hloop:
	PREFETCHT0 1024(SI)
	VCVTPH2PS (SI), Z0
	VCVTPH2PS 32(SI), Z1
	VCVTPH2PS 64(SI), Z2
	VCVTPH2PS 96(SI), Z3
	DOT512_FMA4
	ADDQ $128, SI
	ADDQ $256, DI
	SUBQ $64, CX
	JNZ hloop
	DOT512_END

// func dot2F32x512(w, x0, x1 *float32, n int, out *[2]float32)
// Two dot products sharing each load of the weight row, each accumulated
// as dotF32x512 does. n must be a multiple of 64.
TEXT ·dot2F32x512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x0+8(FP), R8
	MOVQ x1+16(FP), R9
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DI
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
loop2:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VFMADD231PS (R8), Z0, Z4
	VFMADD231PS 64(R8), Z1, Z5
	VFMADD231PS 128(R8), Z2, Z6
	VFMADD231PS 192(R8), Z3, Z7
	VFMADD231PS (R9), Z0, Z8
	VFMADD231PS 64(R9), Z1, Z9
	VFMADD231PS 128(R9), Z2, Z10
	VFMADD231PS 192(R9), Z3, Z11
	ADDQ $256, SI
	ADDQ $256, R8
	ADDQ $256, R9
	SUBQ $64, CX
	JNZ loop2
	DOT512_SUM(Z4, Z5, Z6, Z7, Y4, X4)
	VMOVSS X4, (DI)
	DOT512_SUM(Z8, Z9, Z10, Z11, Y8, X8)
	VMOVSS X8, 4(DI)
	VZEROUPPER
	RET

// The shared parts of dotRowsF32x512 and dotRowsF16x512 (and of the two
// axpyRows loops), which differ only in how a row's values are loaded.
//
// DOTROWS_QUAD_BEGIN: q at R8, four rows from R9 (R11 bytes apart) in
// DI, AX, BX, DX, dk in CX, the sixteen accumulators Z4..Z19 zeroed.
#define DOTROWS_QUAD_BEGIN \
	MOVQ R8, SI \
	MOVQ R9, DI \
	LEAQ (R9)(R11*1), AX \
	LEAQ (AX)(R11*1), BX \
	LEAQ (BX)(R11*1), DX \
	MOVQ R10, CX \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15 \
	VPXORD Z16, Z16, Z16 \
	VPXORD Z17, Z17, Z17 \
	VPXORD Z18, Z18, Z18 \
	VPXORD Z19, Z19, Z19

// DOTROWS_QUAD_END: the four rows' sums from Z4..Z19, each reduced as
// DOT512_SUM would: the accumulators as (a0+a1)+(a2+a3); low 256 bits
// plus high (rows 0|1 in Z20, rows 2|3 in Z22); low 128 bits plus high
// (a 128-bit lane a row, in Z23); VHADDPS twice, (x0+x1)+(x2+x3) in each
// lane's first float. Then scaled by X26 and stored at R13.
#define DOTROWS_QUAD_END \
	VADDPS Z5, Z4, Z4 \
	VADDPS Z7, Z6, Z6 \
	VADDPS Z6, Z4, Z4 \
	VADDPS Z9, Z8, Z8 \
	VADDPS Z11, Z10, Z10 \
	VADDPS Z10, Z8, Z8 \
	VADDPS Z13, Z12, Z12 \
	VADDPS Z15, Z14, Z14 \
	VADDPS Z14, Z12, Z12 \
	VADDPS Z17, Z16, Z16 \
	VADDPS Z19, Z18, Z18 \
	VADDPS Z18, Z16, Z16 \
	VSHUFF64X2 $0x44, Z8, Z4, Z20 \
	VSHUFF64X2 $0xEE, Z8, Z4, Z21 \
	VADDPS Z21, Z20, Z20 \
	VSHUFF64X2 $0x44, Z16, Z12, Z22 \
	VSHUFF64X2 $0xEE, Z16, Z12, Z21 \
	VADDPS Z21, Z22, Z22 \
	VSHUFF32X4 $0x88, Z22, Z20, Z23 \
	VSHUFF32X4 $0xDD, Z22, Z20, Z24 \
	VADDPS Z24, Z23, Z23 \
	VPERMILPS $0xB1, Z23, Z24 \
	VADDPS Z24, Z23, Z23 \
	VPERMILPS $0x4E, Z23, Z24 \
	VADDPS Z24, Z23, Z23 \
	VCOMPRESSPS Z23, K2, Z24 \
	VMULPS X26, X24, X24 \
	VMOVUPS X24, (R13)

// DOTROWS_ROW_BEGIN: one row (R9) against q (R8), dk in CX, the
// accumulators Z4..Z7 zeroed.
#define DOTROWS_ROW_BEGIN \
	MOVQ R8, SI \
	MOVQ R9, DI \
	MOVQ R10, CX \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7

// AXPY512_LOAD_O: 128 floats of o (DI) into Z0..Z7; AXPY512_STORE_O
// puts them back.
#define AXPY512_LOAD_O \
	VMOVUPS (DI), Z0 \
	VMOVUPS 64(DI), Z1 \
	VMOVUPS 128(DI), Z2 \
	VMOVUPS 192(DI), Z3 \
	VMOVUPS 256(DI), Z4 \
	VMOVUPS 320(DI), Z5 \
	VMOVUPS 384(DI), Z6 \
	VMOVUPS 448(DI), Z7

#define AXPY512_STORE_O \
	VMOVUPS Z0, (DI) \
	VMOVUPS Z1, 64(DI) \
	VMOVUPS Z2, 128(DI) \
	VMOVUPS Z3, 192(DI) \
	VMOVUPS Z4, 256(DI) \
	VMOVUPS Z5, 320(DI) \
	VMOVUPS Z6, 384(DI) \
	VMOVUPS Z7, 448(DI)

// DOT512_ACC4(k, a): the four 16-lane products of Z0..Z3 with the 64
// floats at k, into Z(a)..Z(a+3).
#define DOT512_ACC4(k, a0, a1, a2, a3) \
	VFMADD231PS (k), Z0, a0 \
	VFMADD231PS 64(k), Z1, a1 \
	VFMADD231PS 128(k), Z2, a2 \
	VFMADD231PS 192(k), Z3, a3

// func dotRowsF32x512(q, k *float32, dk, stride, rows int, out *float32, scale float32)
// out[j] = (q · k[j·stride : j·stride+dk])·scale for j < rows, the dot
// exactly as dotF32x512 computes it (the attention's scores over a KV
// block, without a call a position). dk must be a multiple of 64; stride
// is in floats.
//
// Rows go four at a time: a load of q serves four rows, and the four
// reductions run as one. DOT512_SUM's tree (halves of 256, then of 128
// bits, then two pairwise adds) is kept lane for lane, with the four
// rows' vectors shuffled side by side, so each result has dotF32x512's
// bits; a reduction a row was as much work as its 128-element dot.
// DOTROWS512(acc4, fma4, step) is the body of dotRowsF32x512 and
// dotRowsF16x512 after their arguments are loaded (q in R8, k in R9, dk in
// R10, the stride in bytes in R11, rows in R12, out in R13, the scale in
// X26): the two differ only in the row elements' size. acc4 and fma4 load
// and multiply 64 of a row's elements (DOT512_ACC4 and DOT512_FMA4, or
// their float16 forms) and step is those 64 elements' bytes. K2 holds
// lanes 0, 4, 8 and 12: a row's sum each. Labels are local to a TEXT
// block, so both bodies use the same ones. (The arguments stay outside
// the macro: vet's asmdecl checks them where they are written.)
#define DOTROWS512(acc4, fma4, step) \
	MOVL $0x1111, AX \
	KMOVW AX, K2 \
	CMPQ R12, $4 \
	JLT rowsleft \
quadloop: \
	DOTROWS_QUAD_BEGIN \
qloop: \
	VMOVUPS (SI), Z0 \
	VMOVUPS 64(SI), Z1 \
	VMOVUPS 128(SI), Z2 \
	VMOVUPS 192(SI), Z3 \
	acc4(DI, Z4, Z5, Z6, Z7) \
	acc4(AX, Z8, Z9, Z10, Z11) \
	acc4(BX, Z12, Z13, Z14, Z15) \
	acc4(DX, Z16, Z17, Z18, Z19) \
	ADDQ $256, SI \
	ADDQ step, DI \
	ADDQ step, AX \
	ADDQ step, BX \
	ADDQ step, DX \
	SUBQ $64, CX \
	JNZ qloop \
	DOTROWS_QUAD_END \
	ADDQ $16, R13 \
	LEAQ (R9)(R11*4), R9 \
	SUBQ $4, R12 \
	CMPQ R12, $4 \
	JGE quadloop \
rowsleft: \
	TESTQ R12, R12 \
	JZ rowsdone \
rowloop: \
	DOTROWS_ROW_BEGIN \
rloop: \
	VMOVUPS (SI), Z0 \
	VMOVUPS 64(SI), Z1 \
	VMOVUPS 128(SI), Z2 \
	VMOVUPS 192(SI), Z3 \
	fma4 \
	ADDQ $256, SI \
	ADDQ step, DI \
	SUBQ $64, CX \
	JNZ rloop \
	DOT512_SUM(Z4, Z5, Z6, Z7, Y4, X4) \
	VMULSS X26, X4, X4 \
	VMOVSS X4, (R13) \
	ADDQ $4, R13 \
	ADDQ R11, R9 \
	DECQ R12 \
	JNZ rowloop \
rowsdone: \
	VZEROUPPER \
	RET

TEXT ·dotRowsF32x512(SB), NOSPLIT, $0-52
	VBROADCASTSS scale+48(FP), X26
	MOVQ q+0(FP), R8
	MOVQ k+8(FP), R9
	MOVQ dk+16(FP), R10
	MOVQ stride+24(FP), R11
	SHLQ $2, R11
	MOVQ rows+32(FP), R12
	MOVQ out+40(FP), R13
	DOTROWS512(DOT512_ACC4, DOT512_FMA4, $256)

// func axpyRowsF32x512(o, v *float32, dv, stride, rows int, w *float32)
// o += w[j]·v[j·stride : j·stride+dv] for j = 0..rows-1 in order, each
// product rounded before its sum as axpy does, with o held in registers
// 128 floats at a time: the same bits as rows calls of axpy. dv must be
// a multiple of 128.
TEXT ·axpyRowsF32x512(SB), NOSPLIT, $0-48
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), R9
	MOVQ dv+16(FP), R10
	MOVQ stride+24(FP), R11
	SHLQ $2, R11
	MOVQ rows+32(FP), R12
	MOVQ w+40(FP), R13
colloop:
	AXPY512_LOAD_O
	MOVQ R9, SI
	MOVQ R13, DX
	MOVQ R12, CX
vloop:
	VBROADCASTSS (DX), Z15
	VMULPS (SI), Z15, Z8
	VADDPS Z8, Z0, Z0
	VMULPS 64(SI), Z15, Z9
	VADDPS Z9, Z1, Z1
	VMULPS 128(SI), Z15, Z10
	VADDPS Z10, Z2, Z2
	VMULPS 192(SI), Z15, Z11
	VADDPS Z11, Z3, Z3
	VMULPS 256(SI), Z15, Z8
	VADDPS Z8, Z4, Z4
	VMULPS 320(SI), Z15, Z9
	VADDPS Z9, Z5, Z5
	VMULPS 384(SI), Z15, Z10
	VADDPS Z10, Z6, Z6
	VMULPS 448(SI), Z15, Z11
	VADDPS Z11, Z7, Z7
	ADDQ $4, DX
	ADDQ R11, SI
	DECQ CX
	JNZ vloop
	AXPY512_STORE_O
	ADDQ $512, DI
	ADDQ $512, R9
	SUBQ $128, R10
	JNZ colloop
	VZEROUPPER
	RET

#define DOT2X2_OUT(a, b, c, d, off) \
	VMOVAPS a, Z4 \
	VMOVAPS b, Z5 \
	VMOVAPS c, Z6 \
	VMOVAPS d, Z7 \
	DOT512_SUM(Z4, Z5, Z6, Z7, Y4, X4) \
	VMOVSS X4, off(DI)

// DOT2X2_ACC_LOOP: the 2×2 tile's loop over n (CX) floats, w0 at SI, w1
// at R10, x0 at R8, x1 at R9, the accumulators in Z16..Z31 (label lbl).
#define DOT2X2_ACC_LOOP(lbl) \
lbl: \
	VMOVUPS (R8), Z0 \
	VMOVUPS 64(R8), Z1 \
	VMOVUPS 128(R8), Z2 \
	VMOVUPS 192(R8), Z3 \
	VMOVUPS (R9), Z4 \
	VMOVUPS 64(R9), Z5 \
	VMOVUPS 128(R9), Z6 \
	VMOVUPS 192(R9), Z7 \
	VMOVUPS (SI), Z8 \
	VMOVUPS 64(SI), Z9 \
	VMOVUPS 128(SI), Z10 \
	VMOVUPS 192(SI), Z11 \
	VFMADD231PS Z0, Z8, Z16 \
	VFMADD231PS Z1, Z9, Z17 \
	VFMADD231PS Z2, Z10, Z18 \
	VFMADD231PS Z3, Z11, Z19 \
	VFMADD231PS Z4, Z8, Z20 \
	VFMADD231PS Z5, Z9, Z21 \
	VFMADD231PS Z6, Z10, Z22 \
	VFMADD231PS Z7, Z11, Z23 \
	VMOVUPS (R10), Z8 \
	VMOVUPS 64(R10), Z9 \
	VMOVUPS 128(R10), Z10 \
	VMOVUPS 192(R10), Z11 \
	VFMADD231PS Z0, Z8, Z24 \
	VFMADD231PS Z1, Z9, Z25 \
	VFMADD231PS Z2, Z10, Z26 \
	VFMADD231PS Z3, Z11, Z27 \
	VFMADD231PS Z4, Z8, Z28 \
	VFMADD231PS Z5, Z9, Z29 \
	VFMADD231PS Z6, Z10, Z30 \
	VFMADD231PS Z7, Z11, Z31 \
	ADDQ $256, SI \
	ADDQ $256, R10 \
	ADDQ $256, R8 \
	ADDQ $256, R9 \
	SUBQ $64, CX \
	JNZ lbl

// func dot2x2F32x512(w0, w1, x0, x1 *float32, n int, out *[4]float32)
// w0·x0, w0·x1, w1·x0, w1·x1, each accumulated exactly as dotF32x512
// does (the prefill GEMM's 2×2 tile: each load serves two products).
// n must be a multiple of 64.
TEXT ·dot2x2F32x512(SB), NOSPLIT, $0-48
	MOVQ w0+0(FP), SI
	MOVQ w1+8(FP), R10
	MOVQ x0+16(FP), R8
	MOVQ x1+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DI
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	DOT2X2_ACC_LOOP(loop22)
	// The reductions use VEX-only instructions: each group moves to
	// Z4..Z7 first.
	DOT2X2_OUT(Z16, Z17, Z18, Z19, 0)
	DOT2X2_OUT(Z20, Z21, Z22, Z23, 4)
	DOT2X2_OUT(Z24, Z25, Z26, Z27, 8)
	DOT2X2_OUT(Z28, Z29, Z30, Z31, 12)
	VZEROUPPER
	RET

// func dot2x2AccF32x512(w0, w1, x0, x1 *float32, n int, acc *[16][16]float32)
// dot2x2F32x512's loop over n floats (a multiple of 64) with its sixteen
// accumulators loaded from acc and stored back: a K-chunk of a 2×2 tile,
// whose chunks, run in order, make exactly dot2x2F32x512's sums
// (dot2x2SumF32x512 reduces them).
TEXT ·dot2x2AccF32x512(SB), NOSPLIT, $0-48
	MOVQ w0+0(FP), SI
	MOVQ w1+8(FP), R10
	MOVQ x0+16(FP), R8
	MOVQ x1+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ acc+40(FP), DI
	VMOVUPS 0(DI), Z16
	VMOVUPS 64(DI), Z17
	VMOVUPS 128(DI), Z18
	VMOVUPS 192(DI), Z19
	VMOVUPS 256(DI), Z20
	VMOVUPS 320(DI), Z21
	VMOVUPS 384(DI), Z22
	VMOVUPS 448(DI), Z23
	VMOVUPS 512(DI), Z24
	VMOVUPS 576(DI), Z25
	VMOVUPS 640(DI), Z26
	VMOVUPS 704(DI), Z27
	VMOVUPS 768(DI), Z28
	VMOVUPS 832(DI), Z29
	VMOVUPS 896(DI), Z30
	VMOVUPS 960(DI), Z31
	DOT2X2_ACC_LOOP(loopacc)
	VMOVUPS Z16, 0(DI)
	VMOVUPS Z17, 64(DI)
	VMOVUPS Z18, 128(DI)
	VMOVUPS Z19, 192(DI)
	VMOVUPS Z20, 256(DI)
	VMOVUPS Z21, 320(DI)
	VMOVUPS Z22, 384(DI)
	VMOVUPS Z23, 448(DI)
	VMOVUPS Z24, 512(DI)
	VMOVUPS Z25, 576(DI)
	VMOVUPS Z26, 640(DI)
	VMOVUPS Z27, 704(DI)
	VMOVUPS Z28, 768(DI)
	VMOVUPS Z29, 832(DI)
	VMOVUPS Z30, 896(DI)
	VMOVUPS Z31, 960(DI)
	VZEROUPPER
	RET

// func dot2x2SumF32x512(acc *[16][16]float32, out *[4]float32)
// The four sums of a tile's accumulators, reduced as dot2x2F32x512
// reduces them.
TEXT ·dot2x2SumF32x512(SB), NOSPLIT, $0-16
	MOVQ acc+0(FP), SI
	MOVQ out+8(FP), DI
	VMOVUPS 0(SI), Z16
	VMOVUPS 64(SI), Z17
	VMOVUPS 128(SI), Z18
	VMOVUPS 192(SI), Z19
	VMOVUPS 256(SI), Z20
	VMOVUPS 320(SI), Z21
	VMOVUPS 384(SI), Z22
	VMOVUPS 448(SI), Z23
	VMOVUPS 512(SI), Z24
	VMOVUPS 576(SI), Z25
	VMOVUPS 640(SI), Z26
	VMOVUPS 704(SI), Z27
	VMOVUPS 768(SI), Z28
	VMOVUPS 832(SI), Z29
	VMOVUPS 896(SI), Z30
	VMOVUPS 960(SI), Z31
	DOT2X2_OUT(Z16, Z17, Z18, Z19, 0)
	DOT2X2_OUT(Z20, Z21, Z22, Z23, 4)
	DOT2X2_OUT(Z24, Z25, Z26, Z27, 8)
	DOT2X2_OUT(Z28, Z29, Z30, Z31, 12)
	VZEROUPPER
	RET

// DOT512H_ACC4 is DOT512_ACC4 over 64 float16 keys at k, widened exactly
// (Z27..Z30 scratch: Z26 holds dotRows' scale), so the products and sums
// are those of the widened row.
#define DOT512H_ACC4(k, a0, a1, a2, a3) \
	VCVTPH2PS (k), Z27 \
	VCVTPH2PS 32(k), Z28 \
	VCVTPH2PS 64(k), Z29 \
	VCVTPH2PS 96(k), Z30 \
	VFMADD231PS Z27, Z0, a0 \
	VFMADD231PS Z28, Z1, a1 \
	VFMADD231PS Z29, Z2, a2 \
	VFMADD231PS Z30, Z3, a3

// DOT512H_FMA4 is DOT512_FMA4 over 64 float16 values at DI.
#define DOT512H_FMA4 DOT512H_ACC4(DI, Z4, Z5, Z6, Z7)

// func dotRowsF16x512(q *float32, k *uint16, dk, stride, rows int, out *float32, scale float32)
// dotRowsF32x512 over float16 rows (a half KV pool), each widened
// exactly where it is loaded: the bits of dotRowsF32x512 over the
// widened rows. stride is in elements.
TEXT ·dotRowsF16x512(SB), NOSPLIT, $0-52
	VBROADCASTSS scale+48(FP), X26
	MOVQ q+0(FP), R8
	MOVQ k+8(FP), R9
	MOVQ dk+16(FP), R10
	MOVQ stride+24(FP), R11
	SHLQ $1, R11
	MOVQ rows+32(FP), R12
	MOVQ out+40(FP), R13
	DOTROWS512(DOT512H_ACC4, DOT512H_FMA4, $128)

// func axpyRowsF16x512(o *float32, v *uint16, dv, stride, rows int, w *float32)
// axpyRowsF32x512 over float16 rows, each widened exactly where it is
// loaded: the bits of axpyRowsF32x512 over the widened rows.
TEXT ·axpyRowsF16x512(SB), NOSPLIT, $0-48
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), R9
	MOVQ dv+16(FP), R10
	MOVQ stride+24(FP), R11
	SHLQ $1, R11
	MOVQ rows+32(FP), R12
	MOVQ w+40(FP), R13
hcolloop:
	AXPY512_LOAD_O
	MOVQ R9, SI
	MOVQ R13, DX
	MOVQ R12, CX
hvloop:
	VBROADCASTSS (DX), Z15
	VCVTPH2PS (SI), Z8
	VMULPS Z8, Z15, Z8
	VADDPS Z8, Z0, Z0
	VCVTPH2PS 32(SI), Z9
	VMULPS Z9, Z15, Z9
	VADDPS Z9, Z1, Z1
	VCVTPH2PS 64(SI), Z10
	VMULPS Z10, Z15, Z10
	VADDPS Z10, Z2, Z2
	VCVTPH2PS 96(SI), Z11
	VMULPS Z11, Z15, Z11
	VADDPS Z11, Z3, Z3
	VCVTPH2PS 128(SI), Z8
	VMULPS Z8, Z15, Z8
	VADDPS Z8, Z4, Z4
	VCVTPH2PS 160(SI), Z9
	VMULPS Z9, Z15, Z9
	VADDPS Z9, Z5, Z5
	VCVTPH2PS 192(SI), Z10
	VMULPS Z10, Z15, Z10
	VADDPS Z10, Z6, Z6
	VCVTPH2PS 224(SI), Z11
	VMULPS Z11, Z15, Z11
	VADDPS Z11, Z7, Z7
	ADDQ $4, DX
	ADDQ R11, SI
	DECQ CX
	JNZ hvloop
	AXPY512_STORE_O
	ADDQ $512, DI
	ADDQ $256, R9
	SUBQ $128, R10
	JNZ hcolloop
	VZEROUPPER
	RET

// FP8 E4M3 rows by the half-precision converter. An E4M3 byte's exponent
// and mantissa, shifted left by 7 into a float16 (sign to bit 15), are the
// same value over 2^8 (float16's exponent bias is 8 more than E4M3's, and
// E4M3's subnormals land on float16's): VCVTPH2PS then ×256 gives the
// table's value exactly, sixteen at a time, where FP8_DECODE forms eight
// with compares and blends. S.1111.111 (NaN in E4M3, 480 this way) is
// fp8NaN512 as in the table. Each step asks for the row 2 KiB ahead (as
// the quant row dots do, kernels/quant/kdot_amd64.h): 11.6–12.8 against
// 9.3–10.1 tok/s on the FP8 decode below, whose rows stream from memory.
DATA fp8EM512<>+0(SB)/4, $0x3f803f80
GLOBL fp8EM512<>(SB), RODATA|NOPTR, $4
DATA fp8S512<>+0(SB)/4, $0x80008000
GLOBL fp8S512<>(SB), RODATA|NOPTR, $4
DATA fp8Low7512<>+0(SB)/4, $0x007f007f
GLOBL fp8Low7512<>(SB), RODATA|NOPTR, $4
DATA fp8Two8<>+0(SB)/4, $0x43800000
GLOBL fp8Two8<>(SB), RODATA|NOPTR, $4
DATA fp8NaN512<>+0(SB)/4, $0x7fc00000
GLOBL fp8NaN512<>(SB), RODATA|NOPTR, $4

// FP8_512_CONSTS loads the widening's constants: Y15, Y14 and Y13 the
// exponent-mantissa, sign and low-seven masks, Z12 = 2^8, Z11 = the NaN.
#define FP8_512_CONSTS \
	VPBROADCASTD fp8EM512<>(SB), Y15 \
	VPBROADCASTD fp8S512<>(SB), Y14 \
	VPBROADCASTD fp8Low7512<>(SB), Y13 \
	VBROADCASTSS fp8Two8<>(SB), Z12 \
	VBROADCASTSS fp8NaN512<>(SB), Z11

// func fp8Row512(row *byte, dst *float32, n int, scale float32)
// dst[i] = w[i]·scale for n (a multiple of 16) bytes (w: the table's
// values), the product fp8RowAVX2 forms.
TEXT ·fp8Row512(SB), NOSPLIT, $0-28
	MOVQ row+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z5
	FP8_512_CONSTS
fp8row512:
	PREFETCHT0 2048(SI)
	VPMOVZXBW (SI), Y0
	VPSLLW $7, Y0, Y1
	VPAND Y15, Y1, Y1
	VPSLLW $8, Y0, Y2
	VPAND Y14, Y2, Y2
	VPOR Y2, Y1, Y1
	VPAND Y13, Y0, Y0
	VPCMPEQW Y13, Y0, K1
	VCVTPH2PS Y1, Z3
	VMULPS Z12, Z3, Z3
	VMOVAPS Z11, K1, Z3
	VMULPS Z5, Z3, Z3
	VMOVUPS Z3, (DI)
	ADDQ $16, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ fp8row512
	VZEROUPPER
	RET

// FP8W widens the 16 E4M3 bytes at off(SI) into dst as fp8Row512 does
// (the same instructions in the same order: the table's value ×256 exact,
// NaN masked in, times the block's scale in Z10), with Y8, Y9 and dst's
// low half as scratch.
#define FP8W(off, ydst, zdst) \
	VPMOVZXBW off(SI), Y8 \
	VPSLLW $7, Y8, Y9 \
	VPAND Y15, Y9, Y9 \
	VPSLLW $8, Y8, ydst \
	VPAND Y14, ydst, ydst \
	VPOR ydst, Y9, Y9 \
	VPAND Y13, Y8, Y8 \
	VPCMPEQW Y13, Y8, K1 \
	VCVTPH2PS Y9, zdst \
	VMULPS Z12, zdst, zdst \
	VMOVAPS Z11, K1, zdst \
	VMULPS Z10, zdst, zdst

// func fp8DotRow512(row *byte, x *float32, n int, scales *float32, bi int) float32
// dotF32x512 of the row fp8Row512 would decode (block b of bi columns
// times scales[b]), bit for bit, without storing it: a one-row FP8 GEMV
// wrote every weight as a float and read it back. n and bi multiples of
// 64 (a last block may be shorter).
TEXT ·fp8DotRow512(SB), NOSPLIT, $0-44
	MOVQ row+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ scales+24(FP), R8
	MOVQ bi+32(FP), R9
	FP8_512_CONSTS
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
fdblock:
	VBROADCASTSS (R8), Z10
	MOVQ R9, DX
	CMPQ DX, CX
	CMOVQGT CX, DX
fdloop:
	PREFETCHT0 2048(SI)
	FP8W(0, Y0, Z0)
	FP8W(16, Y1, Z1)
	FP8W(32, Y2, Z2)
	FP8W(48, Y3, Z3)
	DOT512_FMA4
	ADDQ $64, SI
	ADDQ $256, DI
	SUBQ $64, CX
	SUBQ $64, DX
	JNZ fdloop
	ADDQ $4, R8
	TESTQ CX, CX
	JNZ fdblock
	DOT512_SUM(Z4, Z5, Z6, Z7, Y4, X4)
	VZEROUPPER
	VMOVSS X4, ret+40(FP)
	RET
