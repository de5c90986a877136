//go:build !amd64

package cpu

func dotBF16(w []uint16, x []float32) float32 { return dotBF16Go(w, x) }

func dotF32(a, b []float32) float32 { return dotF32Go(a, b) }
