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

// Q6_K with its 6-bit quants put together a byte at a time, 64 in an
// instruction (ql's nibble and qh's two bits, minus 32, as int8: four zmm
// for a block, 256 bytes in the frame at 64(SP)), then each 16 widened,
// converted and scaled (weight = float32(q−32)·(d·scale), as decodeQ6K).
// Where every sixteen were put together at dword width, a 4096-element
// row took 392 ns, now 330 (the same sums, bit for bit); a
// Qwen3-0.6B-shaped Q4_K_M decodes at 27.9–28.6 against 27.1–28.1 tok/s
// (two Sapphire Rapids-class vCPUs, docs/benchmarks.md 2026-12-02 from
// 00:31). VPSLLW/VPSRLW shift 16-bit lanes: a byte's bits that cross into
// its neighbour are masked off by 0x0f and 0x30.
DATA k512B0F<>+0(SB)/4, $0x0f0f0f0f
GLOBL k512B0F<>(SB), RODATA|NOPTR, $4
DATA k512B30<>+0(SB)/4, $0x30303030
GLOBL k512B30<>(SB), RODATA|NOPTR, $4
DATA k512B20<>+0(SB)/4, $0x20202020
GLOBL k512B20<>(SB), RODATA|NOPTR, $4

// Q6K_LOAD2: 32 bytes at o0(SI) and 32 at o1(SI) as dst's two halves (a
// block's two 128-weight halves side by side).
#define Q6K_LOAD2(o0, o1, dst, ydst) \
	VMOVDQU o0(SI), ydst \
	VINSERTI64X4 $1, o1(SI), dst, dst

// Q6K_BYTES: q = (lo & 0x0f) | (hi & 0x30), minus 32, stored at off(SP)
// (lo, hi already shifted; Z15, Z14, Z13: 0x0f, 0x30, 32 in every byte).
#define Q6K_BYTES(lo, hi, off) \
	VPANDD Z15, lo, lo \
	VPANDD Z14, hi, hi \
	VPORD hi, lo, lo \
	VPSUBB Z13, lo, lo \
	VMOVDQU64 lo, off(SP)

// Q6K_W16: sixteen int8 quants at q(SP) times d·scale at s(SP), into acc
// with x at xo(DI).
#define Q6K_W16(q, s, xo, tmp, acc) \
	VPMOVSXBD q(SP), tmp \
	VCVTDQ2PS tmp, tmp \
	VMULPS.BCST s(SP), tmp, tmp \
	VFMADD231PS xo(DI), tmp, acc

// func q6kDot512(row *byte, x *float32, nb int) float32
TEXT ·q6kDot512(SB), NOSPLIT, $320-28
	KDOT_BEGIN
	VPBROADCASTD k512B0F<>(SB), Z15
	VPBROADCASTD k512B30<>(SB), Z14
	VPBROADCASTD k512B20<>(SB), Z13
q6kblock:
	KPREFETCH4
	Q6K_DSCALES
	Q6K_LOAD2(0, 64, Z4, Y4)
	Q6K_LOAD2(32, 96, Z5, Y5)
	Q6K_LOAD2(128, 160, Z6, Y6)
	VMOVDQA64 Z4, Z8
	VPSLLW $4, Z6, Z9
	Q6K_BYTES(Z8, Z9, 64)
	VMOVDQA64 Z5, Z8
	VPSLLW $2, Z6, Z9
	Q6K_BYTES(Z8, Z9, 128)
	VPSRLW $4, Z4, Z8
	VMOVDQA64 Z6, Z9
	Q6K_BYTES(Z8, Z9, 192)
	VPSRLW $4, Z5, Z8
	VPSRLW $2, Z6, Z9
	Q6K_BYTES(Z8, Z9, 256)
	Q6K_W16(64, 0, 0, Z7, Z0)
	Q6K_W16(128, 8, 128, Z8, Z1)
	Q6K_W16(192, 16, 256, Z9, Z2)
	Q6K_W16(256, 24, 384, Z10, Z3)
	Q6K_W16(80, 4, 64, Z7, Z0)
	Q6K_W16(144, 12, 192, Z8, Z1)
	Q6K_W16(208, 20, 320, Z9, Z2)
	Q6K_W16(272, 28, 448, Z10, Z3)
	Q6K_W16(96, 32, 512, Z7, Z0)
	Q6K_W16(160, 40, 640, Z8, Z1)
	Q6K_W16(224, 48, 768, Z9, Z2)
	Q6K_W16(288, 56, 896, Z10, Z3)
	Q6K_W16(112, 36, 576, Z7, Z0)
	Q6K_W16(176, 44, 704, Z8, Z1)
	Q6K_W16(240, 52, 832, Z9, Z2)
	Q6K_W16(304, 60, 960, Z10, Z3)
	ADDQ $210, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ q6kblock
	KDOT_SUM512
