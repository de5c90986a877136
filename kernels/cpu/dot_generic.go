package cpu

func dotBF16(w []uint16, x []float32) float32 { return dotBF16Go(w, x) }
