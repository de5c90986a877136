//go:build amd64

#include "textflag.h"

// Element-wise vector loops of the attention's softmax and the hybrids'
// convolution; vmath_amd64.go picks them and runs the tails in Go. Each
// lane does what the portable loop does (no fused multiply-adds), so the
// bits are the same.

// func maxF32x512(x *float32, n int) float32
// The largest of x[:n] (n a multiple of 16).
TEXT ·maxF32x512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Z0
	ADDQ $64, SI
	SUBQ $16, CX
	JZ max512done
max512:
	VMAXPS (SI), Z0, Z0
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ max512
max512done:
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4E, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xB1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	VMOVSS X0, ret+16(FP)
	RET

// func maxF32AVX2(x *float32, n int) float32
// maxF32x512 eight lanes at a time (n a multiple of 8).
TEXT ·maxF32AVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JZ max2done
max2:
	VMAXPS (SI), Y0, Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ max2
max2done:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4E, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xB1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	VMOVSS X0, ret+16(FP)
	RET

// func scaleF32x512(x *float32, n int, s float32)
// x[i] *= s for i < n (a multiple of 16).
TEXT ·scaleF32x512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Z1
scale512:
	VMULPS (SI), Z1, Z0
	VMOVUPS Z0, (SI)
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ scale512
	VZEROUPPER
	RET

// func scaleF32AVX2(x *float32, n int, s float32)
// scaleF32x512 eight lanes at a time (n a multiple of 8).
TEXT ·scaleF32AVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y1
scale2:
	VMULPS (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ scale2
	VZEROUPPER
	RET

// func mulAddF32x512(d, a, b *float32, n int)
// d[i] += a[i]·b[i] for i < n (a multiple of 16), the product rounded
// before the sum.
TEXT ·mulAddF32x512(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
muladd512:
	VMOVUPS (SI), Z0
	VMULPS (DX), Z0, Z0
	VADDPS (DI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ muladd512
	VZEROUPPER
	RET

// func mulAddF32AVX2(d, a, b *float32, n int)
// mulAddF32x512 eight lanes at a time (n a multiple of 8).
TEXT ·mulAddF32AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
muladd2:
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VADDPS (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ muladd2
	VZEROUPPER
	RET
