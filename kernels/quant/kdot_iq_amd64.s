//go:build amd64

#include "textflag.h"
#include "kdot_amd64.h"

// AVX2+FMA+F16C row dots of the IQ1–IQ3 lattices (kdot_amd64.go says
// why). Each group of 8 weights is a row of the expanded float grid
// (iq2xxsGrid: 8 floats; iq3xxsGrid, iq3sGrid: two rows of 4), times the
// group's scale db, times the ±1 row of signTab, formed as the decoders
// form them: (db·g)·s, s exact; IQ1's grid row plus ±0.125 (exact), times
// dl. A block's 8 sub-blocks run as a loop (R14 counts them), each
// advancing DI by its 32 floats and the pointers into the block's fields.
//
// Registers: SI the block, DI x, CX blocks left, R10 the grid, R11
// signTab, R12 ksigns, R15 (and R8, R13) the sub-block's fields, X6 the
// block's d, Y7 (and Y11) the group scales, AX, BX, DX, R9 scratch.

DATA kdotHalf<>+0(SB)/4, $0x3f000000
GLOBL kdotHalf<>(SB), RODATA|NOPTR, $4
DATA kdotQuarter<>+0(SB)/4, $0x3e800000
GLOBL kdotQuarter<>(SB), RODATA|NOPTR, $4

#define IQ_TABLES(grid) \
	LEAQ grid(SB), R10 \
	LEAQ ·signTab(SB), R11 \
	LEAQ ·ksigns(SB), R12

// IQ_D: X6 = the block's f16 d (F16C: exact).
#define IQ_D \
	MOVWLZX (SI), AX \
	VMOVQ AX, X6 \
	VCVTPH2PS X6, X6

// IQ_DBK: Y7 = d·(0.5 + AX)·k, rounded after each operation as the
// decoders' float32 expression (k at kconst).
#define IQ_DBK(kconst) \
	VCVTSI2SSL AX, X7, X7 \
	VADDSS kdotHalf<>(SB), X7, X7 \
	VMULSS X6, X7, X7 \
	VMULSS kconst(SB), X7, X7 \
	VBROADCASTSS X7, Y7

// IQ_ODD: xreg = d·(2·AX+1), broadcast into reg.
#define IQ_ODD(xreg, reg) \
	LEAL 1(AX)(AX*1), AX \
	VCVTSI2SSL AX, xreg, xreg \
	VMULSS X6, xreg, xreg \
	VBROADCASTSS xreg, reg

// IQ_KSIGNS: Y9 = signTab[ksigns[(DX>>sh)&127]].
#define IQ_KSIGNS(sh) \
	MOVL DX, BX \
	SHRL $sh, BX \
	ANDL $127, BX \
	MOVBLZX (R12)(BX*1), BX \
	SHLQ $5, BX \
	VMOVUPS (R11)(BX*1), Y9

// IQ_SIGNB: Y9 = signTab[the byte at off(base)].
#define IQ_SIGNB(off, base) \
	MOVBLZX off(base), BX \
	SHLQ $5, BX \
	VMOVUPS (R11)(BX*1), Y9

// IQ_APPLY: acc += ((db·Y8)·Y9)·x at xo(DI).
#define IQ_APPLY(db, xo, acc) \
	VMULPS Y8, db, Y8 \
	VMULPS Y9, Y8, Y8 \
	VFMADD231PS xo(DI), Y8, acc

// IQ_ROW8: Y8 = the 8-float grid row AX; IQ_ROW44: two 4-float rows, AX
// and R9.
#define IQ_ROW8 \
	SHLQ $5, AX \
	VMOVUPS (R10)(AX*1), Y8
#define IQ_ROW44 \
	SHLQ $4, AX \
	SHLQ $4, R9 \
	VMOVUPS (R10)(AX*1), X8 \
	VINSERTF128 $1, (R10)(R9*1), Y8, Y8

// IQ_NEXT: the sub-block loop's step (label sub) and the block loop's
// (label block, size bytes a block).
#define IQ_NEXT(sub, block, size) \
	ADDQ $128, DI \
	DECQ R14 \
	JNZ sub \
	ADDQ $size, SI \
	DECQ CX \
	JNZ block

// IQ2XXS_GRP: group l: grid index byte l(R15), signs at bit 7l of DX.
#define IQ2XXS_GRP(l, sh, xo, acc) \
	MOVBLZX l(R15), AX \
	IQ_ROW8 \
	IQ_KSIGNS(sh) \
	IQ_APPLY(Y7, xo, acc)

