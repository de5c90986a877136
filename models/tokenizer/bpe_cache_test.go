package tokenizer

import (
	"strings"
	"testing"
	"unsafe"
)

// TestBPECacheKeysDoNotPinText: a word cut from a large text is cached
// under a copy, so the cache does not keep the text alive (a daemon
// tokenizing request bodies would otherwise hold on to each one through
// its first uncached word).
func TestBPECacheKeysDoNotPinText(t *testing.T) {
	vocab := map[string]int32{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = int32(b)
	}
	m, err := newBPE(vocab, nil, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("x", 1<<20) + "unique"
	word := text[len(text)-6:]
	if got := m.encodeWord(word, nil); len(got) != 6 {
		t.Fatalf("encoded %v", got)
	}
	lo := uintptr(unsafe.Pointer(unsafe.StringData(text)))
	hi := lo + uintptr(len(text))
	for k := range m.cache {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(k))); p >= lo && p < hi {
			t.Fatalf("cache key %q points into the encoded text", k)
		}
	}
	if len(m.cache) != 1 {
		t.Fatalf("%d cache entries", len(m.cache))
	}
}
