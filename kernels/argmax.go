package kernels

// ArgmaxOps is an optional extension of Backend: greedy decoding's token
// over a tensor-parallel group's vocabulary slices without assembling the
// logits (models.Plan's vocabulary-parallel head). Each rank writes its
// slice's best value and index as a pair at its slot of a buffer of
// 2·slots floats, zeros in the other slots; one all-reduce of those
// floats (where the logits took one of the vocabulary's) gives every rank
// all the pairs, and each picks the same token from them (models.PickPairs:
// the first of the largest value in slot order, which is vmath.Argmax's
// rule over the whole vocabulary, since a slice's pair is its own first
// largest value and slots are in vocabulary order).
type ArgmaxOps interface {
	// ArgmaxPair writes at dst[2·slot] the largest of x[0:n] and at
	// dst[2·slot+1] offset plus its index as a float32 (exact below 2^24),
	// the lowest index on ties, and zero in dst's other 2·(slots-1)
	// floats. A NaN never wins; where every value is NaN (or n is 0) the
	// pair is (NaN, offset), which the pick never takes.
	ArgmaxPair(dst, x Buf, n, offset, slot, slots int)
}

// MaxPairIndex bounds the indices a pair carries: float32 holds every
// integer below it exactly.
const MaxPairIndex = 1 << 24
