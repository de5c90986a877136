//go:build amd64

#include "textflag.h"

// The recurrent delta rule's two passes over a head's dk×dv state
// (deltanet.go, deltaDecay and deltaUpdate), a band of 32 columns at a
// time (the models' dv is 128; other widths leave their last columns to
// the row loops). The band's delta (and output) stay in registers while
// the pass walks the rows, so a state row is loaded and stored once a pass
// and nothing is called per row. Each element gets the roundings of the row loops (a
// product rounded, then the sum or difference; no fused multiply-adds).

// DECAY_COL(off, s, t, acc): the state's 8 floats at off(SI) times decay
// (Y15), stored back, and acc -= them times k[i] (Y14).
#define DECAY_COL(off, s, t, acc) \
	VMULPS off(SI), Y15, s \
	VMOVUPS s, off(SI) \
	VMULPS Y14, s, t \
	VSUBPS t, acc, acc

// func deltaDecayAVX2(s, k, delta *float32, dk, dv, cols int, decay float32)
// For rows i < dk of s (dv floats each), columns j < cols (a multiple of
// 32): s[i][j] *= decay; delta[j] -= s[i][j]·k[i].
TEXT ·deltaDecayAVX2(SB), NOSPLIT, $0-52
	MOVQ s+0(FP), R8
	MOVQ delta+16(FP), DI
	MOVQ dv+32(FP), R9
	SHLQ $2, R9
	MOVQ cols+40(FP), BX
	VBROADCASTSS decay+48(FP), Y15
decay32:
	CMPQ BX, $32
	JLT decaydone
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ R8, SI
	MOVQ k+8(FP), DX
	MOVQ dk+24(FP), CX
decay32row:
	VBROADCASTSS (DX), Y14
	DECAY_COL(0, Y4, Y8, Y0)
	DECAY_COL(32, Y5, Y9, Y1)
	DECAY_COL(64, Y6, Y10, Y2)
	DECAY_COL(96, Y7, Y11, Y3)
	ADDQ R9, SI
	ADDQ $4, DX
	DECQ CX
	JNZ decay32row
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, R8
	ADDQ $128, DI
	SUBQ $32, BX
	JMP decay32
decaydone:
	VZEROUPPER
	RET

// UPDATE_COL(off, d, acc): the state's 8 floats at off(SI) plus k[i] (Y14)
// times the band's delta d, stored back, and acc += them times q[i] (Y13).
#define UPDATE_COL(off, d, acc) \
	VMULPS Y14, d, Y8 \
	VADDPS off(SI), Y8, Y8 \
	VMOVUPS Y8, off(SI) \
	VMULPS Y13, Y8, Y9 \
	VADDPS Y9, acc, acc

// func deltaUpdateAVX2(s, k, q, delta, o *float32, dk, dv, cols int)
// For rows i < dk, columns j < cols (a multiple of 32), starting from
// o[j] = 0: s[i][j] += k[i]·delta[j]; o[j] += s[i][j]·q[i].
TEXT ·deltaUpdateAVX2(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), R8
	MOVQ delta+24(FP), DI
	MOVQ o+32(FP), R10
	MOVQ dv+48(FP), R9
	SHLQ $2, R9
	MOVQ cols+56(FP), BX
update32:
	CMPQ BX, $32
	JLT updatedone
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ R8, SI
	MOVQ k+8(FP), DX
	MOVQ q+16(FP), R11
	MOVQ dk+40(FP), CX
update32row:
	VBROADCASTSS (DX), Y14
	VBROADCASTSS (R11), Y13
	UPDATE_COL(0, Y0, Y4)
	UPDATE_COL(32, Y1, Y5)
	UPDATE_COL(64, Y2, Y6)
	UPDATE_COL(96, Y3, Y7)
	ADDQ R9, SI
	ADDQ $4, DX
	ADDQ $4, R11
	DECQ CX
	JNZ update32row
	VMOVUPS Y4, (R10)
	VMOVUPS Y5, 32(R10)
	VMOVUPS Y6, 64(R10)
	VMOVUPS Y7, 96(R10)
	ADDQ $128, R8
	ADDQ $128, DI
	ADDQ $128, R10
	SUBQ $32, BX
	JMP update32
updatedone:
	VZEROUPPER
	RET
