//go:build amd64

#include "textflag.h"

// AVX2+FMA+F16C row dot products of the GGUF formats the CPU decode GEMV
// spends its time in (kdot_amd64.go says why). Each weight is formed
// exactly as the scalar decoder forms it (the same float32 products and
// differences), eight at a time, then multiplied into four accumulators.
// Every function is func(row *byte, x *float32, nb int) float32 over nb ≥ 1
// whole blocks.

// Constants: dword masks and offsets, kvaluesIQ4NL and Q4_0's q−8 as int8
// tables, the IQ4_XS
// scale nibbles' and bit pairs' shifts.

DATA kdotMask15<>+0(SB)/4, $0x0000000f
GLOBL kdotMask15<>(SB), RODATA|NOPTR, $4
DATA kdotMask30<>+0(SB)/4, $0x00000030
GLOBL kdotMask30<>(SB), RODATA|NOPTR, $4
DATA kdotInt32<>+0(SB)/4, $0x00000020
GLOBL kdotInt32<>(SB), RODATA|NOPTR, $4
DATA kdotMask10<>+0(SB)/4, $0x00000010
GLOBL kdotMask10<>(SB), RODATA|NOPTR, $4
DATA kdotIQ4<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA kdotIQ4<>+8(SB)/8, $0x7159453526190d01
GLOBL kdotIQ4<>(SB), RODATA|NOPTR, $16
DATA kdotQ40<>+0(SB)/8, $0xfffefdfcfbfaf9f8
DATA kdotQ40<>+8(SB)/8, $0x0706050403020100
GLOBL kdotQ40<>(SB), RODATA|NOPTR, $16
DATA kdotNib<>+0(SB)/4, $0x0f0f0f0f
GLOBL kdotNib<>(SB), RODATA|NOPTR, $4
DATA kdotMask3<>+0(SB)/4, $0x00000003
GLOBL kdotMask3<>(SB), RODATA|NOPTR, $4
DATA kdotOne<>+0(SB)/4, $0x00000001
GLOBL kdotOne<>(SB), RODATA|NOPTR, $4
DATA kdotFour<>+0(SB)/4, $0x00000004
GLOBL kdotFour<>(SB), RODATA|NOPTR, $4
DATA kdotShr4<>+0(SB)/8, $0x0000000400000000
DATA kdotShr4<>+8(SB)/8, $0x0000000c00000008
DATA kdotShr4<>+16(SB)/8, $0x0000001400000010
DATA kdotShr4<>+24(SB)/8, $0x0000001c00000018
GLOBL kdotShr4<>(SB), RODATA|NOPTR, $32
DATA kdotShr2<>+0(SB)/8, $0x0000000200000000
DATA kdotShr2<>+8(SB)/8, $0x0000000600000004
DATA kdotShr2<>+16(SB)/8, $0x0000000a00000008
DATA kdotShr2<>+24(SB)/8, $0x0000000e0000000c
GLOBL kdotShr2<>(SB), RODATA|NOPTR, $32

// KDOT_BEGIN loads the arguments (row, x, nb) into SI, DI, CX and zeroes
// the four accumulators Y0..Y3.
#define KDOT_BEGIN \
	MOVQ row+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ nb+16(FP), CX \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3

// KDOT_SUM returns the sum of the four accumulators.
#define KDOT_SUM \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y3, Y2, Y2 \
	VADDPS Y2, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0 \
	VHADDPS X0, X0, X0 \
	VHADDPS X0, X0, X0 \
	VZEROUPPER \
	MOVSS X0, ret+24(FP) \
	RET

// K4_SCALES puts the block at SI's d·s_k at 0(SP) and dmin·m_k at 32(SP)
// (Q4_K and Q5_K: d, dmin at +0, +2; 12 bytes of 6-bit scales and mins at
// +4, unpacked as scaleMinK4 does, four at a time:
// s0-3 = u0&0x3f.., m0-3 = u1&0x3f..,
// s4-7 = u2&0x0f.. | (u0>>6&0x03..)<<4, m4-7 = u2>>4&0x0f.. | (u1>>6&0x03..)<<4;
// d and dmin converted exactly by F16C).
#define K4_SCALES \
	MOVL 4(SI), R8 \
	MOVL 8(SI), R9 \
	MOVL 12(SI), R10 \
	MOVL R8, AX \
	ANDL $0x3f3f3f3f, AX \
	MOVL R8, BX \
	SHRL $6, BX \
	ANDL $0x03030303, BX \
	SHLL $4, BX \
	MOVL R10, DX \
	ANDL $0x0f0f0f0f, DX \
	ORL DX, BX \
	SHLQ $32, BX \
	ORQ BX, AX \
	MOVQ AX, X4 \
	MOVL R9, AX \
	ANDL $0x3f3f3f3f, AX \
	MOVL R9, BX \
	SHRL $6, BX \
	ANDL $0x03030303, BX \
	SHLL $4, BX \
	MOVL R10, DX \
	SHRL $4, DX \
	ANDL $0x0f0f0f0f, DX \
	ORL DX, BX \
	SHLQ $32, BX \
	ORQ BX, AX \
	MOVQ AX, X5 \
	MOVL (SI), AX \
	MOVQ AX, X6 \
	VCVTPH2PS X6, X6 \
	VPSHUFD $0x55, X6, X7 \
	VBROADCASTSS X6, Y6 \
	VBROADCASTSS X7, Y7 \
	VPMOVZXBD X4, Y4 \
	VPMOVZXBD X5, Y5 \
	VCVTDQ2PS Y4, Y4 \
	VCVTDQ2PS Y5, Y5 \
	VMULPS Y6, Y4, Y4 \
	VMULPS Y7, Y5, Y5 \
	VMOVUPS Y4, 0(SP) \
	VMOVUPS Y5, 32(SP)

// Q4K_GROUP: eight quant bytes at qb(SI) are 8 weights of the low
// sub-block (low nibbles, x at xl(DI)) and 8 of the high one (high
// nibbles, x at xh(DI)); Y8/Y10 and Y9/Y11 are those sub-blocks' d·scale
// and dmin·min. Weight = float32(d·s·q) − dmin·m, as decodeQ4K.
#define Q4K_GROUP(qb, xl, xh, accL, accH) \
	VPMOVZXBD qb(SI), Y4 \
	VPAND Y15, Y4, Y5 \
	VPSRLD $4, Y4, Y6 \
	VCVTDQ2PS Y5, Y5 \
	VCVTDQ2PS Y6, Y6 \
	VMULPS Y8, Y5, Y5 \
	VMULPS Y9, Y6, Y6 \
	VSUBPS Y10, Y5, Y5 \
	VSUBPS Y11, Y6, Y6 \
	VFMADD231PS xl(DI), Y5, accL \
	VFMADD231PS xh(DI), Y6, accH

// K4_FACTORS broadcasts a sub-block pair's d·s and dmin·m from the frame
// (K4_SCALES) into Y8, Y9 (scales) and Y10, Y11 (mins).
#define K4_FACTORS(s0, s1, m0, m1) \
	VBROADCASTSS s0(SP), Y8 \
	VBROADCASTSS s1(SP), Y9 \
	VBROADCASTSS m0(SP), Y10 \
	VBROADCASTSS m1(SP), Y11

// Q4K_PAIR: sub-blocks 2j and 2j+1 (32 quant bytes at qb(SI), x at xo(DI)
// and 128 bytes on): their factors from the frame (d·s at s0(SP), dmin·m
// at m0(SP)), then four groups over two accumulator pairs.
#define Q4K_PAIR(s0, m0, qb, xo) \
	K4_FACTORS(s0, 4+s0, m0, 4+m0) \
	Q4K_GROUP(qb, xo, 128+xo, Y0, Y1) \
	Q4K_GROUP(8+qb, 32+xo, 160+xo, Y2, Y3) \
	Q4K_GROUP(16+qb, 64+xo, 192+xo, Y0, Y1) \
	Q4K_GROUP(24+qb, 96+xo, 224+xo, Y2, Y3)

