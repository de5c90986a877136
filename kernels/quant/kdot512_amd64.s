//go:build amd64

#include "textflag.h"
#include "kdot_amd64.h"

// AVX-512 forms of the Q4_K and Q6_K row dots (kdot_amd64.s), the two
// formats a Q4_K_M model's decode spends its time in: the same weights,
// formed by the same float32 products and differences, sixteen at a time
// instead of eight, into four 512-bit accumulators. Chosen where the CPU
// has AVX-512 (kdot_amd64.go): Zen 5's 512-bit units run a group in the
// time the AVX2 loop takes for half of it.

DATA k512Mask15<>+0(SB)/4, $0x0000000f
GLOBL k512Mask15<>(SB), RODATA|NOPTR, $4
DATA k512Mask30<>+0(SB)/4, $0x00000030
GLOBL k512Mask30<>(SB), RODATA|NOPTR, $4
DATA k512Int32<>+0(SB)/4, $0x00000020
GLOBL k512Int32<>(SB), RODATA|NOPTR, $4

// KDOT_SUM512 returns the sum of the four 512-bit accumulators.
#define KDOT_SUM512 \
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

// Q6K_GROUP16: Q6K_GROUP over l-values l0..l0+15.
#define Q6K_GROUP16(a, b, h, x0, x1, x2, x3) \
	VPMOVZXBD a(SI), Z4 \
	VPMOVZXBD b(SI), Z5 \
	VPMOVZXBD h(SI), Z6 \
	VPANDD Z15, Z4, Z7 \
	VPSLLD $4, Z6, Z12 \
	VPANDD Z14, Z12, Z12 \
	VPORD Z12, Z7, Z7 \
	VPSUBD Z13, Z7, Z7 \
	VCVTDQ2PS Z7, Z7 \
	VMULPS Z8, Z7, Z7 \
	VFMADD231PS x0(DI), Z7, Z0 \
	VPANDD Z15, Z5, Z7 \
	VPSLLD $2, Z6, Z12 \
	VPANDD Z14, Z12, Z12 \
	VPORD Z12, Z7, Z7 \
	VPSUBD Z13, Z7, Z7 \
	VCVTDQ2PS Z7, Z7 \
	VMULPS Z9, Z7, Z7 \
	VFMADD231PS x1(DI), Z7, Z1 \
	VPSRLD $4, Z4, Z7 \
	VPANDD Z14, Z6, Z12 \
	VPORD Z12, Z7, Z7 \
	VPSUBD Z13, Z7, Z7 \
	VCVTDQ2PS Z7, Z7 \
	VMULPS Z10, Z7, Z7 \
	VFMADD231PS x2(DI), Z7, Z2 \
	VPSRLD $4, Z5, Z7 \
	VPSRLD $2, Z6, Z12 \
	VPANDD Z14, Z12, Z12 \
	VPORD Z12, Z7, Z7 \
	VPSUBD Z13, Z7, Z7 \
	VCVTDQ2PS Z7, Z7 \
	VMULPS Z11, Z7, Z7 \
	VFMADD231PS x3(DI), Z7, Z3

#define Q6K_SCALES16(s0, s1, s2, s3) \
	VBROADCASTSS s0(SP), Z8 \
	VBROADCASTSS s1(SP), Z9 \
	VBROADCASTSS s2(SP), Z10 \
	VBROADCASTSS s3(SP), Z11

