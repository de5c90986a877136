//go:build amd64

#include "textflag.h"
#include "kdot_amd64.h"

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
	KPREFETCH3
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
	KPREFETCH4
	Q6K_DSCALES
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
	KPREFETCH1
	MOVWLZX (SI), AX
	VMOVQ AX, X6
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
	KPREFETCH3
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
	KPREFETCH1 \
	MOVWLZX (SI), AX \
	VMOVQ AX, X6 \
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

// IQ4XS_SCALES puts a block's eight d·(scale−32) (iq4xsScale) in the
// frame (0(SP)..31(SP)).
#define IQ4XS_SCALES \
	MOVL 4(SI), AX \
	VMOVQ AX, X4 \
	VPBROADCASTD X4, Y4 \
	VPSRLVD kdotShr4<>(SB), Y4, Y4 \
	VPBROADCASTD kdotMask15<>(SB), Y7 \
	VPAND Y7, Y4, Y4 \
	MOVWLZX 2(SI), AX \
	VMOVQ AX, X5 \
	VPBROADCASTD X5, Y5 \
	VPSRLVD kdotShr2<>(SB), Y5, Y5 \
	VPBROADCASTD kdotMask3<>(SB), Y7 \
	VPAND Y7, Y5, Y5 \
	VPSLLD $4, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	VPBROADCASTD kdotInt32<>(SB), Y7 \
	VPSUBD Y7, Y4, Y4 \
	VCVTDQ2PS Y4, Y4 \
	MOVWLZX (SI), AX \
	VMOVQ AX, X6 \
	VCVTPH2PS X6, X6 \
	VBROADCASTSS X6, Y6 \
	VMULPS Y6, Y4, Y4 \
	VMOVUPS Y4, 0(SP)

// func iq4xsDotAVX2(row *byte, x *float32, nb int) float32
// nb ≥ 1 blocks of 136 bytes: d (f16), the scales' high bits (u16), their
// low nibbles (4 bytes), 8 sub-blocks of 16 quant bytes. Sub-block ib's
// d·(scale−32) (iq4xsScale) go to the frame, eight at a time.
TEXT ·iq4xsDotAVX2(SB), NOSPLIT, $32-28
	KDOT_BEGIN
	IQ4_TABLE
iq4xsblock:
	KPREFETCH3
	IQ4XS_SCALES
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

// IQ4_32W: IQ4_32 sixteen at a time (AVX-512): the same weights, into
// Z0 (the low nibbles' 16) and Z1 (the high ones').
#define IQ4_32W(qb, x0, x1) \
	VMOVDQU qb(SI), X4 \
	VPAND X14, X4, X5 \
	VPSRLW $4, X4, X4 \
	VPAND X14, X4, X4 \
	VPSHUFB X5, X13, X5 \
	VPSHUFB X4, X13, X4 \
	VPMOVSXBD X5, Z7 \
	VPMOVSXBD X4, Z8 \
	VCVTDQ2PS Z7, Z7 \
	VCVTDQ2PS Z8, Z8 \
	VMULPS Z6, Z7, Z7 \
	VMULPS Z6, Z8, Z8 \
	VFMADD231PS x0(DI), Z7, Z0 \
	VFMADD231PS x1(DI), Z8, Z1

// KDOT_SUM512W returns the sum of the 512-bit Z0..Z3.
#define KDOT_SUM512W \
	VADDPS Z1, Z0, Z0 \
	VADDPS Z3, Z2, Z2 \
	VADDPS Z2, Z0, Z0 \
	VEXTRACTF64X4 $1, Z0, Y1 \
	VADDPS Y1, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0 \
	VHADDPS X0, X0, X0 \
	VHADDPS X0, X0, X0 \
	VZEROUPPER \
	VMOVSS X0, ret+24(FP) \
	RET

// NIB4_BLOCKS512 is NIB4_BLOCKS with IQ4_32W.
#define NIB4_BLOCKS512(tbl, loop) \
	KDOT_BEGIN \
	VMOVDQU tbl(SB), X13 \
	VPBROADCASTD kdotNib<>(SB), X14 \
loop: \
	KPREFETCH1 \
	MOVWLZX (SI), AX \
	VMOVQ AX, X6 \
	VCVTPH2PS X6, X6 \
	VBROADCASTSS X6, Z6 \
	IQ4_32W(2, 0, 64) \
	ADDQ $18, SI \
	ADDQ $128, DI \
	DECQ CX \
	JNZ loop \
	KDOT_SUM512W