// func q4kDotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 144 bytes: d and dmin (f16), 12 bytes of packed 6-bit
// scales and mins, 128 bytes of quants. Each block's factors go to the
// frame (K4_SCALES) and are broadcast from there.
TEXT ·q4kDotAVX2(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VPBROADCASTD kdotMask15<>(SB), Y15
q4kblock:
	K4_SCALES
	Q4K_PAIR(0, 32, 16, 0)
	Q4K_PAIR(8, 40, 48, 256)
	Q4K_PAIR(16, 48, 80, 512)
	Q4K_PAIR(24, 56, 112, 768)
	ADDQ $144, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q4kblock
	KDOT_SUM

// Q6K_GROUP: l-values l0..l0+7 of a 128-element half: ql bytes at
// a(SI) and a+32(SI), qh at h(SI); the four weights of each l are
// elements l, l+32, l+64, l+96 (x at x(DI), +128, +256, +384), their
// d·scale in Y8..Y11. Weight = (d·sc)·(q − 32), as decodeQ6K.
#define Q6K_GROUP(a, b, h, x0, x1, x2, x3) \
	VPMOVZXBD a(SI), Y4 \
	VPMOVZXBD b(SI), Y5 \
	VPMOVZXBD h(SI), Y6 \
	VPAND Y15, Y4, Y7 \
	VPSLLD $4, Y6, Y12 \
	VPAND Y14, Y12, Y12 \
	VPOR Y12, Y7, Y7 \
	VPSUBD Y13, Y7, Y7 \
	VCVTDQ2PS Y7, Y7 \
	VMULPS Y8, Y7, Y7 \
	VFMADD231PS x0(DI), Y7, Y0 \
	VPAND Y15, Y5, Y7 \
	VPSLLD $2, Y6, Y12 \
	VPAND Y14, Y12, Y12 \
	VPOR Y12, Y7, Y7 \
	VPSUBD Y13, Y7, Y7 \
	VCVTDQ2PS Y7, Y7 \
	VMULPS Y9, Y7, Y7 \
	VFMADD231PS x1(DI), Y7, Y1 \
	VPSRLD $4, Y4, Y7 \
	VPAND Y14, Y6, Y12 \
	VPOR Y12, Y7, Y7 \
	VPSUBD Y13, Y7, Y7 \
	VCVTDQ2PS Y7, Y7 \
	VMULPS Y10, Y7, Y7 \
	VFMADD231PS x2(DI), Y7, Y2 \
	VPSRLD $4, Y5, Y7 \
	VPSRLD $2, Y6, Y12 \
	VPAND Y14, Y12, Y12 \
	VPOR Y12, Y7, Y7 \
	VPSUBD Y13, Y7, Y7 \
	VCVTDQ2PS Y7, Y7 \
	VMULPS Y11, Y7, Y7 \
	VFMADD231PS x3(DI), Y7, Y3

// Q6K_SCALES: the d·scale of sc[is], sc[is+2], sc[is+4], sc[is+6] of
// a half, from the frame.
#define Q6K_SCALES(s0, s1, s2, s3) \
	VBROADCASTSS s0(SP), Y8 \
	VBROADCASTSS s1(SP), Y9 \
	VBROADCASTSS s2(SP), Y10 \
	VBROADCASTSS s3(SP), Y11

// func q6kDotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 210 bytes: 128 bytes of low quant bits, 64 of high
// bits, 16 int8 scales, d (f16). Each block's d·scale[i] go to the frame
// (0(SP)..63(SP)) and are broadcast from there.
TEXT ·q6kDotAVX2(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VPBROADCASTD kdotMask15<>(SB), Y15
	VPBROADCASTD kdotMask30<>(SB), Y14
	VPBROADCASTD kdotInt32<>(SB), Y13
q6kblock:
	MOVWLZX 208(SI), AX
	MOVQ AX, X6
	VCVTPH2PS X6, X6
	VBROADCASTSS X6, Y6
	VPMOVSXBD 192(SI), Y4
	VPMOVSXBD 200(SI), Y5
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y4, Y4
	VMULPS Y6, Y5, Y5
	VMOVUPS Y4, 0(SP)
	VMOVUPS Y5, 32(SP)
	Q6K_SCALES(0, 8, 16, 24)
	Q6K_GROUP(0, 32, 128, 0, 128, 256, 384)
	Q6K_GROUP(8, 40, 136, 32, 160, 288, 416)
	Q6K_SCALES(4, 12, 20, 28)
	Q6K_GROUP(16, 48, 144, 64, 192, 320, 448)
	Q6K_GROUP(24, 56, 152, 96, 224, 352, 480)
	Q6K_SCALES(32, 40, 48, 56)
	Q6K_GROUP(64, 96, 160, 512, 640, 768, 896)
	Q6K_GROUP(72, 104, 168, 544, 672, 800, 928)
	Q6K_SCALES(36, 44, 52, 60)
	Q6K_GROUP(80, 112, 176, 576, 704, 832, 960)
	Q6K_GROUP(88, 120, 184, 608, 736, 864, 992)
	ADDQ $210, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q6kblock
	KDOT_SUM

// func q80DotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 34 bytes: d (f16), 32 int8 quants. Weight =
// float32(q)·d, as decodeQ8_0.
TEXT ·q80DotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
q80block:
	MOVWLZX (SI), AX
	MOVQ AX, X6
	VCVTPH2PS X6, X6
	VBROADCASTSS X6, Y6
	VPMOVSXBD 2(SI), Y4
	VPMOVSXBD 10(SI), Y5
	VPMOVSXBD 18(SI), Y7
	VPMOVSXBD 26(SI), Y8
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VCVTDQ2PS Y7, Y7
	VCVTDQ2PS Y8, Y8
	VMULPS Y6, Y4, Y4
	VMULPS Y6, Y5, Y5
	VMULPS Y6, Y7, Y7
	VMULPS Y6, Y8, Y8
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y7, Y2
	VFMADD231PS 96(DI), Y8, Y3
	ADDQ $34, SI
	ADDQ $128, DI
	DECQ CX
	JNZ q80block
	KDOT_SUM

// Q5K_GROUP: Q4K_GROUP with the fifth bits: eight ql bytes at qb(SI),
// their qh bytes at hb(SI), the low sub-block's bit moved to 16 by
// lop $ln and the high one's by hop $hn (a shift of the pair's bits).
// Weight = float32(d·s·q) − dmin·m, as decodeQ5K.
#define Q5K_GROUP(qb, hb, xl, xh, accL, accH, lop, ln, hop, hn) \
	VPMOVZXBD qb(SI), Y4 \
	VPMOVZXBD hb(SI), Y12 \
	VPAND Y15, Y4, Y5 \
	lop $ln, Y12, Y6 \
	VPAND Y14, Y6, Y6 \
	VPOR Y6, Y5, Y5 \
	VPSRLD $4, Y4, Y4 \
	hop $hn, Y12, Y6 \
	VPAND Y14, Y6, Y6 \
	VPOR Y4, Y6, Y6 \
	VCVTDQ2PS Y5, Y5 \
	VCVTDQ2PS Y6, Y6 \
	VMULPS Y8, Y5, Y5 \
	VMULPS Y9, Y6, Y6 \
	VSUBPS Y10, Y5, Y5 \
	VSUBPS Y11, Y6, Y6 \
	VFMADD231PS xl(DI), Y5, accL \
	VFMADD231PS xh(DI), Y6, accH

// Q5K_PAIR: Q4K_PAIR for Q5_K: quant bytes at qb(SI), the fifth bits of
// the pair's low and high sub-blocks moved to 16 by lop $ln and hop $hn.
#define Q5K_PAIR(s0, m0, qb, xo, lop, ln, hop, hn) \
	K4_FACTORS(s0, 4+s0, m0, 4+m0) \
	Q5K_GROUP(qb, 16, xo, 128+xo, Y0, Y1, lop, ln, hop, hn) \
	Q5K_GROUP(8+qb, 24, 32+xo, 160+xo, Y2, Y3, lop, ln, hop, hn) \
	Q5K_GROUP(16+qb, 32, 64+xo, 192+xo, Y0, Y1, lop, ln, hop, hn) \
	Q5K_GROUP(24+qb, 40, 96+xo, 224+xo, Y2, Y3, lop, ln, hop, hn)

// func q5kDotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 176 bytes: d, dmin, the 12 scale bytes as Q4_K, 32
// bytes of fifth bits (qh: bit 2j of qh[l] for element 64j+l, bit 2j+1
// for 64j+32+l), 128 bytes of low nibbles.
TEXT ·q5kDotAVX2(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VPBROADCASTD kdotMask15<>(SB), Y15
	VPBROADCASTD kdotMask10<>(SB), Y14
q5kblock:
	K4_SCALES
	Q5K_PAIR(0, 32, 48, 0, VPSLLD, 4, VPSLLD, 3)
	Q5K_PAIR(8, 40, 80, 256, VPSLLD, 2, VPSLLD, 1)
	Q5K_PAIR(16, 48, 112, 512, VPSLLD, 0, VPSRLD, 1)
	Q5K_PAIR(24, 56, 144, 768, VPSRLD, 2, VPSRLD, 3)
	ADDQ $176, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q5kblock
	KDOT_SUM

// IQ4_32: 32 weights of a non-linear 4-bit block: 16 quant bytes at
// qb(SI), low nibbles elements 0..15 and high ones 16..31, each looked up
// in the 16 int8 values of X13 (kvaluesIQ4NL) and scaled by Y6; x at
// x0..x3(DI). Weight = d·kvalue, as decodeIQ4NL and decodeIQ4XS.
#define IQ4_32(qb, x0, x1, x2, x3) \
	VMOVDQU qb(SI), X4 \
	VPAND X14, X4, X5 \
	VPSRLW $4, X4, X4 \
	VPAND X14, X4, X4 \
	VPSHUFB X5, X13, X5 \
	VPSHUFB X4, X13, X4 \
	VPMOVSXBD X5, Y7 \
	VPSHUFD $0xee, X5, X5 \
	VPMOVSXBD X5, Y8 \
	VPMOVSXBD X4, Y9 \
	VPSHUFD $0xee, X4, X4 \
	VPMOVSXBD X4, Y10 \
	VCVTDQ2PS Y7, Y7 \
	VCVTDQ2PS Y8, Y8 \
	VCVTDQ2PS Y9, Y9 \
	VCVTDQ2PS Y10, Y10 \
	VMULPS Y6, Y7, Y7 \
	VMULPS Y6, Y8, Y8 \
	VMULPS Y6, Y9, Y9 \
	VMULPS Y6, Y10, Y10 \
	VFMADD231PS x0(DI), Y7, Y0 \
	VFMADD231PS x1(DI), Y8, Y1 \
	VFMADD231PS x2(DI), Y9, Y2 \
	VFMADD231PS x3(DI), Y10, Y3

// IQ4_TABLE puts kvaluesIQ4NL (int8) in X13 and the nibble mask in X14.
#define IQ4_TABLE \
	VMOVDQU kdotIQ4<>(SB), X13 \
	VPBROADCASTD kdotNib<>(SB), X14

// NIB4_BLOCKS: blocks of 18 bytes, d (f16) and 16 bytes of nibbles, each
// nibble looked up in the int8 table tbl (IQ4_NL's values, or Q4_0's q−8)
// and scaled by d; loop is the loop's label.
#define NIB4_BLOCKS(tbl, loop) \
	KDOT_BEGIN \
	VMOVDQU tbl(SB), X13 \
	VPBROADCASTD kdotNib<>(SB), X14 \
loop: \
	MOVWLZX (SI), AX \
	MOVQ AX, X6 \
	VCVTPH2PS X6, X6 \
	VBROADCASTSS X6, Y6 \
	IQ4_32(2, 0, 32, 64, 96) \
	ADDQ $18, SI \
	ADDQ $128, DI \
	DECQ CX \
	JNZ loop \
	KDOT_SUM

// func iq4nlDotAVX2(row *byte, x *float32, nb int) float32
// Weight = d·kvalue, as decodeIQ4NL.
TEXT ·iq4nlDotAVX2(SB), NOSPLIT, $0-28
	NIB4_BLOCKS(kdotIQ4<>, iq4nlblock)

// func q40DotAVX2(row *byte, x *float32, nb int) float32
// Weight = (q−8)·d, as decodeQ4_0.
TEXT ·q40DotAVX2(SB), NOSPLIT, $0-28
	NIB4_BLOCKS(kdotQ40<>, q40block)

// IQ4XS_SUB: sub-block of 32 weights with its d·(scale−32) at sc(SP),
// quant bytes at qb(SI), x at xo(DI).
#define IQ4XS_SUB(sc, qb, xo) \
	VBROADCASTSS sc(SP), Y6 \
	IQ4_32(qb, xo, 32+xo, 64+xo, 96+xo)

// func iq4xsDotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 136 bytes: d (f16), the scales' high bits (u16), their
// low nibbles (4 bytes), 8 sub-blocks of 16 quant bytes. Sub-block ib's
// d·(scale−32) (iq4xsScale) go to the frame, eight at a time.
TEXT ·iq4xsDotAVX2(SB), NOSPLIT, $32-28
	KDOT_BEGIN
	IQ4_TABLE
iq4xsblock:
	MOVL 4(SI), AX
	MOVQ AX, X4
	VPBROADCASTD X4, Y4
	VPSRLVD kdotShr4<>(SB), Y4, Y4
	VPBROADCASTD kdotMask15<>(SB), Y7
	VPAND Y7, Y4, Y4
	MOVWLZX 2(SI), AX
	MOVQ AX, X5
	VPBROADCASTD X5, Y5
	VPSRLVD kdotShr2<>(SB), Y5, Y5
	VPBROADCASTD kdotMask3<>(SB), Y7
	VPAND Y7, Y5, Y5
	VPSLLD $4, Y5, Y5
	VPOR Y5, Y4, Y4
	VPBROADCASTD kdotInt32<>(SB), Y7
	VPSUBD Y7, Y4, Y4
	VCVTDQ2PS Y4, Y4
	MOVWLZX (SI), AX
	MOVQ AX, X6
	VCVTPH2PS X6, X6
	VBROADCASTSS X6, Y6
	VMULPS Y6, Y4, Y4
	VMOVUPS Y4, 0(SP)
	IQ4XS_SUB(0, 8, 0)
	IQ4XS_SUB(4, 24, 128)
	IQ4XS_SUB(8, 40, 256)
	IQ4XS_SUB(12, 56, 384)
	IQ4XS_SUB(16, 72, 512)
	IQ4XS_SUB(20, 88, 640)
	IQ4XS_SUB(24, 104, 768)
	IQ4XS_SUB(28, 120, 896)
	ADDQ $136, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq4xsblock
	KDOT_SUM

// Q3K_STEP: eight weights of one 2-bit plane: (Q >> qs) & 3, plus 4 unless
// the hmask bit (H >> hs) is set minus 4, times the d·scale at sc(SP);
// x at xo(DI) into acc. Q (Y4) and H (Y5) hold the plane's quant and
// hmask bytes. Weight = (d·scale)·v, as decodeQ3K.
#define Q3K_STEP(qs, hs, sc, xo, acc) \
	VPSRLD $qs, Y4, Y6 \
	VPAND Y15, Y6, Y6 \
	VPSRLD $hs, Y5, Y7 \
	VPAND Y14, Y7, Y7 \
	VPSLLD $2, Y7, Y7 \
	VPADDD Y7, Y6, Y6 \
	VPSUBD Y13, Y6, Y6 \
	VCVTDQ2PS Y6, Y6 \
	VBROADCASTSS sc(SP), Y8 \
	VMULPS Y8, Y6, Y6 \
	VFMADD231PS xo(DI), Y6, acc

// Q3K_GROUP: eight quant bytes at qb(SI) and their hmask bytes at hb(SI)
// hold eight weights of each of four 2-bit planes; plane s takes hmask bit
// hs+s, its d·scale at sc+8s(SP) and its x at xo+128s(DI), accumulator Ys.
#define Q3K_GROUP(qb, hb, hs, sc, xo) \
	VPMOVZXBD qb(SI), Y4 \
	VPMOVZXBD hb(SI), Y5 \
	Q3K_STEP(0, hs, sc, xo, Y0) \
	Q3K_STEP(2, (hs+1), 8+sc, 128+xo, Y1) \
	Q3K_STEP(4, (hs+2), 16+sc, 256+xo, Y2) \
	Q3K_STEP(6, (hs+3), 24+sc, 384+xo, Y3)

// func q3kDotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 110 bytes: 32 bytes of hmask, 64 of 2-bit quants, 12
// of packed 6-bit scales (q3Scales), d (f16). Each block's d·(scale−32)
// go to the frame and are broadcast from there.
TEXT ·q3kDotAVX2(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VPBROADCASTD kdotMask3<>(SB), Y15
	VPBROADCASTD kdotOne<>(SB), Y14
	VPBROADCASTD kdotFour<>(SB), Y13
q3kblock:
	// The 16 scales as q3Scales unpacks them, four bytes at a time:
	// a0&0x0f.. | (t&0x03..)<<4, a1&0x0f.. | (t>>2&0x03..)<<4,
	// a0>>4&0x0f.. | (t>>4&0x03..)<<4, a1>>4&0x0f.. | (t>>6&0x03..)<<4.
	MOVL 96(SI), R8
	MOVL 100(SI), R9
	MOVL 104(SI), R10
	MOVL R8, AX
	ANDL $0x0f0f0f0f, AX
	MOVL R10, BX
	ANDL $0x03030303, BX
	SHLL $4, BX
	ORL BX, AX
	MOVL R9, DX
	ANDL $0x0f0f0f0f, DX
	MOVL R10, BX
	SHRL $2, BX
	ANDL $0x03030303, BX
	SHLL $4, BX
	ORL BX, DX
	SHLQ $32, DX
	ORQ DX, AX
	MOVQ AX, X4
	MOVL R8, AX
	SHRL $4, AX
	ANDL $0x0f0f0f0f, AX
	MOVL R10, BX
	SHRL $4, BX
	ANDL $0x03030303, BX
	SHLL $4, BX
	ORL BX, AX
	MOVL R9, DX
	SHRL $4, DX
	ANDL $0x0f0f0f0f, DX
	MOVL R10, BX
	SHRL $6, BX
	ANDL $0x03030303, BX
	SHLL $4, BX
	ORL BX, DX
	SHLQ $32, DX
	ORQ DX, AX
	MOVQ AX, X5
	MOVWLZX 108(SI), AX
	MOVQ AX, X6
	VCVTPH2PS X6, X6
	VBROADCASTSS X6, Y6
	VPBROADCASTD kdotInt32<>(SB), Y7
	VPMOVZXBD X4, Y4
	VPMOVZXBD X5, Y5
	VPSUBD Y7, Y4, Y4
	VPSUBD Y7, Y5, Y5
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y4, Y4
	VMULPS Y6, Y5, Y5
	VMOVUPS Y4, 0(SP)
	VMOVUPS Y5, 32(SP)
	Q3K_GROUP(32, 0, 0, 0, 0)
	Q3K_GROUP(40, 8, 0, 0, 32)
	Q3K_GROUP(48, 16, 0, 4, 64)
	Q3K_GROUP(56, 24, 0, 4, 96)
	Q3K_GROUP(64, 0, 4, 32, 512)
	Q3K_GROUP(72, 8, 4, 32, 544)
	Q3K_GROUP(80, 16, 4, 36, 576)
	Q3K_GROUP(88, 24, 4, 36, 608)
	ADDQ $110, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q3kblock
	KDOT_SUM

// Q2K_STEP: eight weights of one 2-bit plane of Q (Y4): (Q >> qs) & 3
// times the d·scale at sc(SP), minus the dmin·min at mc(SP); x at xo(DI)
// into acc. Weight = float32(d·s·q) − dmin·m, as decodeQ2K.
#define Q2K_STEP(qs, sc, mc, xo, acc) \
	VPSRLD $qs, Y4, Y6 \
	VPAND Y15, Y6, Y6 \
	VCVTDQ2PS Y6, Y6 \
	VBROADCASTSS sc(SP), Y8 \
	VBROADCASTSS mc(SP), Y9 \
	VMULPS Y8, Y6, Y6 \
	VSUBPS Y9, Y6, Y6 \
	VFMADD231PS xo(DI), Y6, acc

// Q2K_GROUP: eight quant bytes at qb(SI) hold eight weights of each of
// the four 2-bit planes; plane s has its d·scale at sc+8s(SP), its
// dmin·min 64 bytes further and its x at xo+128s(DI), accumulator Ys.
#define Q2K_GROUP(qb, sc, xo) \
	VPMOVZXBD qb(SI), Y4 \
	Q2K_STEP(0, sc, 64+sc, xo, Y0) \
	Q2K_STEP(2, 8+sc, 72+sc, 128+xo, Y1) \
	Q2K_STEP(4, 16+sc, 80+sc, 256+xo, Y2) \
	Q2K_STEP(6, 24+sc, 88+sc, 384+xo, Y3)

// func q2kDotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 84 bytes: 16 scale bytes (scale in the low nibble, min
// in the high one), 64 bytes of 2-bit quants, d and dmin (f16). Each
// block's d·scale go to 0(SP) and dmin·min to 64(SP).
TEXT ·q2kDotAVX2(SB), NOSPLIT, $128-28
	KDOT_BEGIN
	VPBROADCASTD kdotMask3<>(SB), Y15
	VPBROADCASTD kdotMask15<>(SB), Y14
q2kblock:
	MOVL 80(SI), AX
	MOVQ AX, X6
	VCVTPH2PS X6, X6
	VPSHUFD $0x55, X6, X7
	VBROADCASTSS X6, Y6
	VBROADCASTSS X7, Y7
	VPMOVZXBD 0(SI), Y4
	VPMOVZXBD 8(SI), Y5
	VPAND Y14, Y4, Y8
	VPAND Y14, Y5, Y9
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	VMULPS Y6, Y8, Y8
	VMULPS Y6, Y9, Y9
	VMOVUPS Y8, 0(SP)
	VMOVUPS Y9, 32(SP)
	VPSRLD $4, Y4, Y4
	VPSRLD $4, Y5, Y5
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y7, Y4, Y4
	VMULPS Y7, Y5, Y5
	VMOVUPS Y4, 64(SP)
	VMOVUPS Y5, 96(SP)
	Q2K_GROUP(16, 0, 0)
	Q2K_GROUP(24, 0, 32)
	Q2K_GROUP(32, 4, 64)
	Q2K_GROUP(40, 4, 96)
	Q2K_GROUP(48, 32, 512)
	Q2K_GROUP(56, 32, 544)
	Q2K_GROUP(64, 36, 576)
	Q2K_GROUP(72, 36, 608)
	ADDQ $84, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q2kblock
	KDOT_SUM

// The legacy 32-weight formats with a min or a fifth bit (Q4_1, Q5_0,
// Q5_1) and MXFP4. A block's 16 quant bytes hold elements 0..15 in their
// low nibbles and 16..31 in their high ones, as in Q4_0.

DATA kdotMXFP4<>+0(SB)/8, $0x0c08060403020100
DATA kdotMXFP4<>+8(SB)/8, $0xf4f8fafcfdfeff00
GLOBL kdotMXFP4<>(SB), RODATA|NOPTR, $16
// Q5: qh's byte 0 to elements 0..7, byte 1 to 8..15 (and 2, 3 to
// 16..31), then the bit of each element's own position.
DATA kdotQ5Lo<>+0(SB)/8, $0x0000000000000000
DATA kdotQ5Lo<>+8(SB)/8, $0x0101010101010101
GLOBL kdotQ5Lo<>(SB), RODATA|NOPTR, $16
DATA kdotQ5Hi<>+0(SB)/8, $0x0202020202020202
DATA kdotQ5Hi<>+8(SB)/8, $0x0303030303030303
GLOBL kdotQ5Hi<>(SB), RODATA|NOPTR, $16
DATA kdotBits<>+0(SB)/8, $0x8040201008040201
DATA kdotBits<>+8(SB)/8, $0x8040201008040201
GLOBL kdotBits<>(SB), RODATA|NOPTR, $16
DATA kdotB16<>+0(SB)/4, $0x10101010
GLOBL kdotB16<>(SB), RODATA|NOPTR, $4

// NIB_SPLIT: the 16 quant bytes at qb(SI) as elements 0..15 in X5 and
// 16..31 in X4 (X14: the nibble mask).
#define NIB_SPLIT(qb) \
	VMOVDQU qb(SI), X4 \
	VPAND X14, X4, X5 \
	VPSRLW $4, X4, X4 \
	VPAND X14, X4, X4

// Q5_HIGH ors the fifth bits of the u32 at qh(SI) (bit k: element k),
// as 0x10, into X5 (elements 0..15) and X4 (16..31) (X13: 0x10 bytes).
#define Q5_HIGH(qh) \
	VMOVD qh(SI), X15 \
	VPSHUFB kdotQ5Lo<>(SB), X15, X12 \
	VPAND kdotBits<>(SB), X12, X12 \
	VPCMPEQB kdotBits<>(SB), X12, X12 \
	VPAND X13, X12, X12 \
	VPOR X12, X5, X5 \
	VPSHUFB kdotQ5Hi<>(SB), X15, X12 \
	VPAND kdotBits<>(SB), X12, X12 \
	VPCMPEQB kdotBits<>(SB), X12, X12 \
	VPAND X13, X12, X12 \
	VPOR X12, X4, X4

// WIDEN32: the 32 bytes of X5 (0..15) and X4 (16..31) as float32 in
// Y7..Y10, each byte sign- (ext VPMOVSXBD) or zero-extended (VPMOVZXBD).
#define WIDEN32(ext) \
	ext X5, Y7 \
	VPSHUFD $0xee, X5, X5 \
	ext X5, Y8 \
	ext X4, Y9 \
	VPSHUFD $0xee, X4, X4 \
	ext X4, Y10 \
	VCVTDQ2PS Y7, Y7 \
	VCVTDQ2PS Y8, Y8 \
	VCVTDQ2PS Y9, Y9 \
	VCVTDQ2PS Y10, Y10

// SCALE32 multiplies Y7..Y10 by Y6 (and adds Y11 where min: q·d + m,
// rounded after each, as mulAdd) and accumulates their products with the
// 32 floats at DI.
#define SCALE32 \
	VMULPS Y6, Y7, Y7 \
	VMULPS Y6, Y8, Y8 \
	VMULPS Y6, Y9, Y9 \
	VMULPS Y6, Y10, Y10
#define ADDMIN32 \
	VADDPS Y11, Y7, Y7 \
	VADDPS Y11, Y8, Y8 \
	VADDPS Y11, Y9, Y9 \
	VADDPS Y11, Y10, Y10
#define FMA32 \
	VFMADD231PS (DI), Y7, Y0 \
	VFMADD231PS 32(DI), Y8, Y1 \
	VFMADD231PS 64(DI), Y9, Y2 \
	VFMADD231PS 96(DI), Y10, Y3

// F16_BCAST broadcasts the f16 at off(SI) into reg (F16C: exact).
#define F16_BCAST(off, reg, xreg) \
	MOVWLZX off(SI), AX \
	MOVQ AX, xreg \
	VCVTPH2PS xreg, xreg \
	VBROADCASTSS xreg, reg

// NEXT32: the next block of size bytes, the loop's label loop.
#define NEXT32(size, loop) \
	ADDQ $size, SI \
	ADDQ $128, DI \
	DECQ CX \
	JNZ loop

// func q41DotAVX2(row *byte, x *float32, nb int) float32
// Weight = q·d + m, as decodeQ4_1.
TEXT ·q41DotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	VPBROADCASTD kdotNib<>(SB), X14
q41block:
	F16_BCAST(0, Y6, X6)
	F16_BCAST(2, Y11, X11)
	NIB_SPLIT(4)
	WIDEN32(VPMOVZXBD)
	SCALE32
	ADDMIN32
	FMA32
	NEXT32(20, q41block)
	KDOT_SUM

// func q50DotAVX2(row *byte, x *float32, nb int) float32
// Weight = (q−16)·d with q's fifth bit from qh, as decodeQ5_0.
TEXT ·q50DotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	VPBROADCASTD kdotNib<>(SB), X14
	VPBROADCASTD kdotB16<>(SB), X13
q50block:
	F16_BCAST(0, Y6, X6)
	NIB_SPLIT(6)
	Q5_HIGH(2)
	VPSUBB X13, X5, X5
	VPSUBB X13, X4, X4
	WIDEN32(VPMOVSXBD)
	SCALE32
	FMA32
	NEXT32(22, q50block)
	KDOT_SUM

// func q51DotAVX2(row *byte, x *float32, nb int) float32
// Weight = q·d + m with q's fifth bit from qh, as decodeQ5_1.
TEXT ·q51DotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	VPBROADCASTD kdotNib<>(SB), X14
	VPBROADCASTD kdotB16<>(SB), X13
q51block:
	F16_BCAST(0, Y6, X6)
	F16_BCAST(2, Y11, X11)
	NIB_SPLIT(8)
	Q5_HIGH(4)
	WIDEN32(VPMOVZXBD)
	SCALE32
	ADDMIN32
	FMA32
	NEXT32(24, q51block)
	KDOT_SUM

// func mxfp4DotAVX2(row *byte, x *float32, nb int) float32
// Weight = kvalue·d with d = 2^(e−128) from the E8M0 byte e (as e8m0Half:
// subnormal bits for e < 2), as decodeMXFP4.
TEXT ·mxfp4DotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	VPBROADCASTD kdotNib<>(SB), X14
	VMOVDQU kdotMXFP4<>(SB), X13
mxfp4block:
	MOVBLZX (SI), AX
	LEAL -1(AX), DX
	SHLL $23, DX
	MOVL $0x00200000, R8
	MOVL $0x00400000, R9
	CMPL AX, $1
	CMOVLEQ R9, R8
	CMPL AX, $2
	CMOVLCS R8, DX
	MOVL DX, X6
	VBROADCASTSS X6, Y6
	NIB_SPLIT(1)
	VPSHUFB X5, X13, X5
	VPSHUFB X4, X13, X4
	WIDEN32(VPMOVSXBD)
	SCALE32
	FMA32
	NEXT32(17, mxfp4block)
	KDOT_SUM

// The IQ2_XXS and IQ3_XXS lattices: each group of 8 weights is a row of
// the expanded grid (iq2xxsGrid: 8 floats; iq3xxsGrid: two rows of 4)
// times the sub-block's db, times the ±1 row of signTab chosen by
// ksigns of 7 stored sign bits, as decodeIQ2XXS and decodeIQ3XXS form
// them ((db·g)·s, s exact). Registers: R10 the grid, R11 signTab, R12
// ksigns, DX the sub-block's 32-bit word, Y7 its db, X6 the block's d.

DATA kdotHalf<>+0(SB)/4, $0x3f000000
GLOBL kdotHalf<>(SB), RODATA|NOPTR, $4
DATA kdotQuarter<>+0(SB)/4, $0x3e800000
GLOBL kdotQuarter<>(SB), RODATA|NOPTR, $4

// IQ_DB: Y7 = d·(0.5 + (DX>>28))·k, rounded after each operation as the
// decoders' float32 expression (k at kconst).
#define IQ_DB(kconst) \
	MOVL DX, AX \
	SHRL $28, AX \
	CVTSL2SS AX, X7 \
	ADDSS kdotHalf<>(SB), X7 \
	MULSS X6, X7 \
	MULSS kconst(SB), X7 \
	VBROADCASTSS X7, Y7

// IQ_SIGNS: Y9 = signTab[ksigns[(DX>>sh)&127]].
#define IQ_SIGNS(sh) \
	MOVL DX, BX \
	SHRL $sh, BX \
	ANDL $127, BX \
	MOVBLZX (R12)(BX*1), BX \
	SHLQ $5, BX \
	VMOVUPS (R11)(BX*1), Y9

#define IQ2XXS_SCALE(aoff) \
	MOVL aoff(SI), DX \
	IQ_DB(kdotQuarter<>)

// IQ2XXS_GRP: the 8 weights of grid index byte qoff(SI), signs from bit
// sh of DX, into acc with the x at xo(DI).
#define IQ2XXS_GRP(qoff, sh, xo, acc) \
	MOVBLZX qoff(SI), AX \
	SHLQ $5, AX \
	VMOVUPS (R10)(AX*1), Y8 \
	IQ_SIGNS(sh) \
	VMULPS Y8, Y7, Y8 \
	VMULPS Y9, Y8, Y8 \
	VFMADD231PS xo(DI), Y8, acc

#define IQ3XXS_SCALE(aoff) \
	MOVL aoff(SI), DX \
	IQ_DB(kdotHalf<>)

// IQ3XXS_GRP: grid rows of index bytes q1, q2 (4 weights each).
#define IQ3XXS_GRP(q1, q2, sh, xo, acc) \
	MOVBLZX q1(SI), AX \
	SHLQ $4, AX \
	MOVBLZX q2(SI), R13 \
	SHLQ $4, R13 \
	VMOVUPS (R10)(AX*1), X8 \
	VINSERTF128 $1, (R10)(R13*1), Y8, Y8 \
	IQ_SIGNS(sh) \
	VMULPS Y8, Y7, Y8 \
	VMULPS Y9, Y8, Y8 \
	VFMADD231PS xo(DI), Y8, acc

#define IQ_TABLES(grid) \
	LEAQ grid(SB), R10 \
	LEAQ ·signTab(SB), R11 \
	LEAQ ·ksigns(SB), R12

#define IQ_D \
	MOVWLZX (SI), AX \
	MOVQ AX, X6 \
	VCVTPH2PS X6, X6

// func iq2xxsDotAVX2(row *byte, x *float32, nb int) float32
// Weight = (d·(0.5+s)·0.25·grid)·sign, as decodeIQ2XXS.
TEXT ·iq2xxsDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq2xxsGrid)
iq2xxsblock:
	IQ_D
	IQ2XXS_SCALE(6)
	IQ2XXS_GRP(2, 0, 0, Y0)
	IQ2XXS_GRP(3, 7, 32, Y1)
	IQ2XXS_GRP(4, 14, 64, Y2)
	IQ2XXS_GRP(5, 21, 96, Y3)
	IQ2XXS_SCALE(14)
	IQ2XXS_GRP(10, 0, 128, Y0)
	IQ2XXS_GRP(11, 7, 160, Y1)
	IQ2XXS_GRP(12, 14, 192, Y2)
	IQ2XXS_GRP(13, 21, 224, Y3)
	IQ2XXS_SCALE(22)
	IQ2XXS_GRP(18, 0, 256, Y0)
	IQ2XXS_GRP(19, 7, 288, Y1)
	IQ2XXS_GRP(20, 14, 320, Y2)
	IQ2XXS_GRP(21, 21, 352, Y3)
	IQ2XXS_SCALE(30)
	IQ2XXS_GRP(26, 0, 384, Y0)
	IQ2XXS_GRP(27, 7, 416, Y1)
	IQ2XXS_GRP(28, 14, 448, Y2)
	IQ2XXS_GRP(29, 21, 480, Y3)
	IQ2XXS_SCALE(38)
	IQ2XXS_GRP(34, 0, 512, Y0)
	IQ2XXS_GRP(35, 7, 544, Y1)
	IQ2XXS_GRP(36, 14, 576, Y2)
	IQ2XXS_GRP(37, 21, 608, Y3)
	IQ2XXS_SCALE(46)
	IQ2XXS_GRP(42, 0, 640, Y0)
	IQ2XXS_GRP(43, 7, 672, Y1)
	IQ2XXS_GRP(44, 14, 704, Y2)
	IQ2XXS_GRP(45, 21, 736, Y3)
	IQ2XXS_SCALE(54)
	IQ2XXS_GRP(50, 0, 768, Y0)
	IQ2XXS_GRP(51, 7, 800, Y1)
	IQ2XXS_GRP(52, 14, 832, Y2)
	IQ2XXS_GRP(53, 21, 864, Y3)
	IQ2XXS_SCALE(62)
	IQ2XXS_GRP(58, 0, 896, Y0)
	IQ2XXS_GRP(59, 7, 928, Y1)
	IQ2XXS_GRP(60, 14, 960, Y2)
	IQ2XXS_GRP(61, 21, 992, Y3)
	ADDQ $66, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq2xxsblock
	KDOT_SUM

// func iq3xxsDotAVX2(row *byte, x *float32, nb int) float32
// Weight = (d·(0.5+s)·0.5·grid)·sign, as decodeIQ3XXS.
TEXT ·iq3xxsDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq3xxsGrid)
iq3xxsblock:
	IQ_D
	IQ3XXS_SCALE(66)
	IQ3XXS_GRP(2, 3, 0, 0, Y0)
	IQ3XXS_GRP(4, 5, 7, 32, Y1)
	IQ3XXS_GRP(6, 7, 14, 64, Y2)
	IQ3XXS_GRP(8, 9, 21, 96, Y3)
	IQ3XXS_SCALE(70)
	IQ3XXS_GRP(10, 11, 0, 128, Y0)
	IQ3XXS_GRP(12, 13, 7, 160, Y1)
	IQ3XXS_GRP(14, 15, 14, 192, Y2)
	IQ3XXS_GRP(16, 17, 21, 224, Y3)
	IQ3XXS_SCALE(74)
	IQ3XXS_GRP(18, 19, 0, 256, Y0)
	IQ3XXS_GRP(20, 21, 7, 288, Y1)
	IQ3XXS_GRP(22, 23, 14, 320, Y2)
	IQ3XXS_GRP(24, 25, 21, 352, Y3)
	IQ3XXS_SCALE(78)
	IQ3XXS_GRP(26, 27, 0, 384, Y0)
	IQ3XXS_GRP(28, 29, 7, 416, Y1)
	IQ3XXS_GRP(30, 31, 14, 448, Y2)
	IQ3XXS_GRP(32, 33, 21, 480, Y3)
	IQ3XXS_SCALE(82)
	IQ3XXS_GRP(34, 35, 0, 512, Y0)
	IQ3XXS_GRP(36, 37, 7, 544, Y1)
	IQ3XXS_GRP(38, 39, 14, 576, Y2)
	IQ3XXS_GRP(40, 41, 21, 608, Y3)
	IQ3XXS_SCALE(86)
	IQ3XXS_GRP(42, 43, 0, 640, Y0)
	IQ3XXS_GRP(44, 45, 7, 672, Y1)
	IQ3XXS_GRP(46, 47, 14, 704, Y2)
	IQ3XXS_GRP(48, 49, 21, 736, Y3)
	IQ3XXS_SCALE(90)
	IQ3XXS_GRP(50, 51, 0, 768, Y0)
	IQ3XXS_GRP(52, 53, 7, 800, Y1)
	IQ3XXS_GRP(54, 55, 14, 832, Y2)
	IQ3XXS_GRP(56, 57, 21, 864, Y3)
	IQ3XXS_SCALE(94)
	IQ3XXS_GRP(58, 59, 0, 896, Y0)
	IQ3XXS_GRP(60, 61, 7, 928, Y1)
	IQ3XXS_GRP(62, 63, 14, 960, Y2)
	IQ3XXS_GRP(64, 65, 21, 992, Y3)
	ADDQ $98, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq3xxsblock
	KDOT_SUM

// IQ2_XS, IQ2_S and IQ3_S: the same product (db·grid)·sign, with a scale
// nibble a pair of groups (IQ2) or a sub-block (IQ3_S: db = d·(1+2s)),
// 9- and 10-bit grid indices (the high bits in qh for IQ2_S and IQ3_S),
// and sign bytes stored whole (IQ2_S, IQ3_S) or through ksigns (IQ2_XS).

// IQ2_DBN: Y7 = d·(0.5 + the nibble at bit sh of byte off)·0.25.
#define IQ2_DBN(off, sh) \
	MOVBLZX off(SI), AX \
	SHRL $sh, AX \
	ANDL $15, AX \
	CVTSL2SS AX, X7 \
	ADDSS kdotHalf<>(SB), X7 \
	MULSS X6, X7 \
	MULSS kdotQuarter<>(SB), X7 \
	VBROADCASTSS X7, Y7

// IQ_APPLY: acc += ((Y7·Y8)·Y9)·x at xo(DI).
#define IQ_APPLY(xo, acc) \
	VMULPS Y8, Y7, Y8 \
	VMULPS Y9, Y8, Y8 \
	VFMADD231PS xo(DI), Y8, acc

// IQ_SIGNB: Y9 = signTab[the byte at off(SI)].
#define IQ_SIGNB(off) \
	MOVBLZX off(SI), BX \
	SHLQ $5, BX \
	VMOVUPS (R11)(BX*1), Y9

// IQ2XS_GRP: the u16 at qoff: grid index (9 bits), ksigns index (7).
#define IQ2XS_GRP(qoff, xo, acc) \
	MOVWLZX qoff(SI), AX \
	MOVL AX, BX \
	ANDL $511, AX \
	SHLQ $5, AX \
	VMOVUPS (R10)(AX*1), Y8 \
	SHRL $9, BX \
	MOVBLZX (R12)(BX*1), BX \
	SHLQ $5, BX \
	VMOVUPS (R11)(BX*1), Y9 \
	IQ_APPLY(xo, acc)

// IQ2S_GRP: grid index qs byte | (qh byte << hsh) & 0x300; signs byte.
#define IQ2S_GRP(qoff, hoff, hsh, soff, xo, acc) \
	MOVBLZX qoff(SI), AX \
	MOVBLZX hoff(SI), BX \
	SHLL $hsh, BX \
	ANDL $0x300, BX \
	ORL BX, AX \
	SHLQ $5, AX \
	VMOVUPS (R10)(AX*1), Y8 \
	IQ_SIGNB(soff) \
	IQ_APPLY(xo, acc)

// IQ3S_DB: Y7 = d·(1 + 2·the nibble at bit sh of byte off).
#define IQ3S_DB(off, sh) \
	MOVBLZX off(SI), AX \
	SHRL $sh, AX \
	ANDL $15, AX \
	LEAL 1(AX)(AX*1), AX \
	CVTSL2SS AX, X7 \
	MULSS X6, X7 \
	VBROADCASTSS X7, Y7

// IQ3S_GRP: two 4-wide grid rows, indices qs byte | (qh << sh) & 256.
#define IQ3S_GRP(q1, q2, hoff, sh1, sh2, soff, xo, acc) \
	MOVBLZX q1(SI), AX \
	MOVBLZX hoff(SI), BX \
	SHLL $sh1, BX \
	ANDL $256, BX \
	ORL BX, AX \
	SHLQ $4, AX \
	MOVBLZX q2(SI), R13 \
	MOVBLZX hoff(SI), BX \
	SHLL $sh2, BX \
	ANDL $256, BX \
	ORL BX, R13 \
	SHLQ $4, R13 \
	VMOVUPS (R10)(AX*1), X8 \
	VINSERTF128 $1, (R10)(R13*1), Y8, Y8 \
	IQ_SIGNB(soff) \
	IQ_APPLY(xo, acc)

// func iq2xsDotAVX2(row *byte, x *float32, nb int) float32
// Weight = (d·(0.5+s)·0.25·grid)·sign, as decodeIQ2XS.
TEXT ·iq2xsDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq2xsGrid)
iq2xsblock:
	IQ_D
	IQ2_DBN(66, 0)
	IQ2XS_GRP(2, 0, Y0)
	IQ2XS_GRP(4, 32, Y1)
	IQ2_DBN(66, 4)
	IQ2XS_GRP(6, 64, Y2)
	IQ2XS_GRP(8, 96, Y3)
	IQ2_DBN(67, 0)
	IQ2XS_GRP(10, 128, Y0)
	IQ2XS_GRP(12, 160, Y1)
	IQ2_DBN(67, 4)
	IQ2XS_GRP(14, 192, Y2)
	IQ2XS_GRP(16, 224, Y3)
	IQ2_DBN(68, 0)
	IQ2XS_GRP(18, 256, Y0)
	IQ2XS_GRP(20, 288, Y1)
	IQ2_DBN(68, 4)
	IQ2XS_GRP(22, 320, Y2)
	IQ2XS_GRP(24, 352, Y3)
	IQ2_DBN(69, 0)
	IQ2XS_GRP(26, 384, Y0)
	IQ2XS_GRP(28, 416, Y1)
	IQ2_DBN(69, 4)
	IQ2XS_GRP(30, 448, Y2)
	IQ2XS_GRP(32, 480, Y3)
	IQ2_DBN(70, 0)
	IQ2XS_GRP(34, 512, Y0)
	IQ2XS_GRP(36, 544, Y1)
	IQ2_DBN(70, 4)
	IQ2XS_GRP(38, 576, Y2)
	IQ2XS_GRP(40, 608, Y3)
	IQ2_DBN(71, 0)
	IQ2XS_GRP(42, 640, Y0)
	IQ2XS_GRP(44, 672, Y1)
	IQ2_DBN(71, 4)
	IQ2XS_GRP(46, 704, Y2)
	IQ2XS_GRP(48, 736, Y3)
	IQ2_DBN(72, 0)
	IQ2XS_GRP(50, 768, Y0)
	IQ2XS_GRP(52, 800, Y1)
	IQ2_DBN(72, 4)
	IQ2XS_GRP(54, 832, Y2)
	IQ2XS_GRP(56, 864, Y3)
	IQ2_DBN(73, 0)
	IQ2XS_GRP(58, 896, Y0)
	IQ2XS_GRP(60, 928, Y1)
	IQ2_DBN(73, 4)
	IQ2XS_GRP(62, 960, Y2)
	IQ2XS_GRP(64, 992, Y3)
	ADDQ $74, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq2xsblock
	KDOT_SUM

// func iq2sDotAVX2(row *byte, x *float32, nb int) float32
// Weight = (d·(0.5+s)·0.25·grid)·sign, as decodeIQ2S.
TEXT ·iq2sDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq2sGrid)
iq2sblock:
	IQ_D
	IQ2_DBN(74, 0)
	IQ2S_GRP(2, 66, 8, 34, 0, Y0)
	IQ2S_GRP(3, 66, 6, 35, 32, Y1)
	IQ2_DBN(74, 4)
	IQ2S_GRP(4, 66, 4, 36, 64, Y2)
	IQ2S_GRP(5, 66, 2, 37, 96, Y3)
	IQ2_DBN(75, 0)
	IQ2S_GRP(6, 67, 8, 38, 128, Y0)
	IQ2S_GRP(7, 67, 6, 39, 160, Y1)
	IQ2_DBN(75, 4)
	IQ2S_GRP(8, 67, 4, 40, 192, Y2)
	IQ2S_GRP(9, 67, 2, 41, 224, Y3)
	IQ2_DBN(76, 0)
	IQ2S_GRP(10, 68, 8, 42, 256, Y0)
	IQ2S_GRP(11, 68, 6, 43, 288, Y1)
	IQ2_DBN(76, 4)
	IQ2S_GRP(12, 68, 4, 44, 320, Y2)
	IQ2S_GRP(13, 68, 2, 45, 352, Y3)
	IQ2_DBN(77, 0)
	IQ2S_GRP(14, 69, 8, 46, 384, Y0)
	IQ2S_GRP(15, 69, 6, 47, 416, Y1)
	IQ2_DBN(77, 4)
	IQ2S_GRP(16, 69, 4, 48, 448, Y2)
	IQ2S_GRP(17, 69, 2, 49, 480, Y3)
	IQ2_DBN(78, 0)
	IQ2S_GRP(18, 70, 8, 50, 512, Y0)
	IQ2S_GRP(19, 70, 6, 51, 544, Y1)
	IQ2_DBN(78, 4)
	IQ2S_GRP(20, 70, 4, 52, 576, Y2)
	IQ2S_GRP(21, 70, 2, 53, 608, Y3)
	IQ2_DBN(79, 0)
	IQ2S_GRP(22, 71, 8, 54, 640, Y0)
	IQ2S_GRP(23, 71, 6, 55, 672, Y1)
	IQ2_DBN(79, 4)
	IQ2S_GRP(24, 71, 4, 56, 704, Y2)
	IQ2S_GRP(25, 71, 2, 57, 736, Y3)
	IQ2_DBN(80, 0)
	IQ2S_GRP(26, 72, 8, 58, 768, Y0)
	IQ2S_GRP(27, 72, 6, 59, 800, Y1)
	IQ2_DBN(80, 4)
	IQ2S_GRP(28, 72, 4, 60, 832, Y2)
	IQ2S_GRP(29, 72, 2, 61, 864, Y3)
	IQ2_DBN(81, 0)
	IQ2S_GRP(30, 73, 8, 62, 896, Y0)
	IQ2S_GRP(31, 73, 6, 63, 928, Y1)
	IQ2_DBN(81, 4)
	IQ2S_GRP(32, 73, 4, 64, 960, Y2)
	IQ2S_GRP(33, 73, 2, 65, 992, Y3)
	ADDQ $82, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq2sblock
	KDOT_SUM

