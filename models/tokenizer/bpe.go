package tokenizer

import (
	"container/heap"
	"strings"
	"sync"
)

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes map to
// themselves, the rest to U+0100 and up, so every byte is one visible char.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// byteLevelString maps raw bytes to their byte-level token spelling.
func byteLevelString(b string) string {
	out := make([]rune, len(b))
	for i := 0; i < len(b); i++ {
		out[i] = byteToRune[b[i]]
	}
	return string(out)
}

type mergeRule struct {
	rank int32
	id   int32 // the merged token
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe is a byte-level BPE model. Words are raw bytes; each byte starts as
// the id of its byte-level character and merges apply lowest rank first,
// leftmost first among equal ranks (as Hugging Face tokenizers does).
type bpe struct {
	vocab        map[string]int32
	merges       *pairTable
	byteIDs      [256]int32 // -1 where the vocabulary lacks the byte
	unk          int32      // -1 if none
	ignoreMerges bool

	mu    sync.RWMutex
	cache map[string][]int32
}

const (
	cacheMaxEntries = 1 << 16
	cacheMaxWordLen = 128
	// Words up to this many symbols use the quadratic scan, which beats
	// the heap on the short words that make up almost all text.
	smallWord = 24
)

func newBPE(vocab map[string]int32, merges [][2]string, unk int32, ignoreMerges bool) (*bpe, error) {
	m := &bpe{
		vocab:        vocab,
		merges:       newPairTable(len(merges)),
		unk:          unk,
		ignoreMerges: ignoreMerges,
		cache:        make(map[string][]int32),
	}
	for b := 0; b < 256; b++ {
		id, ok := vocab[string(byteToRune[b])]
		if !ok {
			id = -1
		}
		m.byteIDs[b] = id
	}
	for i, mg := range merges {
		a, okA := vocab[mg[0]]
		b, okB := vocab[mg[1]]
		c, okC := vocab[mg[0]+mg[1]]
		if !okA || !okB || !okC {
			return nil, errorf("merge %d (%q %q): token not in vocabulary", i, mg[0], mg[1])
		}
		m.merges.insert(pairKey(a, b), mergeRule{rank: int32(i), id: c}) // the first (lowest) rank wins
	}
	return m, nil
}

// encodeWord appends the ids of one pre-tokenized word (raw bytes).
func (m *bpe) encodeWord(word string, dst []int32) []int32 {
	if word == "" {
		return dst
	}
	cacheable := len(word) <= cacheMaxWordLen
	if cacheable {
		m.mu.RLock()
		ids, ok := m.cache[word]
		m.mu.RUnlock()
		if ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	dst = m.merge(word, dst)
	if cacheable {
		ids := append([]int32(nil), dst[start:]...)
		m.mu.Lock()
		if len(m.cache) >= cacheMaxEntries {
			clear(m.cache)
		}
		// The key is a copy: word is usually a slice of the caller's text
		// (the pre-tokenizers cut substrings), and as a key it would keep
		// that whole text (a request body of megabytes) alive for as long
		// as the entry lives.
		m.cache[strings.Clone(word)] = ids
		m.mu.Unlock()
	}
	return dst
}

func (m *bpe) merge(word string, dst []int32) []int32 {
	if m.ignoreMerges {
		if id, ok := m.vocab[byteLevelString(word)]; ok {
			return append(dst, id)
		}
	}
	start := len(dst)
	lastUnk := false
	for i := 0; i < len(word); i++ {
		id := m.byteIDs[word[i]]
		if id < 0 {
			// A byte missing from the vocabulary: HF emits unk_token (one per
			// run, as with fuse_unk) or, without one, drops the byte.
			if m.unk >= 0 && !lastUnk {
				dst = append(dst, m.unk)
			}
			lastUnk = true
			continue
		}
		lastUnk = false
		dst = append(dst, id)
	}
	syms := dst[start:]
	if len(syms) <= smallWord {
		n := m.mergeSmall(syms)
		return dst[:start+n]
	}
	n := m.mergeHeap(syms)
	return dst[:start+n]
}

// mergeSmall merges in place, keeping the rank of every adjacent pair in
// a small array so that each merge costs two map lookups and a scan of
// that array; returns the new length.
func (m *bpe) mergeSmall(s []int32) int {
	n := len(s)
	if n < 2 {
		return n
	}
	var rankBuf [smallWord]int32
	var idBuf [smallWord]int32
	ranks, ids := rankBuf[:n-1], idBuf[:n-1] // pair i = (s[i], s[i+1])
	const none = int32(1<<31 - 1)
	look := func(i int) {
		if r, ok := m.merges.get(pairKey(s[i], s[i+1])); ok {
			ranks[i], ids[i] = r.rank, r.id
		} else {
			ranks[i] = none
		}
	}
	for i := range ranks {
		look(i)
	}
	for n > 1 {
		best := 0
		for i := 1; i < n-1; i++ {
			if ranks[i] < ranks[best] {
				best = i
			}
		}
		if ranks[best] == none {
			break
		}
		s[best] = ids[best]
		copy(s[best+1:n], s[best+2:n])
		copy(ranks[best:n-1], ranks[best+1:n-1])
		copy(ids[best:n-1], ids[best+1:n-1])
		n--
		ranks, ids = ranks[:n-1], ids[:n-1]
		if best > 0 {
			look(best - 1)
		}
		if best < n-1 {
			look(best)
		}
	}
	return n
}

type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	dead       bool
}

type candidate struct {
	rank, pos int32
	id        int32 // the merged token
}

type candHeap []candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	return h[i].rank < h[j].rank || (h[i].rank == h[j].rank && h[i].pos < h[j].pos)
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeHeap is O(n log n) for long words (a run of 10k identical letters
// must not take quadratic time). It writes the result into s and returns
// its length.
func (m *bpe) mergeHeap(s []int32) int {
	syms := make([]symbol, len(s))
	for i, id := range s {
		syms[i] = symbol{id: id, prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	h := make(candHeap, 0, len(s))
	for i := 0; i+1 < len(s); i++ {
		if r, ok := m.merges.get(pairKey(s[i], s[i+1])); ok {
			h = append(h, candidate{rank: r.rank, pos: int32(i), id: r.id})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := heap.Pop(&h).(candidate)
		left := &syms[c.pos]
		if left.dead || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		if r, ok := m.merges.get(pairKey(left.id, right.id)); !ok || r.id != c.id {
			continue // stale: one side changed since this was queued
		}
		left.id = c.id
		right.dead = true
		left.next = right.next
		if left.next >= 0 {
			syms[left.next].prev = c.pos
		}
		if left.prev >= 0 {
			p := &syms[left.prev]
			if r, ok := m.merges.get(pairKey(p.id, left.id)); ok {
				heap.Push(&h, candidate{rank: r.rank, pos: left.prev, id: r.id})
			}
		}
		if left.next >= 0 {
			if r, ok := m.merges.get(pairKey(left.id, syms[left.next].id)); ok {
				heap.Push(&h, candidate{rank: r.rank, pos: c.pos, id: r.id})
			}
		}
	}
	n := 0
	for i := int32(0); i >= 0; i = syms[i].next {
		s[n] = syms[i].id
		n++
	}
	return n
}
