package cache

import (
	"crypto/sha256"
	"encoding/binary"
)

// Key names the contents of one full block in context: a hash chain over
// a seed (model and owner) and every token from position 0 to the block's
// end. Equal keys mean equal KV, so any sequence whose tokens start with
// the same blocks can reuse them. 128 bits of SHA-256 make an accidental
// collision (which would silently hand out wrong KV) practically impossible.
type Key [16]byte

// Seed is the start of the chains of one model and owner: prefixes are
// shared only within it, so one user's cached prompts neither leak to nor
// time-reveal to another.
func Seed(model string, owner uint32) Key {
	h := sha256.New()
	h.Write([]byte("pocketllm/kv/v1\x00"))
	h.Write([]byte(model))
	var b [5]byte
	binary.LittleEndian.PutUint32(b[1:], owner)
	h.Write(b[:])
	var k Key
	copy(k[:], h.Sum(nil))
	return k
}

// Next chains the key of the block that holds tokens after the block
// whose key is prev.
func (prev Key) Next(tokens []int32) Key {
	buf := make([]byte, len(prev)+4*len(tokens))
	copy(buf, prev[:])
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[len(prev)+4*i:], uint32(t))
	}
	sum := sha256.Sum256(buf)
	var k Key
	copy(k[:], sum[:])
	return k
}

// ChainKeys returns the keys of the full blocks of tokens (len(tokens)/bs
// of them), starting from seed.
func ChainKeys(seed Key, tokens []int32, bs int) []Key {
	keys := make([]Key, len(tokens)/bs)
	k := seed
	for i := range keys {
		k = k.Next(tokens[i*bs : (i+1)*bs])
		keys[i] = k
	}
	return keys
}