// func iq4nlDot512(row *byte, x *float32, nb int) float32
TEXT ·iq4nlDot512(SB), NOSPLIT, $0-28
	NIB4_BLOCKS512(kdotIQ4<>, iq4nlblock512)

// func q40Dot512(row *byte, x *float32, nb int) float32
TEXT ·q40Dot512(SB), NOSPLIT, $0-28
	NIB4_BLOCKS512(kdotQ40<>, q40block512)

#define IQ4XS_SUB512(sc, qb, xo) \
	VBROADCASTSS sc(SP), Z6 \
	IQ4_32W(qb, xo, 64+xo)

// func iq4xsDot512(row *byte, x *float32, nb int) float32
TEXT ·iq4xsDot512(SB), NOSPLIT, $32-28
	KDOT_BEGIN
	IQ4_TABLE
iq4xsblock512:
	KPREFETCH3
	IQ4XS_SCALES
	IQ4XS_SUB512(0, 8, 0)
	IQ4XS_SUB512(4, 24, 128)
	IQ4XS_SUB512(8, 40, 256)
	IQ4XS_SUB512(12, 56, 384)
	IQ4XS_SUB512(16, 72, 512)
	IQ4XS_SUB512(20, 88, 640)
	IQ4XS_SUB512(24, 104, 768)
	IQ4XS_SUB512(28, 120, 896)
	ADDQ $136, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ iq4xsblock512
	KDOT_SUM512W

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

// Q3K_SCALES puts a block's sixteen d·(scale−32) in the frame
// (0(SP)..63(SP)): the scales as q3Scales unpacks them, four bytes at a
// time: a0&0x0f.. | (t&0x03..)<<4, a1&0x0f.. | (t>>2&0x03..)<<4,
// a0>>4&0x0f.. | (t>>4&0x03..)<<4, a1>>4&0x0f.. | (t>>6&0x03..)<<4.
#define Q3K_SCALES \
	MOVL 96(SI), R8 \
	MOVL 100(SI), R9 \
	MOVL 104(SI), R10 \
	MOVL R8, AX \
	ANDL $0x0f0f0f0f, AX \
	MOVL R10, BX \
	ANDL $0x03030303, BX \
	SHLL $4, BX \
	ORL BX, AX \
	MOVL R9, DX \
	ANDL $0x0f0f0f0f, DX \
	MOVL R10, BX \
	SHRL $2, BX \
	ANDL $0x03030303, BX \
	SHLL $4, BX \
	ORL BX, DX \
	SHLQ $32, DX \
	ORQ DX, AX \
	VMOVQ AX, X4 \
	MOVL R8, AX \
	SHRL $4, AX \
	ANDL $0x0f0f0f0f, AX \
	MOVL R10, BX \
	SHRL $4, BX \
	ANDL $0x03030303, BX \
	SHLL $4, BX \
	ORL BX, AX \
	MOVL R9, DX \
	SHRL $4, DX \
	ANDL $0x0f0f0f0f, DX \
	MOVL R10, BX \
	SHRL $6, BX \
	ANDL $0x03030303, BX \
	SHLL $4, BX \
	ORL BX, DX \
	SHLQ $32, DX \
	ORQ DX, AX \
	VMOVQ AX, X5 \
	MOVWLZX 108(SI), AX \
	VMOVQ AX, X6 \
	VCVTPH2PS X6, X6 \
	VBROADCASTSS X6, Y6 \
	VPBROADCASTD kdotInt32<>(SB), Y7 \
	VPMOVZXBD X4, Y4 \
	VPMOVZXBD X5, Y5 \
	VPSUBD Y7, Y4, Y4 \
	VPSUBD Y7, Y5, Y5 \
	VCVTDQ2PS Y4, Y4 \
	VCVTDQ2PS Y5, Y5 \
	VMULPS Y6, Y4, Y4 \
	VMULPS Y6, Y5, Y5 \
	VMOVUPS Y4, 0(SP) \
	VMOVUPS Y5, 32(SP)

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
	KPREFETCH2
	Q3K_SCALES
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

// Q3K_STEP16 is Q3K_STEP sixteen at a time (AVX-512): Q in Z4, H in Z5.
#define Q3K_STEP16(qs, hs, sc, xo, acc) \
	VPSRLD $qs, Z4, Z6 \
	VPANDD Z15, Z6, Z6 \
	VPSRLD $hs, Z5, Z7 \
	VPANDD Z14, Z7, Z7 \
	VPSLLD $2, Z7, Z7 \
	VPADDD Z7, Z6, Z6 \
	VPSUBD Z13, Z6, Z6 \
	VCVTDQ2PS Z6, Z6 \
	VBROADCASTSS sc(SP), Z8 \
	VMULPS Z8, Z6, Z6 \
	VFMADD231PS xo(DI), Z6, acc