// func iq2xxsDotAVX2(row *byte, x *float32, nb int) float32
// Sub-block: 4 index bytes and a word (7-bit signs ×4, scale) at 2+8ib;
// weight = (d·(0.5+s)·0.25·grid)·sign, as decodeIQ2XXS.
TEXT ·iq2xxsDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq2xxsGrid)
iq2xxsblock:
	KPREFETCH2
	IQ_D
	LEAQ 2(SI), R15
	MOVQ $8, R14
iq2xxssub:
	MOVL 4(R15), DX
	MOVL DX, AX
	SHRL $28, AX
	IQ_DBK(kdotQuarter<>)
	IQ2XXS_GRP(0, 0, 0, Y0)
	IQ2XXS_GRP(1, 7, 32, Y1)
	IQ2XXS_GRP(2, 14, 64, Y2)
	IQ2XXS_GRP(3, 21, 96, Y3)
	ADDQ $8, R15
	IQ_NEXT(iq2xxssub, iq2xxsblock, 66)
	KDOT_SUM

// IQ3XXS_GRP: group l: grid index bytes 2l, 2l+1 of R15.
#define IQ3XXS_GRP(q1, q2, sh, xo, acc) \
	MOVBLZX q1(R15), AX \
	MOVBLZX q2(R15), R9 \
	IQ_ROW44 \
	IQ_KSIGNS(sh) \
	IQ_APPLY(Y7, xo, acc)

// func iq3xxsDotAVX2(row *byte, x *float32, nb int) float32
// Sub-block: 8 index bytes at 2+8ib (R15), its word at 66+4ib (R8);
// weight = (d·(0.5+s)·0.5·grid)·sign, as decodeIQ3XXS.
TEXT ·iq3xxsDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq3xxsGrid)
iq3xxsblock:
	KPREFETCH2
	IQ_D
	LEAQ 2(SI), R15
	LEAQ 66(SI), R8
	MOVQ $8, R14
iq3xxssub:
	MOVL (R8), DX
	MOVL DX, AX
	SHRL $28, AX
	IQ_DBK(kdotHalf<>)
	IQ3XXS_GRP(0, 1, 0, 0, Y0)
	IQ3XXS_GRP(2, 3, 7, 32, Y1)
	IQ3XXS_GRP(4, 5, 14, 64, Y2)
	IQ3XXS_GRP(6, 7, 21, 96, Y3)
	ADDQ $8, R15
	ADDQ $4, R8
	IQ_NEXT(iq3xxssub, iq3xxsblock, 98)
	KDOT_SUM

// IQ2_SCALE: Y7 = d·(0.5 + the nibble at bit sh of the byte at R8)·0.25.
#define IQ2_SCALE(sh) \
	MOVBLZX (R8), AX \
	SHRL $sh, AX \
	ANDL $15, AX \
	IQ_DBK(kdotQuarter<>)

// IQ2XS_GRP: the u16 at qoff(R15): grid index (9 bits), ksigns index (7).
#define IQ2XS_GRP(qoff, xo, acc) \
	MOVWLZX qoff(R15), DX \
	MOVL DX, AX \
	ANDL $511, AX \
	IQ_ROW8 \
	IQ_KSIGNS(9) \
	IQ_APPLY(Y7, xo, acc)

// func iq2xsDotAVX2(row *byte, x *float32, nb int) float32
// Sub-block: 4 u16 at 2+8ib (R15), its scale byte at 66+ib (R8: low
// nibble groups 0-1, high 2-3); weight as decodeIQ2XS.
TEXT ·iq2xsDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq2xsGrid)
iq2xsblock:
	KPREFETCH2
	IQ_D
	LEAQ 2(SI), R15
	LEAQ 66(SI), R8
	MOVQ $8, R14
iq2xssub:
	IQ2_SCALE(0)
	IQ2XS_GRP(0, 0, Y0)
	IQ2XS_GRP(2, 32, Y1)
	IQ2_SCALE(4)
	IQ2XS_GRP(4, 64, Y2)
	IQ2XS_GRP(6, 96, Y3)
	ADDQ $8, R15
	INCQ R8
	IQ_NEXT(iq2xssub, iq2xsblock, 74)
	KDOT_SUM

// IQ2S_GRP: grid index qs byte l(R15) | (qh byte (R8) << hsh) & 0x300;
// signs the byte 32+l(R15).
#define IQ2S_GRP(l, hsh, xo, acc) \
	MOVBLZX l(R15), AX \
	MOVBLZX (R8), BX \
	SHLL $hsh, BX \
	ANDL $0x300, BX \
	ORL BX, AX \
	IQ_ROW8 \
	IQ_SIGNB(32+l, R15) \
	IQ_APPLY(Y7, xo, acc)

