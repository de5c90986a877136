// Package vmath owns the float32 vector loops shared by the CPU backend
// and the sampler: the softmax's exponentials, the sigmoid (SiLU and the
// gates), max, scaling and an element-wise multiply-add. Each has an
// AVX-512 and an AVX2 form and a portable Go loop, and all three give the
// same bits, so results do not depend on the CPU they ran on.
//
// The exponential is e^r·2^k: a Cody–Waite reduction to |r| ≤ ln2/2 and
// a degree-7 polynomial, within 1 ulp of e^x (TestExpShiftedAccuracy).
// math.Exp's float64 call a score was 12% of a 2K-context CPU prefill,
// and 1.5 ms of every sampled token over a 152K vocabulary. Every step is
// one float32 multiply or add (explicit conversions keep Go from fusing
// them), k rounds half to even, and a sum is kept in 16 lanes (element i
// in lane i mod 16) reduced as a tree: what the vector loops do.
package vmath

import "math"

const (
	expLog2E = float32(1.44269504088896341)
	expLn2Hi = float32(0.693359375) // 9 bits: k·expLn2Hi is exact for |k| < 2^15
	expLn2Lo = float32(-2.12194440e-4)
	// expMin is the smallest x whose e^x is a normal float32; below it
	// the weight is 0 (e^x < 1.2e-38: nothing next to the maximum's 1).
	expMin = float32(-87.33654)
	// Minimax coefficients of (e^r - 1 - r)/r² on |r| ≤ ln2/2 (the
	// classic single-precision set), highest power first.
	expP0 = float32(1.9875691500e-4)
	expP1 = float32(1.3981999507e-3)
	expP2 = float32(8.3334519073e-3)
	expP3 = float32(4.1665795894e-2)
	expP4 = float32(1.6666665459e-1)
	expP5 = float32(5.0000001201e-1)
)

// ExpNeg is e^x for x ≤ 0 (0 below -87.34), as a lane of the vector
// loops computes it.
func ExpNeg(x float32) float32 {
	if x < expMin {
		return 0
	}
	k := float32(math.RoundToEven(float64(float32(x * expLog2E))))
	r := x - float32(k*expLn2Hi)
	r = r - float32(k*expLn2Lo)
	p := float32(expP0*r) + expP1
	p = float32(p*r) + expP2
	p = float32(p*r) + expP3
	p = float32(p*r) + expP4
	p = float32(p*r) + expP5
	r2 := float32(r * r)
	p = float32(p*r2) + r
	p = p + 1
	return p * math.Float32frombits(uint32(int32(k)+127)<<23)
}

// Sigmoid is 1/(1+e^-x) from ExpNeg, as the vector loops compute it:
// t = e^-|x|, then (x < 0 ? t : 1) / (1 + t), within 2 ulp
// (TestSigmoidAccuracy; 0 below x = expMin).
func Sigmoid(x float32) float32 {
	t := ExpNeg(math.Float32frombits(math.Float32bits(x) | 1<<31))
	num := float32(1)
	if x < 0 {
		num = t
	}
	return num / (1 + t)
}

// sigmoidMulGo is SigmoidMul's portable loop.
func sigmoidMulGo(d, x []float32) {
	x = x[:len(d)]
	for i := range d {
		d[i] *= Sigmoid(x[i])
	}
}

// expShiftedGo is ExpShifted's portable loop.
func expShiftedGo(scores []float32, maxS float32) float32 {
	var lanes [16]float32
	expShiftedFrom(scores, 0, maxS, &lanes)
	return sumLanes16(&lanes)
}

// expShiftedFrom does ExpShifted's work from score i0 (a multiple of 16)
// on, into lanes.
func expShiftedFrom(scores []float32, i0 int, maxS float32, lanes *[16]float32) {
	for i := i0; i < len(scores); i++ {
		e := ExpNeg(scores[i] - maxS)
		scores[i] = e
		lanes[i%16] += e
	}
}

// sumLanes16 reduces 16 lanes as the vector loop does: halves added
// lane by lane, 8 then 4, 2 and 1 wide.
func sumLanes16(l *[16]float32) float32 {
	for w := 8; w >= 1; w /= 2 {
		for j := range w {
			l[j] += l[j+w]
		}
	}
	return l[0]
}

// mulAddGo is MulAdd's portable loop.
func mulAddGo(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] += float32(a[i] * b[i])
	}
}

// Argmax is the index of the largest value, the lowest index on ties: a
// NaN never wins (not even at index 0), and with nothing but NaN (or no
// values) it is 0. It is greedy decoding's rule on the host, the CUDA
// argmax kernel's, and (slice by slice, then over the slices' pairs in
// order) a tensor-parallel group's (kernels.ArgmaxOps).
func Argmax(x []float32) int32 {
	best := -1
	for i, v := range x {
		if v == v && (best < 0 || v > x[best]) { // v == v: not NaN
			best = i
		}
	}
	return int32(max(best, 0))
}