// func iq3sDotAVX2(row *byte, x *float32, nb int) float32
// Weight = (d·(1+2s)·grid)·sign, as decodeIQ3S.
TEXT ·iq3sDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq3sGrid)
iq3sblock:
	IQ_D
	IQ3S_DB(106, 0)
	IQ3S_GRP(2, 3, 66, 8, 7, 74, 0, Y0)
	IQ3S_GRP(4, 5, 66, 6, 5, 75, 32, Y1)
	IQ3S_GRP(6, 7, 66, 4, 3, 76, 64, Y2)
	IQ3S_GRP(8, 9, 66, 2, 1, 77, 96, Y3)
	IQ3S_DB(106, 4)
	IQ3S_GRP(10, 11, 67, 8, 7, 78, 128, Y0)
	IQ3S_GRP(12, 13, 67, 6, 5, 79, 160, Y1)
	IQ3S_GRP(14, 15, 67, 4, 3, 80, 192, Y2)
	IQ3S_GRP(16, 17, 67, 2, 1, 81, 224, Y3)
	IQ3S_DB(107, 0)
	IQ3S_GRP(18, 19, 68, 8, 7, 82, 256, Y0)
	IQ3S_GRP(20, 21, 68, 6, 5, 83, 288, Y1)
	IQ3S_GRP(22, 23, 68, 4, 3, 84, 320, Y2)
	IQ3S_GRP(24, 25, 68, 2, 1, 85, 352, Y3)
	IQ3S_DB(107, 4)
	IQ3S_GRP(26, 27, 69, 8, 7, 86, 384, Y0)
	IQ3S_GRP(28, 29, 69, 6, 5, 87, 416, Y1)
	IQ3S_GRP(30, 31, 69, 4, 3, 88, 448, Y2)
	IQ3S_GRP(32, 33, 69, 2, 1, 89, 480, Y3)
	IQ3S_DB(108, 0)
	IQ3S_GRP(34, 35, 70, 8, 7, 90, 512, Y0)
	IQ3S_GRP(36, 37, 70, 6, 5, 91, 544, Y1)
	IQ3S_GRP(38, 39, 70, 4, 3, 92, 576, Y2)
	IQ3S_GRP(40, 41, 70, 2, 1, 93, 608, Y3)
	IQ3S_DB(108, 4)
	IQ3S_GRP(42, 43, 71, 8, 7, 94, 640, Y0)
	IQ3S_GRP(44, 45, 71, 6, 5, 95, 672, Y1)
	IQ3S_GRP(46, 47, 71, 4, 3, 96, 704, Y2)
	IQ3S_GRP(48, 49, 71, 2, 1, 97, 736, Y3)
	IQ3S_DB(109, 0)
	IQ3S_GRP(50, 51, 72, 8, 7, 98, 768, Y0)
	IQ3S_GRP(52, 53, 72, 6, 5, 99, 800, Y1)
	IQ3S_GRP(54, 55, 72, 4, 3, 100, 832, Y2)
	IQ3S_GRP(56, 57, 72, 2, 1, 101, 864, Y3)
	IQ3S_DB(109, 4)
	IQ3S_GRP(58, 59, 73, 8, 7, 102, 896, Y0)
	IQ3S_GRP(60, 61, 73, 6, 5, 103, 928, Y1)
	IQ3S_GRP(62, 63, 73, 4, 3, 104, 960, Y2)
	IQ3S_GRP(64, 65, 73, 2, 1, 105, 992, Y3)
	ADDQ $110, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq3sblock
	KDOT_SUM