// func iq2sDotAVX2(row *byte, x *float32, nb int) float32
// Sub-block: 4 qs bytes at 2+4ib (R15; its signs 32 bytes on), qh at
// 66+ib (R8; its scale byte 8 on); weight as decodeIQ2S.
TEXT ·iq2sDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq2sGrid)
iq2sblock:
	KPREFETCH2
	IQ_D
	LEAQ 2(SI), R15
	LEAQ 66(SI), R8
	MOVQ $8, R14
iq2ssub:
	MOVBLZX 8(R8), AX
	ANDL $15, AX
	IQ_DBK(kdotQuarter<>)
	IQ2S_GRP(0, 8, 0, Y0)
	IQ2S_GRP(1, 6, 32, Y1)
	MOVBLZX 8(R8), AX
	SHRL $4, AX
	IQ_DBK(kdotQuarter<>)
	IQ2S_GRP(2, 4, 64, Y2)
	IQ2S_GRP(3, 2, 96, Y3)
	ADDQ $4, R15
	INCQ R8
	IQ_NEXT(iq2ssub, iq2sblock, 82)
	KDOT_SUM

// IQ3S_GRP: grid indices qs bytes 2l, 2l+1 of R15 | (qh (R8) << sh) &
// 256; signs the byte l(R13).
#define IQ3S_GRP(q1, q2, sh1, sh2, l, xo, acc) \
	MOVBLZX q1(R15), AX \
	MOVBLZX (R8), BX \
	SHLL $sh1, BX \
	ANDL $256, BX \
	ORL BX, AX \
	MOVBLZX q2(R15), R9 \
	MOVBLZX (R8), BX \
	SHLL $sh2, BX \
	ANDL $256, BX \
	ORL BX, R9 \
	IQ_ROW44 \
	IQ_SIGNB(l, R13) \
	IQ_APPLY(Y7, xo, acc)

// IQ3S_SUB: one sub-block, db = d·(1 + 2·the scale nibble at bit sh of
// the byte at DX), then its four groups.
#define IQ3S_SUB(sh) \
	MOVBLZX (DX), AX \
	SHRL $sh, AX \
	ANDL $15, AX \
	IQ_ODD(X7, Y7) \
	IQ3S_GRP(0, 1, 8, 7, 0, 0, Y0) \
	IQ3S_GRP(2, 3, 6, 5, 1, 32, Y1) \
	IQ3S_GRP(4, 5, 4, 3, 2, 64, Y2) \
	IQ3S_GRP(6, 7, 2, 1, 3, 96, Y3) \
	ADDQ $8, R15 \
	INCQ R8 \
	ADDQ $4, R13 \
	ADDQ $128, DI

// func iq3sDotAVX2(row *byte, x *float32, nb int) float32
// Sub-block: 8 qs bytes at 2+8ib (R15), qh at 66+ib (R8), 4 sign bytes at
// 74+4ib (R13); scale nibbles of two sub-blocks a byte at 106 (DX), so
// the loop takes sub-blocks in pairs; weight = (d·(1+2s)·grid)·sign, as
// decodeIQ3S.
TEXT ·iq3sDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	IQ_TABLES(·iq3sGrid)
iq3sblock:
	KPREFETCH2
	IQ_D
	LEAQ 2(SI), R15
	LEAQ 66(SI), R8
	LEAQ 74(SI), R13
	LEAQ 106(SI), DX
	MOVQ $4, R14
iq3spair:
	IQ3S_SUB(0)
	IQ3S_SUB(4)
	INCQ DX
	DECQ R14
	JNZ iq3spair
	ADDQ $110, SI
	DECQ CX
	JNZ iq3sblock
	KDOT_SUM

// IQ1_DELTA: Y10 = ±0.125, negative where BX's bit 31 is set.
#define IQ1_DELTA \
	ORL $0x3e000000, BX \
	VMOVQ BX, X10 \
	VBROADCASTSS X10, Y10

// IQ1_APPLY: acc += (dl·(grid row AX + Y10))·x at xo(DI).
#define IQ1_APPLY(dl, xo, acc) \
	SHLQ $5, AX \
	VADDPS (R10)(AX*1), Y10, Y8 \
	VMULPS Y8, dl, Y8 \
	VFMADD231PS xo(DI), Y8, acc

