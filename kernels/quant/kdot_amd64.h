// Macros shared by kdot_amd64.s and kdot_iq_amd64.s: every row dot is
// func(row *byte, x *float32, nb int) float32, accumulating in Y0..Y3.

// KPREFETCH1..KPREFETCH4 ask for one to four lines of the row 2 KiB ahead
// of SI into L1, once a block (as many lines as a block has, at most four).
// The hardware prefetchers alone kept a decode's row dots far from the
// memory's bandwidth (a thread's rows are consecutive, so the stream runs
// on across rows): a Qwen3-0.6B-shaped Q4_K_M decoded at 13.5–14.7 tok/s
// without them and 21.2–23.4 with them in its Q4_K and Q6_K loops, on two
// Sapphire Rapids-class vCPUs (docs/benchmarks.md, 2026-12-02 from 00:31).
// A prefetch past the mapping is a hint, never a fault.
#define KPREFETCH1 \
	PREFETCHT0 2048(SI)
#define KPREFETCH2 \
	KPREFETCH1 \
	PREFETCHT0 2112(SI)
#define KPREFETCH3 \
	KPREFETCH2 \
	PREFETCHT0 2176(SI)
#define KPREFETCH4 \
	KPREFETCH3 \
	PREFETCHT0 2240(SI)

// Q6K_DSCALES puts the Q6_K block at SI's sixteen d·scale (int8 scales at
// +192, d as f16 at +208, converted exactly by F16C) at 0(SP)..63(SP).
#define Q6K_DSCALES \
	MOVWLZX 208(SI), AX \
	VMOVQ AX, X6 \
	VCVTPH2PS X6, X6 \
	VBROADCASTSS X6, Y6 \
	VPMOVSXBD 192(SI), Y4 \
	VPMOVSXBD 200(SI), Y5 \
	VCVTDQ2PS Y4, Y4 \
	VCVTDQ2PS Y5, Y5 \
	VMULPS Y6, Y4, Y4 \
	VMULPS Y6, Y5, Y5 \
	VMOVUPS Y4, 0(SP) \
	VMOVUPS Y5, 32(SP)

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
	VMOVSS X0, ret+24(FP) \
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
	VMOVQ AX, X4 \
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
	VMOVQ AX, X5 \
	MOVL (SI), AX \
	VMOVQ AX, X6 \
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

// Q2K_SCALES puts a block's sixteen d·scale in the frame at 0(SP) and
// its sixteen dmin·min at 64(SP) (Y14: the low-nibble mask).
#define Q2K_SCALES \
	MOVL 80(SI), AX \
	VMOVQ AX, X6 \
	VCVTPH2PS X6, X6 \
	VPSHUFD $0x55, X6, X7 \
	VBROADCASTSS X6, Y6 \
	VBROADCASTSS X7, Y7 \
	VPMOVZXBD 0(SI), Y4 \
	VPMOVZXBD 8(SI), Y5 \
	VPAND Y14, Y4, Y8 \
	VPAND Y14, Y5, Y9 \
	VCVTDQ2PS Y8, Y8 \
	VCVTDQ2PS Y9, Y9 \
	VMULPS Y6, Y8, Y8 \
	VMULPS Y6, Y9, Y9 \
	VMOVUPS Y8, 0(SP) \
	VMOVUPS Y9, 32(SP) \
	VPSRLD $4, Y4, Y4 \
	VPSRLD $4, Y5, Y5 \
	VCVTDQ2PS Y4, Y4 \
	VCVTDQ2PS Y5, Y5 \
	VMULPS Y7, Y4, Y4 \
	VMULPS Y7, Y5, Y5 \
	VMOVUPS Y4, 64(SP) \
	VMOVUPS Y5, 96(SP)