// IQ1_S and IQ1_M: weight = dl·(grid + delta), the grid row (of
// iq1sGrid, values −1, 0, 1) plus ±0.125 exact, times the group's dl
// (d·(2s+1)), as decodeIQ1S and decodeIQ1M.

// IQ1_DL: reg = d·(2·((DX>>sh)&7)+1), broadcast (X6: d).
#define IQ1_DL(sh, xreg, reg) \
	MOVL DX, AX \
	SHRL $sh, AX \
	ANDL $7, AX \
	LEAL 1(AX)(AX*1), AX \
	CVTSL2SS AX, xreg \
	MULSS X6, xreg \
	VBROADCASTSS xreg, reg

// IQ1_DELTA: Y10 = ±0.125, negative where the bit at BX's bit 31 is set.
#define IQ1_DELTA \
	ORL $0x3e000000, BX \
	MOVQ BX, X10 \
	VBROADCASTSS X10, Y10

// IQ1_APPLY: acc += (dl·(grid row AX + Y10))·x at xo.
#define IQ1_APPLY(dl, xo, acc) \
	SHLQ $5, AX \
	VADDPS (R10)(AX*1), Y10, Y8 \
	VMULPS Y8, dl, Y8 \
	VFMADD231PS xo(DI), Y8, acc