// func q6kDot512(row *byte, x *float32, nb int) float32
TEXT ·q6kDot512(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VPBROADCASTD k512Mask15<>(SB), Z15
	VPBROADCASTD k512Mask30<>(SB), Z14
	VPBROADCASTD k512Int32<>(SB), Z13
q6kblock:
	KPREFETCH4
	MOVWLZX 208(SI), AX
	VMOVQ AX, X6
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
	Q6K_SCALES16(0, 8, 16, 24)
	Q6K_GROUP16(0, 32, 128, 0, 128, 256, 384)
	Q6K_SCALES16(4, 12, 20, 28)
	Q6K_GROUP16(16, 48, 144, 64, 192, 320, 448)
	Q6K_SCALES16(32, 40, 48, 56)
	Q6K_GROUP16(64, 96, 160, 512, 640, 768, 896)
	Q6K_SCALES16(36, 44, 52, 60)
	Q6K_GROUP16(80, 112, 176, 576, 704, 832, 960)
	ADDQ $210, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q6kblock
	KDOT_SUM512

DATA k512Mask10<>+0(SB)/4, $0x00000010
GLOBL k512Mask10<>(SB), RODATA|NOPTR, $4

// Q5K_GROUP16: Q5K_GROUP over sixteen quant bytes at qb(SI) and their
// sixteen qh bytes at hb(SI).
#define Q5K_GROUP16(qb, hb, xl, xh, accL, accH, lop, ln, hop, hn) \
	VPMOVZXBD qb(SI), Z4 \
	VPMOVZXBD hb(SI), Z12 \
	VPANDD Z15, Z4, Z5 \
	lop $ln, Z12, Z6 \
	VPANDD Z14, Z6, Z6 \
	VPORD Z6, Z5, Z5 \
	VPSRLD $4, Z4, Z4 \
	hop $hn, Z12, Z6 \
	VPANDD Z14, Z6, Z6 \
	VPORD Z4, Z6, Z6 \
	VCVTDQ2PS Z5, Z5 \
	VCVTDQ2PS Z6, Z6 \
	VMULPS Z8, Z5, Z5 \
	VMULPS Z9, Z6, Z6 \
	VSUBPS Z10, Z5, Z5 \
	VSUBPS Z11, Z6, Z6 \
	VFMADD231PS xl(DI), Z5, accL \
	VFMADD231PS xh(DI), Z6, accH

#define Q5K_PAIR16(s0, m0, qb, xo, lop, ln, hop, hn) \
	VBROADCASTSS s0(SP), Z8 \
	VBROADCASTSS 4+s0(SP), Z9 \
	VBROADCASTSS m0(SP), Z10 \
	VBROADCASTSS 4+m0(SP), Z11 \
	Q5K_GROUP16(qb, 16, xo, 128+xo, Z0, Z1, lop, ln, hop, hn) \
	Q5K_GROUP16(16+qb, 32, 64+xo, 192+xo, Z2, Z3, lop, ln, hop, hn)

// func q5kDot512(row *byte, x *float32, nb int) float32
TEXT ·q5kDot512(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VPBROADCASTD k512Mask15<>(SB), Z15
	VPBROADCASTD k512Mask10<>(SB), Z14
q5kblock:
	KPREFETCH3
	K4_SCALES
	Q5K_PAIR16(0, 32, 48, 0, VPSLLD, 4, VPSLLD, 3)
	Q5K_PAIR16(8, 40, 80, 256, VPSLLD, 2, VPSLLD, 1)
	Q5K_PAIR16(16, 48, 112, 512, VPSLLD, 0, VPSRLD, 1)
	Q5K_PAIR16(24, 56, 144, 768, VPSRLD, 2, VPSRLD, 3)
	ADDQ $176, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q5kblock
	KDOT_SUM512

// func q80Dot512(row *byte, x *float32, nb int) float32
// Q8_0's 32 int8 weights of a block in two groups of sixteen: weight =
// float32(q)·d, as decodeQ8_0.
TEXT ·q80Dot512(SB), NOSPLIT, $0-28
	KDOT_BEGIN
q80block:
	KPREFETCH1
	MOVWLZX (SI), AX
	VMOVQ AX, X6
	VCVTPH2PS X6, X6
	VBROADCASTSS X6, Z6
	VPMOVSXBD 2(SI), Z4
	VPMOVSXBD 18(SI), Z5
	VCVTDQ2PS Z4, Z4
	VCVTDQ2PS Z5, Z5
	VMULPS Z6, Z4, Z4
	VMULPS Z6, Z5, Z5
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	ADDQ $34, SI
	ADDQ $128, DI
	DECQ CX
	JNZ q80block
	KDOT_SUM512

// Q4_K by table lookups. A sub-block's 32 weights take at most sixteen
// values, q·(d·scale) − dmin·min for q = 0..15: Q4K_TABLE forms them once
// (k512Iota times d·scale, then minus dmin·min: the two roundings the
// scalar decoder makes, so every entry is the dequantized weight bit for
// bit), and VPERMPS looks each weight up by its nibble (it takes a dword's
// low four bits as the index, so the low nibble needs no mask). Against
// forming every weight (mask, convert, multiply, subtract): 4096-element
// row 256 against 301 ns; a Qwen3-0.6B-shaped Q4_K_M decodes at 14.0–14.9
// against 12.8–13.9 tok/s on two cores of a Sapphire Rapids-class Xeon,
// ahead in seven interleaved pairs of seven (docs/benchmarks.md, 2026-12-02
// from 00:31). The sums run in the same order as before.

// k512Iota is 0..15 as float32.
DATA k512Iota<>+0(SB)/4, $0x00000000
DATA k512Iota<>+4(SB)/4, $0x3f800000
DATA k512Iota<>+8(SB)/4, $0x40000000
DATA k512Iota<>+12(SB)/4, $0x40400000
DATA k512Iota<>+16(SB)/4, $0x40800000
DATA k512Iota<>+20(SB)/4, $0x40a00000
DATA k512Iota<>+24(SB)/4, $0x40c00000
DATA k512Iota<>+28(SB)/4, $0x40e00000
DATA k512Iota<>+32(SB)/4, $0x41000000
DATA k512Iota<>+36(SB)/4, $0x41100000
DATA k512Iota<>+40(SB)/4, $0x41200000
DATA k512Iota<>+44(SB)/4, $0x41300000
DATA k512Iota<>+48(SB)/4, $0x41400000
DATA k512Iota<>+52(SB)/4, $0x41500000
DATA k512Iota<>+56(SB)/4, $0x41600000
DATA k512Iota<>+60(SB)/4, $0x41700000
GLOBL k512Iota<>(SB), RODATA|NOPTR, $64

// Q4K_TABLE puts in dst the sub-block's sixteen weights, from its d·scale
// at s(SP) and dmin·min at m(SP) (K4_SCALES; Z14: k512Iota).
#define Q4K_TABLE(s, m, dst) \
	VBROADCASTSS s(SP), dst \
	VMULPS dst, Z14, dst \
	VBROADCASTSS m(SP), Z12 \
	VSUBPS Z12, dst, dst

// Q4K_GROUP16: sixteen quant bytes at qb(SI) are 16 weights of the low
// sub-block (table Z8, x at xl(DI)) and 16 of the high one (table Z9, x at
// xh(DI)).
#define Q4K_GROUP16(qb, xl, xh, accL, accH) \
	VPMOVZXBD qb(SI), Z4 \
	VPSRLD $4, Z4, Z6 \
	VPERMPS Z8, Z4, Z5 \
	VPERMPS Z9, Z6, Z6 \
	VFMADD231PS xl(DI), Z5, accL \
	VFMADD231PS xh(DI), Z6, accH

// Q4K_PAIR16: sub-blocks 2j and 2j+1 (scales at s0 and 4+s0, mins at m0
// and 4+m0), 64 weights.
#define Q4K_PAIR16(s0, m0, qb, xo) \
	Q4K_TABLE(s0, m0, Z8) \
	Q4K_TABLE(4+s0, 4+m0, Z9) \
	Q4K_GROUP16(qb, xo, 128+xo, Z0, Z1) \
	Q4K_GROUP16(16+qb, 64+xo, 192+xo, Z2, Z3)

// func q4kDot512(row *byte, x *float32, nb int) float32
TEXT ·q4kDot512(SB), NOSPLIT, $64-28
	KDOT_BEGIN
	VMOVUPS k512Iota<>(SB), Z14
q4kblock:
	KPREFETCH3
	K4_SCALES
	Q4K_PAIR16(0, 32, 16, 0)
	Q4K_PAIR16(8, 40, 48, 256)
	Q4K_PAIR16(16, 48, 80, 512)
	Q4K_PAIR16(24, 56, 112, 768)
	ADDQ $144, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q4kblock
	KDOT_SUM512
