// Macros shared by kdot_amd64.s and kdot_iq_amd64.s: every row dot is
// func(row *byte, x *float32, nb int) float32, accumulating in Y0..Y3.

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
