package cuda

// headSplit is the fewest blocks that share g query heads of a kv head
// with at most maxG heads each and the same number in every block (the
// split attention kernels' hsplit, decode_attn.cuh's HS); g itself when
// nothing smaller divides it. Here rather than in decode.go so that it
// tests without the cuda tag.
func headSplit(g, maxG int) int {
	for n := 1; n <= g; n++ {
		if g%n == 0 && g/n <= maxG {
			return n
		}
	}
	return 0
}