// IQ1S_GRP: index qs byte l(R15) | ((DX>>sh)&7)<<8.
#define IQ1S_GRP(l, sh, xo, acc) \
	MOVBLZX l(R15), AX \
	MOVL DX, BX \
	SHRL $sh, BX \
	ANDL $7, BX \
	SHLL $8, BX \
	ORL BX, AX \
	IQ1_APPLY(Y7, xo, acc)

// func iq1sDotAVX2(row *byte, x *float32, nb int) float32
// Sub-block: 4 qs bytes at 2+4ib (R15), its u16 at 34+2ib (R8: index
// bits, scale at 12, the delta's sign at 15); weight = dl·(grid+delta),
// as decodeIQ1S.
TEXT ·iq1sDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	LEAQ ·iq1sGrid(SB), R10
iq1sblock:
	KPREFETCH1
	IQ_D
	LEAQ 2(SI), R15
	LEAQ 34(SI), R8
	MOVQ $8, R14
iq1ssub:
	MOVWLZX (R8), DX
	MOVL DX, AX
	SHRL $12, AX
	ANDL $7, AX
	IQ_ODD(X7, Y7)
	MOVL DX, BX
	ANDL $0x8000, BX
	SHLL $16, BX
	IQ1_DELTA
	IQ1S_GRP(0, 0, 0, Y0)
	IQ1S_GRP(1, 3, 32, Y1)
	IQ1S_GRP(2, 6, 64, Y2)
	IQ1S_GRP(3, 9, 96, Y3)
	ADDQ $4, R15
	ADDQ $2, R8
	IQ_NEXT(iq1ssub, iq1sblock, 50)
	KDOT_SUM

// IQ1M_GRP: index qs byte l(R15) | (qh byte hoff(R8) << hsh) & 0x700, the
// delta's sign that byte's bit hb (moved to bit 31 by dsh).
#define IQ1M_GRP(l, hoff, hsh, hb, dsh, dl, xo, acc) \
	MOVBLZX l(R15), AX \
	MOVBLZX hoff(R8), BX \
	SHLL $hsh, BX \
	ANDL $0x700, BX \
	ORL BX, AX \
	MOVBLZX hoff(R8), BX \
	ANDL $hb, BX \
	SHLL $dsh, BX \
	IQ1_DELTA \
	IQ1_APPLY(dl, xo, acc)

// IQ1M_SUB: one sub-block with scale bits at sh of the word at R13: dl1
// (groups 0-1) and dl2 (2-3), then its four groups.
#define IQ1M_SUB(sh) \
	MOVWLZX (R13), DX \
	SHRL $sh, DX \
	MOVL DX, AX \
	ANDL $7, AX \
	IQ_ODD(X7, Y7) \
	MOVL DX, AX \
	SHRL $3, AX \
	ANDL $7, AX \
	IQ_ODD(X11, Y11) \
	IQ1M_GRP(0, 0, 8, 0x08, 28, Y7, 0, Y0) \
	IQ1M_GRP(1, 0, 4, 0x80, 24, Y7, 32, Y1) \
	IQ1M_GRP(2, 1, 8, 0x08, 28, Y11, 64, Y2) \
	IQ1M_GRP(3, 1, 4, 0x80, 24, Y11, 96, Y3) \
	ADDQ $4, R15 \
	ADDQ $2, R8 \
	ADDQ $128, DI

// func iq1mDotAVX2(row *byte, x *float32, nb int) float32
// Sub-block: 4 qs bytes at 4ib (R15), 2 qh bytes at 32+2ib (R8); 3-bit
// scales, two sub-blocks a word at 48 (R13), so the loop takes sub-blocks
// in pairs; d is the f16 of the four words' top nibbles. Weight =
// dl·(grid+delta), as decodeIQ1M.
TEXT ·iq1mDotAVX2(SB), NOSPLIT, $0-28
	KDOT_BEGIN
	LEAQ ·iq1sGrid(SB), R10
iq1mblock:
	KPREFETCH1
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
	VMOVQ AX, X6
	VCVTPH2PS X6, X6
	MOVQ SI, R15
	LEAQ 32(SI), R8
	LEAQ 48(SI), R13
	MOVQ $4, R14
iq1mpair:
	IQ1M_SUB(0)
	IQ1M_SUB(6)
	ADDQ $2, R13
	DECQ R14
	JNZ iq1mpair
	ADDQ $56, SI
	DECQ CX
	JNZ iq1mblock
	KDOT_SUM
