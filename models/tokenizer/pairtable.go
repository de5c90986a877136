package tokenizer

// pairTable maps a token pair to its merge rule. It is an open-addressing
// hash table (linear probing, Fibonacci hashing) because merge lookups
// dominate encoding and a flat array of 16-byte slots is about twice as
// fast as a Go map of 100k+ entries.
type pairTable struct {
	slots []pairSlot
	shift uint
}

type pairSlot struct {
	key  uint64 // emptyKey when free
	rule mergeRule
}

const emptyKey = ^uint64(0) // pairKey of valid ids (< 2^31) never has this value

func newPairTable(n int) *pairTable {
	size, bits := 16, uint(4)
	for size < 2*n {
		size <<= 1
		bits++
	}
	t := &pairTable{slots: make([]pairSlot, size), shift: 64 - bits}
	for i := range t.slots {
		t.slots[i].key = emptyKey
	}
	return t
}

func (t *pairTable) index(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// insert adds k unless present (the first rule for a pair wins).
func (t *pairTable) insert(k uint64, r mergeRule) {
	mask := uint64(len(t.slots) - 1)
	for i := t.index(k); ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case k:
			return
		case emptyKey:
			t.slots[i] = pairSlot{key: k, rule: r}
			return
		}
	}
}

func (t *pairTable) get(k uint64) (mergeRule, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := t.index(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			return s.rule, true
		}
		if s.key == emptyKey {
			return mergeRule{}, false
		}
	}
}
