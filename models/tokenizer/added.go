package tokenizer

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens (or a GGUF
// control/user-defined token).
type addedToken struct {
	id         int32
	content    string
	special    bool
	lstrip     bool
	rstrip     bool
	singleWord bool
	normalized bool
}

// addedMatcher finds added tokens in text, leftmost first and longest at
// a given start, like the Aho-Corasick LeftmostLongest matcher of HF.
type addedMatcher struct {
	byContent map[string]*addedToken
	lens      [256][]int // distinct content lengths by first byte, longest first
}

func newAddedMatcher(toks []*addedToken, content func(*addedToken) string) *addedMatcher {
	m := &addedMatcher{byContent: make(map[string]*addedToken)}
	for _, t := range toks {
		c := content(t)
		if c == "" {
			continue
		}
		if _, dup := m.byContent[c]; dup {
			continue
		}
		m.byContent[c] = t
		if !slices.Contains(m.lens[c[0]], len(c)) {
			m.lens[c[0]] = append(m.lens[c[0]], len(c))
		}
	}
	for i := range m.lens {
		slices.SortFunc(m.lens[i], func(a, b int) int { return b - a })
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.byContent) == 0 }

// segment is a piece of input: either an added token or text to encode.
type segment struct {
	text string
	tok  *addedToken // nil for plain text
}

// split cuts s into text segments and added-token segments, applying the
// tokens' lstrip/rstrip/single_word options as HF does.
func (m *addedMatcher) split(s string, dst []segment) []segment {
	if m.empty() {
		return append(dst, segment{text: s})
	}
	textStart := 0 // start of the pending text segment
	for i := 0; i < len(s); {
		lens := m.lens[s[i]]
		var tok *addedToken
		var end int
		for _, l := range lens {
			if i+l <= len(s) {
				if t, ok := m.byContent[s[i:i+l]]; ok {
					tok, end = t, i+l
					break
				}
			}
		}
		if tok == nil {
			i++
			continue
		}
		start := i
		if tok.singleWord {
			r0, _ := utf8.DecodeLastRuneInString(s[:start])
			r1, _ := utf8.DecodeRuneInString(s[end:])
			if (start > 0 && isWordChar(r0)) || (end < len(s) && isWordChar(r1)) {
				i = end
				continue
			}
		}
		if tok.lstrip {
			for start > textStart {
				r, n := utf8.DecodeLastRuneInString(s[textStart:start])
				if !isWhitespace(r) {
					break
				}
				start -= n
			}
		}
		if tok.rstrip {
			for end < len(s) {
				r, n := utf8.DecodeRuneInString(s[end:])
				if !isWhitespace(r) {
					break
				}
				end += n
			}
		}
		if start > textStart {
			dst = append(dst, segment{text: s[textStart:start]})
		}
		dst = append(dst, segment{text: s[start:end], tok: tok})
		textStart, i = end, end
	}
	if textStart < len(s) {
		dst = append(dst, segment{text: s[textStart:]})
	}
	return dst
}

func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r)
}
