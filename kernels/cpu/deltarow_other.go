//go:build !amd64

package cpu

// Without the amd64 vector passes, deltaDecay and deltaUpdate take every
// column in their row loops.

func deltaBandCols(int) int { return 0 }

func deltaDecayBands(s, k, delta []float32, decay float32, cols int) {}

func deltaUpdateBands(s, k, q, delta, o []float32, cols int) {}
