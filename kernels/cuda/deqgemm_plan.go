package cuda

// deqChunk is one step of deqGEMM: weight rows [c0, c0+n) expanded to
// bf16 and multiplied as np rows (n padded with zero rows to a multiple of
// 8, the widths cuBLASLt takes), into the output itself (direct) or into
// the scratch, whose first n columns are then copied to columns c0… of
// the output. Here rather than in deqgemm.go so that it tests without the
// cuda tag.
type deqChunk struct {
	c0, n, np int
	direct    bool
}

// deqChunks splits out weight rows into chunks of at most chunk rows.
// Only a single unpadded chunk of the whole matrix writes the output
// directly: a padded one writes np columns, and a later chunk's product
// starts at column 0 of whatever it is given.
func deqChunks(out, chunk int) []deqChunk {
	chunk = min(chunk, out)
	if chunk <= 0 {
		return nil
	}
	var cs []deqChunk
	for c0 := 0; c0 < out; c0 += chunk {
		n := min(chunk, out-c0)
		np := (n + 7) &^ 7
		cs = append(cs, deqChunk{c0: c0, n: n, np: np, direct: n == out && np == n})
	}
	return cs
}
