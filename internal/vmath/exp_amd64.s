//go:build amd64

#include "textflag.h"

// vmath.go's exponentials, 16 lanes a step: expShiftedGo's operations in
// the same order (no fused multiply-adds), so the same bits. The Go side
// runs the tail and reduces the lanes.

// expTab: each constant of vmath.go eight times (a ymm operand), in order.
// expMin
DATA expTab<>+0(SB)/8, $0xc2aeac4fc2aeac4f
DATA expTab<>+8(SB)/8, $0xc2aeac4fc2aeac4f
DATA expTab<>+16(SB)/8, $0xc2aeac4fc2aeac4f
DATA expTab<>+24(SB)/8, $0xc2aeac4fc2aeac4f
// log2 e
DATA expTab<>+32(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expTab<>+40(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expTab<>+48(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expTab<>+56(SB)/8, $0x3fb8aa3b3fb8aa3b
// ln2 hi
DATA expTab<>+64(SB)/8, $0x3f3180003f318000
DATA expTab<>+72(SB)/8, $0x3f3180003f318000
DATA expTab<>+80(SB)/8, $0x3f3180003f318000
DATA expTab<>+88(SB)/8, $0x3f3180003f318000
// ln2 lo
DATA expTab<>+96(SB)/8, $0xb95e8083b95e8083
DATA expTab<>+104(SB)/8, $0xb95e8083b95e8083
DATA expTab<>+112(SB)/8, $0xb95e8083b95e8083
DATA expTab<>+120(SB)/8, $0xb95e8083b95e8083
// P0
DATA expTab<>+128(SB)/8, $0x3950696739506967
DATA expTab<>+136(SB)/8, $0x3950696739506967
DATA expTab<>+144(SB)/8, $0x3950696739506967
DATA expTab<>+152(SB)/8, $0x3950696739506967
// P1
DATA expTab<>+160(SB)/8, $0x3ab743ce3ab743ce
DATA expTab<>+168(SB)/8, $0x3ab743ce3ab743ce
DATA expTab<>+176(SB)/8, $0x3ab743ce3ab743ce
DATA expTab<>+184(SB)/8, $0x3ab743ce3ab743ce
// P2
DATA expTab<>+192(SB)/8, $0x3c0889083c088908
DATA expTab<>+200(SB)/8, $0x3c0889083c088908
DATA expTab<>+208(SB)/8, $0x3c0889083c088908
DATA expTab<>+216(SB)/8, $0x3c0889083c088908
// P3
DATA expTab<>+224(SB)/8, $0x3d2aa9c13d2aa9c1
DATA expTab<>+232(SB)/8, $0x3d2aa9c13d2aa9c1
DATA expTab<>+240(SB)/8, $0x3d2aa9c13d2aa9c1
DATA expTab<>+248(SB)/8, $0x3d2aa9c13d2aa9c1
// P4
DATA expTab<>+256(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA expTab<>+264(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA expTab<>+272(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA expTab<>+280(SB)/8, $0x3e2aaaaa3e2aaaaa
// P5
DATA expTab<>+288(SB)/8, $0x3f0000003f000000
DATA expTab<>+296(SB)/8, $0x3f0000003f000000
DATA expTab<>+304(SB)/8, $0x3f0000003f000000
DATA expTab<>+312(SB)/8, $0x3f0000003f000000
// 1
DATA expTab<>+320(SB)/8, $0x3f8000003f800000
DATA expTab<>+328(SB)/8, $0x3f8000003f800000
DATA expTab<>+336(SB)/8, $0x3f8000003f800000
DATA expTab<>+344(SB)/8, $0x3f8000003f800000
// 127 (int32)
DATA expTab<>+352(SB)/8, $0x0000007f0000007f
DATA expTab<>+360(SB)/8, $0x0000007f0000007f
DATA expTab<>+368(SB)/8, $0x0000007f0000007f
DATA expTab<>+376(SB)/8, $0x0000007f0000007f
// the sign bit
DATA expTab<>+384(SB)/8, $0x8000000080000000
DATA expTab<>+392(SB)/8, $0x8000000080000000
DATA expTab<>+400(SB)/8, $0x8000000080000000
DATA expTab<>+408(SB)/8, $0x8000000080000000
GLOBL expTab<>(SB), RODATA|NOPTR, $416

// EXP_TAIL finishes e^x from x and k = round(x·log2 e): x becomes r, p
// the polynomial, k the float bits of 2^k (t is scratch). The constants
// are registers (AVX-512) or expTab operands (AVX2).
#define EXP_TAIL(x, k, t, p, HI, LO, P0, P1, P2, P3, P4, P5, ONE, I127) \
	VMULPS HI, k, t \
	VSUBPS t, x, x \
	VMULPS LO, k, t \
	VSUBPS t, x, x \
	VMULPS P0, x, p \
	VADDPS P1, p, p \
	VMULPS x, p, p \
	VADDPS P2, p, p \
	VMULPS x, p, p \
	VADDPS P3, p, p \
	VMULPS x, p, p \
	VADDPS P4, p, p \
	VMULPS x, p, p \
	VADDPS P5, p, p \
	VMULPS x, x, t \
	VMULPS t, p, p \
	VADDPS x, p, p \
	VADDPS ONE, p, p \
	VCVTPS2DQ k, k \
	VPADDD I127, k, k \
	VPSLLD $23, k, k

// EXP512_CONSTS broadcasts the constants to Z18..Z29 (expMin .. 127).
#define EXP512_CONSTS \
	VBROADCASTSS expTab<>+0(SB), Z18 \
	VBROADCASTSS expTab<>+32(SB), Z19 \
	VBROADCASTSS expTab<>+64(SB), Z20 \
	VBROADCASTSS expTab<>+96(SB), Z21 \
	VBROADCASTSS expTab<>+128(SB), Z22 \
	VBROADCASTSS expTab<>+160(SB), Z23 \
	VBROADCASTSS expTab<>+192(SB), Z24 \
	VBROADCASTSS expTab<>+224(SB), Z25 \
	VBROADCASTSS expTab<>+256(SB), Z26 \
	VBROADCASTSS expTab<>+288(SB), Z27 \
	VBROADCASTSS expTab<>+320(SB), Z28 \
	VPBROADCASTD expTab<>+352(SB), Z29

// EXP512 sets Z3 to e^Z0 for Z0 ≤ 0 (0 below expMin), as expNeg; it
// uses Z1, Z2 and K1, and leaves r in Z0.
#define EXP512 \
	VCMPPS $5, Z18, Z0, K1 \
	VMULPS Z19, Z0, Z1 \
	VRNDSCALEPS $0, Z1, Z1 \
	EXP_TAIL(Z0, Z1, Z2, Z3, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29) \
	VMULPS.Z Z1, Z3, K1, Z3

// func expShiftedx512(s *float32, n int, maxS float32, lanes *[16]float32)
// s[i] = e^(s[i]-maxS) for i < n (a multiple of 16), each added to
// lanes[i mod 16].
TEXT ·expShiftedx512(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS maxS+16(FP), Z16
	MOVQ lanes+24(FP), DI
	VMOVUPS (DI), Z17
	EXP512_CONSTS
loop512:
	VMOVUPS (SI), Z0
	VSUBPS Z16, Z0, Z0
	EXP512
	VMOVUPS Z3, (SI)
	VADDPS Z3, Z17, Z17
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ loop512
	VMOVUPS Z17, (DI)
	VZEROUPPER
	RET

// func sigmoidMulx512(d, x *float32, n int)
// d[i] *= sigmoid(x[i]) for i < n (a multiple of 16), as sigmoidMulGo:
// t = e^-|x|, sigmoid = (x < 0 ? t : 1) / (1 + t). d may be x.
TEXT ·sigmoidMulx512(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	EXP512_CONSTS
	VBROADCASTSS expTab<>+384(SB), Z30
	VPXORD Z31, Z31, Z31
sig512:
	VMOVUPS (SI), Z5
	VORPS Z30, Z5, Z0 // -|x|
	EXP512
	VADDPS Z28, Z3, Z4 // 1 + t
	VCMPPS $1, Z31, Z5, K2 // x < 0
	VMOVAPS Z28, Z6
	VMOVAPS Z3, K2, Z6
	VDIVPS Z4, Z6, Z6
	VMULPS (DI), Z6, Z6
	VMOVUPS Z6, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ sig512
	VZEROUPPER
	RET

// func sigmoidMulAVX2(d, x *float32, n int)
// sigmoidMulx512 eight lanes at a time (n a multiple of 8).
TEXT ·sigmoidMulAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVUPS expTab<>+0(SB), Y10
	VXORPS Y11, Y11, Y11
sig2:
	VMOVUPS (SI), Y5
	VORPS expTab<>+384(SB), Y5, Y0
	VCMPPS $5, Y10, Y0, Y4
	VMULPS expTab<>+32(SB), Y0, Y1
	VROUNDPS $0, Y1, Y1
	EXP_TAIL(Y0, Y1, Y2, Y3, expTab<>+64(SB), expTab<>+96(SB), expTab<>+128(SB), expTab<>+160(SB), expTab<>+192(SB), expTab<>+224(SB), expTab<>+256(SB), expTab<>+288(SB), expTab<>+320(SB), expTab<>+352(SB))
	VMULPS Y1, Y3, Y3
	VANDPS Y4, Y3, Y3 // t
	VADDPS expTab<>+320(SB), Y3, Y6 // 1 + t
	VCMPPS $1, Y11, Y5, Y7 // x < 0
	VMOVUPS expTab<>+320(SB), Y8
	VBLENDVPS Y7, Y3, Y8, Y8
	VDIVPS Y6, Y8, Y8
	VMULPS (DI), Y8, Y8
	VMOVUPS Y8, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ sig2
	VZEROUPPER
	RET

// func expShiftedAVX2(s *float32, n int, maxS float32, lanes *[16]float32)
// expShiftedx512 in two 8-lane halves.
TEXT ·expShiftedAVX2(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS maxS+16(FP), Y11
	MOVQ lanes+24(FP), DI
	VMOVUPS (DI), Y14
	VMOVUPS 32(DI), Y15
	VMOVUPS expTab<>+0(SB), Y10
loop2:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y5
	VSUBPS Y11, Y0, Y0
	VSUBPS Y11, Y5, Y5
	VCMPPS $5, Y10, Y0, Y4
	VCMPPS $5, Y10, Y5, Y9
	VMULPS expTab<>+32(SB), Y0, Y1
	VMULPS expTab<>+32(SB), Y5, Y6
	VROUNDPS $0, Y1, Y1
	VROUNDPS $0, Y6, Y6
	EXP_TAIL(Y0, Y1, Y2, Y3, expTab<>+64(SB), expTab<>+96(SB), expTab<>+128(SB), expTab<>+160(SB), expTab<>+192(SB), expTab<>+224(SB), expTab<>+256(SB), expTab<>+288(SB), expTab<>+320(SB), expTab<>+352(SB))
	EXP_TAIL(Y5, Y6, Y7, Y8, expTab<>+64(SB), expTab<>+96(SB), expTab<>+128(SB), expTab<>+160(SB), expTab<>+192(SB), expTab<>+224(SB), expTab<>+256(SB), expTab<>+288(SB), expTab<>+320(SB), expTab<>+352(SB))
	VMULPS Y1, Y3, Y3
	VMULPS Y6, Y8, Y8
	VANDPS Y4, Y3, Y3
	VANDPS Y9, Y8, Y8
	VMOVUPS Y3, (SI)
	VMOVUPS Y8, 32(SI)
	VADDPS Y3, Y14, Y14
	VADDPS Y8, Y15, Y15
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ loop2
	VMOVUPS Y14, (DI)
	VMOVUPS Y15, 32(DI)
	VZEROUPPER
	RET
