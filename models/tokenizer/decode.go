package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// tokenBytes is what HF's ByteLevel decoder makes of one token: the bytes
// behind its byte-level characters, or, when some character is not a
// byte-level one (added tokens such as "<｜User｜>"), the token's own UTF-8.
func tokenBytes(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}

// Decode turns ids back into text. Special tokens are kept (HF's
// skip_special_tokens=False); ids outside the vocabulary are skipped.
// Invalid UTF-8 becomes U+FFFD, one per maximal invalid subsequence, as
// Rust's String::from_utf8_lossy does.
func (t *Tokenizer) Decode(ids []int32) string {
	var buf []byte
	for _, id := range ids {
		buf = append(buf, t.bytesOf(id)...)
	}
	return lossyUTF8(buf)
}

// TokenBytes is the text of token id as raw bytes (a byte-level token may
// hold part of a UTF-8 sequence); nil for an id outside the vocabulary.
// The slice is the tokenizer's own: callers must not modify it.
func (t *Tokenizer) TokenBytes(id int32) []byte { return t.bytesOf(id) }

func (t *Tokenizer) bytesOf(id int32) []byte {
	if id < 0 || int(id) >= len(t.decoded) {
		return nil
	}
	return t.decoded[id]
}

// lossyUTF8 replaces each maximal subpart of an ill-formed sequence with
// U+FFFD (Unicode §3.9, what from_utf8_lossy implements).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefixLen(b[i:])
	}
	return sb.String()
}

// invalidPrefixLen is the length of the maximal subpart at the start of b,
// which begins with an ill-formed sequence: the longest prefix that could
// start a well-formed sequence, at least 1.
func invalidPrefixLen(b []byte) int {
	need, lo, hi := seqInfo(b[0])
	if need == 0 {
		return 1
	}
	n := 1
	for k := 1; k <= need && k < len(b); k++ {
		c := b[k]
		l, h := byte(0x80), byte(0xBF)
		if k == 1 {
			l, h = lo, hi
		}
		if c < l || c > h {
			break
		}
		n++
	}
	return n
}

// seqInfo gives, for a lead byte, how many continuation bytes follow and
// the allowed range of the first one; need is 0 for a byte that cannot
// start a sequence.
func seqInfo(c byte) (need int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 1, 0x80, 0xBF
	case c == 0xE0:
		return 2, 0xA0, 0xBF
	case c == 0xED:
		return 2, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 2, 0x80, 0xBF
	case c == 0xF0:
		return 3, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 3, 0x80, 0xBF
	case c == 0xF4:
		return 3, 0x80, 0x8F
	}
	return 0, 0, 0
}

// incompleteTail is the length of a trailing sequence in b that is a
// valid but unfinished UTF-8 prefix (0 if none): bytes a later token may
// complete.
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		start := len(b) - k
		need, _, _ := seqInfo(b[start])
		if need == 0 {
			if b[start] >= 0x80 && b[start] <= 0xBF {
				continue // a continuation byte: look further back
			}
			return 0
		}
		if k <= need && invalidPrefixLen(b[start:]) == k {
			return k
		}
		return 0
	}
	return 0
}

// Decoder turns a stream of ids into text, returning only complete UTF-8:
// a multi-byte character split across tokens comes out whole, with the
// token that completes it. Concatenating every Next and a final Flush gives
// Decode of all the ids. A Decoder is not safe for concurrent use.
type Decoder struct {
	t       *Tokenizer
	pending []byte
}

// NewDecoder starts a streaming decode.
func (t *Tokenizer) NewDecoder() *Decoder { return &Decoder{t: t} }

// Next adds one token and returns the text that is now complete (possibly "").
func (d *Decoder) Next(id int32) string {
	d.pending = append(d.pending, d.t.bytesOf(id)...)
	keep := incompleteTail(d.pending)
	cut := len(d.pending) - keep
	if cut == 0 {
		return ""
	}
	s := lossyUTF8(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return s
}

// Flush returns what is still held back (an unfinished sequence, as
// U+FFFD) and resets the decoder.
func (d *Decoder) Flush() string {
	s := lossyUTF8(d.pending)
	d.pending = d.pending[:0]
	return s
}