// Q3K_GROUP16: Q3K_GROUP over sixteen quant and hmask bytes (l-values
// sharing one scale of each plane).
#define Q3K_GROUP16(qb, hb, hs, sc, xo) \
	VPMOVZXBD qb(SI), Z4 \
	VPMOVZXBD hb(SI), Z5 \
	Q3K_STEP16(0, hs, sc, xo, Z0) \
	Q3K_STEP16(2, (hs+1), 8+sc, 128+xo, Z1) \
	Q3K_STEP16(4, (hs+2), 16+sc, 256+xo, Z2) \
	Q3K_STEP16(6, (hs+3), 24+sc, 384+xo, Z3)

// func q3kDot512(row *byte, x *float32, nb int) float32
TEXT ·q3kDot512(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VPBROADCASTD kdotMask3<>(SB), Z15
	VPBROADCASTD kdotOne<>(SB), Z14
	VPBROADCASTD kdotFour<>(SB), Z13
q3kblock512:
	KPREFETCH2
	Q3K_SCALES
	Q3K_GROUP16(32, 0, 0, 0, 0)
	Q3K_GROUP16(48, 16, 0, 4, 64)
	Q3K_GROUP16(64, 0, 4, 32, 512)
	Q3K_GROUP16(80, 16, 4, 36, 576)
	ADDQ $110, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q3kblock512
	KDOT_SUM512W

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
	KPREFETCH2
	Q2K_SCALES
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

// Q2K_STEP16 is Q2K_STEP sixteen at a time (AVX-512): Q in Z4.
#define Q2K_STEP16(qs, sc, mc, xo, acc) \
	VPSRLD $qs, Z4, Z6 \
	VPANDD Z15, Z6, Z6 \
	VCVTDQ2PS Z6, Z6 \
	VBROADCASTSS sc(SP), Z8 \
	VBROADCASTSS mc(SP), Z9 \
	VMULPS Z8, Z6, Z6 \
	VSUBPS Z9, Z6, Z6 \
	VFMADD231PS xo(DI), Z6, acc

// Q2K_GROUP16: Q2K_GROUP over sixteen quant bytes (the weights of one
// scale of each plane).
#define Q2K_GROUP16(qb, sc, xo) \
	VPMOVZXBD qb(SI), Z4 \
	Q2K_STEP16(0, sc, 64+sc, xo, Z0) \
	Q2K_STEP16(2, 8+sc, 72+sc, 128+xo, Z1) \
	Q2K_STEP16(4, 16+sc, 80+sc, 256+xo, Z2) \
	Q2K_STEP16(6, 24+sc, 88+sc, 384+xo, Z3)

// func q2kDot512(row *byte, x *float32, nb int) float32
TEXT ·q2kDot512(SB), NOSPLIT, $128-28
	KDOT_BEGIN
	VPBROADCASTD kdotMask3<>(SB), Z15
	VPBROADCASTD kdotMask15<>(SB), Z14
q2kblock512:
	KPREFETCH2
	Q2K_SCALES
	Q2K_GROUP16(16, 0, 0)
	Q2K_GROUP16(32, 4, 64)
	Q2K_GROUP16(48, 32, 512)
	Q2K_GROUP16(64, 36, 576)
	ADDQ $84, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q2kblock512
	KDOT_SUM512W

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
	VMOVQ AX, xreg \
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
	KPREFETCH1
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
	KPREFETCH1
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
	KPREFETCH1
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
	KPREFETCH1
	MOVBLZX (SI), AX
	LEAL -1(AX), DX
	SHLL $23, DX
	MOVL $0x00200000, R8
	MOVL $0x00400000, R9
	CMPL AX, $1
	CMOVLEQ R9, R8
	CMPL AX, $2
	CMOVLCS R8, DX
	VMOVD DX, X6
	VBROADCASTSS X6, Y6
	NIB_SPLIT(1)
	VPSHUFB X5, X13, X5
	VPSHUFB X4, X13, X4
	WIDEN32(VPMOVSXBD)
	SCALE32
	FMA32
	NEXT32(17, mxfp4block)
	KDOT_SUM