// IQ1S_GRP: index qs byte | ((DX>>sh)&7)<<8.
#define IQ1S_GRP(qoff, sh, xo, acc) \
	MOVBLZX qoff(SI), AX \
	MOVL DX, BX \
	SHRL $sh, BX \
	ANDL $7, BX \
	SHLL $8, BX \
	ORL BX, AX \
	IQ1_APPLY(Y7, xo, acc)

// func iq1sDotAVX2(row *byte, x *float32, nb int) float32
TEXT ·iq1sDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	LEAQ ·iq1sGrid(SB), R10
iq1sblock:
	IQ_D
	MOVWLZX 34(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(2, 0, 0, Y0)
	IQ1S_GRP(3, 3, 32, Y1)
	IQ1S_GRP(4, 6, 64, Y2)
	IQ1S_GRP(5, 9, 96, Y3)
	MOVWLZX 36(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(6, 0, 128, Y0)
	IQ1S_GRP(7, 3, 160, Y1)
	IQ1S_GRP(8, 6, 192, Y2)
	IQ1S_GRP(9, 9, 224, Y3)
	MOVWLZX 38(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(10, 0, 256, Y0)
	IQ1S_GRP(11, 3, 288, Y1)
	IQ1S_GRP(12, 6, 320, Y2)
	IQ1S_GRP(13, 9, 352, Y3)
	MOVWLZX 40(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(14, 0, 384, Y0)
	IQ1S_GRP(15, 3, 416, Y1)
	IQ1S_GRP(16, 6, 448, Y2)
	IQ1S_GRP(17, 9, 480, Y3)
	MOVWLZX 42(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(18, 0, 512, Y0)
	IQ1S_GRP(19, 3, 544, Y1)
	IQ1S_GRP(20, 6, 576, Y2)
	IQ1S_GRP(21, 9, 608, Y3)
	MOVWLZX 44(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(22, 0, 640, Y0)
	IQ1S_GRP(23, 3, 672, Y1)
	IQ1S_GRP(24, 6, 704, Y2)
	IQ1S_GRP(25, 9, 736, Y3)
	MOVWLZX 46(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(26, 0, 768, Y0)
	IQ1S_GRP(27, 3, 800, Y1)
	IQ1S_GRP(28, 6, 832, Y2)
	IQ1S_GRP(29, 9, 864, Y3)
	MOVWLZX 48(SI), DX
	IQ1_DL(12, X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(30, 0, 896, Y0)
	IQ1S_GRP(31, 3, 928, Y1)
	IQ1S_GRP(32, 6, 960, Y2)
	IQ1S_GRP(33, 9, 992, Y3)
	ADDQ $50, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq1sblock
	KDOT_SUM

// IQ1M_GRP: index qs byte | (qh byte << hsh) & 0x700, the delta's sign
// the qh byte's bit hb (moved to bit 31 by dsh).
#define IQ1M_GRP(qoff, hoff, hsh, hb, dsh, dl, xo, acc) \
	MOVBLZX qoff(SI), AX \
	MOVBLZX hoff(SI), BX \
	SHLL $hsh, BX \
	ANDL $0x700, BX \
	ORL BX, AX \
	MOVBLZX hoff(SI), BX \
	ANDL $hb, BX \
	SHLL $dsh, BX \
	IQ1_DELTA \
	IQ1_APPLY(dl, xo, acc)

// func iq1mDotAVX2(row *byte, x *float32, nb int) float32
// d is the f16 of the scale words' top nibbles.
TEXT ·iq1mDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	LEAQ ·iq1sGrid(SB), R10
iq1mblock:
	MOVWLZX 48(SI), AX
	SHRL $12, AX
	MOVWLZX 50(SI), BX
	SHRL $8, BX
	ANDL $0xf0, BX
	ORL BX, AX
	MOVWLZX 52(SI), BX
	SHRL $4, BX
	ANDL $0xf00, BX
	ORL BX, AX
	MOVWLZX 54(SI), BX
	ANDL $0xf000, BX
	ORL BX, AX
	MOVQ AX, X6
	VCVTPH2PS X6, X6
	MOVWLZX 48(SI), DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(0, 32, 8, 0x08, 28, Y7, 0, Y0)
	IQ1M_GRP(1, 32, 4, 0x80, 24, Y7, 32, Y1)
	IQ1M_GRP(2, 33, 8, 0x08, 28, Y11, 64, Y2)
	IQ1M_GRP(3, 33, 4, 0x80, 24, Y11, 96, Y3)
	MOVWLZX 48(SI), DX
	SHRL $6, DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(4, 34, 8, 0x08, 28, Y7, 128, Y0)
	IQ1M_GRP(5, 34, 4, 0x80, 24, Y7, 160, Y1)
	IQ1M_GRP(6, 35, 8, 0x08, 28, Y11, 192, Y2)
	IQ1M_GRP(7, 35, 4, 0x80, 24, Y11, 224, Y3)
	MOVWLZX 50(SI), DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(8, 36, 8, 0x08, 28, Y7, 256, Y0)
	IQ1M_GRP(9, 36, 4, 0x80, 24, Y7, 288, Y1)
	IQ1M_GRP(10, 37, 8, 0x08, 28, Y11, 320, Y2)
	IQ1M_GRP(11, 37, 4, 0x80, 24, Y11, 352, Y3)
	MOVWLZX 50(SI), DX
	SHRL $6, DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(12, 38, 8, 0x08, 28, Y7, 384, Y0)
	IQ1M_GRP(13, 38, 4, 0x80, 24, Y7, 416, Y1)
	IQ1M_GRP(14, 39, 8, 0x08, 28, Y11, 448, Y2)
	IQ1M_GRP(15, 39, 4, 0x80, 24, Y11, 480, Y3)
	MOVWLZX 52(SI), DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(16, 40, 8, 0x08, 28, Y7, 512, Y0)
	IQ1M_GRP(17, 40, 4, 0x80, 24, Y7, 544, Y1)
	IQ1M_GRP(18, 41, 8, 0x08, 28, Y11, 576, Y2)
	IQ1M_GRP(19, 41, 4, 0x80, 24, Y11, 608, Y3)
	MOVWLZX 52(SI), DX
	SHRL $6, DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(20, 42, 8, 0x08, 28, Y7, 640, Y0)
	IQ1M_GRP(21, 42, 4, 0x80, 24, Y7, 672, Y1)
	IQ1M_GRP(22, 43, 8, 0x08, 28, Y11, 704, Y2)
	IQ1M_GRP(23, 43, 4, 0x80, 24, Y11, 736, Y3)
	MOVWLZX 54(SI), DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(24, 44, 8, 0x08, 28, Y7, 768, Y0)
	IQ1M_GRP(25, 44, 4, 0x80, 24, Y7, 800, Y1)
	IQ1M_GRP(26, 45, 8, 0x08, 28, Y11, 832, Y2)
	IQ1M_GRP(27, 45, 4, 0x80, 24, Y11, 864, Y3)
	MOVWLZX 54(SI), DX
	SHRL $6, DX
	IQ1_DL(0, X7, Y7)
	IQ1_DL(3, X11, Y11)
	IQ1M_GRP(28, 46, 8, 0x08, 28, Y7, 896, Y0)
	IQ1M_GRP(29, 46, 4, 0x80, 24, Y7, 928, Y1)
	IQ1M_GRP(30, 47, 8, 0x08, 28, Y11, 960, Y2)
	IQ1M_GRP(31, 47, 4, 0x80, 24, Y11, 992, Y3)
	ADDQ $56, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq1mblock
	KDOT_SUM
