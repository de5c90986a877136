//go:build amd64

package cpu

//go:noescape
func deltaDecayAVX2(s, k, delta *float32, dk, dv, cols int, decay float32)

//go:noescape
func deltaUpdateAVX2(s, k, q, delta, o *float32, dk, dv, cols int)

// deltaBandCols is how many of a state's dv columns the vector passes
// take: the multiples of 32, or none where AVX2 is missing.
func deltaBandCols(dv int) int {
	if !haveAVX2 {
		return 0
	}
	return dv &^ 31
}

// deltaDecayBands and deltaUpdateBands run the passes of deltaDecay and
// deltaUpdate over the state's first cols columns.
func deltaDecayBands(s, k, delta []float32, decay float32, cols int) {
	if cols > 0 && len(k) > 0 {
		deltaDecayAVX2(&s[0], &k[0], &delta[0], len(k), len(delta), cols, decay)
	}
}

func deltaUpdateBands(s, k, q, delta, o []float32, cols int) {
	if cols > 0 && len(k) > 0 {
		deltaUpdateAVX2(&s[0], &k[0], &q[0], &delta[0], &o[0], len(k), len(delta), cols)
	}
}
