package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Exact hand-written scanners for the pre-tokenizer regexes that real
// models use. regexp2 runs these at about 2 MB/s; the scanners below
// implement the same leftmost-first alternation (including the
// backtracking of `\s*[\r\n]+` and `\s+(?!\S)`) directly on UTF-8 at
// tens of MB/s. scan_test.go checks them against regexp2 on the reference
// texts and under `go test -fuzz=FuzzScanners`.

// Pattern texts, exactly as they appear in tokenizer.json.
const (
	// Qwen2/Qwen3 (single digits).
	patQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3 (digits in groups of up to three), also GPT-4's cl100k.
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek-V3: three Split steps in sequence (note the literal CR/LF
	// characters inside the third, as in the published file).
	patDSDigits = `\p{N}{1,3}`
	patDSCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDSMain   = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^` + "\r\n" + `\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[` + "\r\n" + `]*|\s*[` + "\r\n" + `]+|\s+(?!\S)|\s+`
)

// knownScanner returns a hand-written scanner for expr when one exists.
func knownScanner(expr string) pattern {
	switch expr {
	case patQwen2:
		return clScanner{maxDigits: 1}
	case patLlama3:
		return clScanner{maxDigits: 3}
	case patDSDigits:
		return digitGroups{}
	case patDSCJK:
		return cjkRuns{}
	case patDSMain:
		return dsScanner{}
	}
	return nil
}

// runeAt decodes the rune at byte i; r is -1 at the end of s.
func runeAt(s string, i int) (r rune, n int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return (r|0x20) >= 'a' && (r|0x20) <= 'z'
	}
	return unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '0' && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isS(r rune) bool { // \s
	if r < utf8.RuneSelf {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	return r >= 0 && unicode.IsSpace(r)
}

func isM(r rune) bool { return r >= utf8.RuneSelf && unicode.IsMark(r) }

func isPS(r rune) bool { // [\p{P}\p{S}]
	if r < 0 {
		return false
	}
	if r < utf8.RuneSelf {
		return r > ' ' && r < 0x7f && !isL(r) && !isN(r)
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r)
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// run advances over runes satisfying f starting at byte i.
func run(s string, i int, f func(rune) bool) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if !f(r) {
			break
		}
		i += n
	}
	return i
}

// spaceTail matches `\s*[\r\n]+|\s+(?!\S)|\s+` at i, where s[i] is
// whitespace.
func spaceTail(s string, i int) int {
	lastNL, lastStart := -1, i
	j := i
	for j < len(s) {
		r, n := runeAt(s, j)
		if !isS(r) {
			break
		}
		if isCRLF(r) {
			lastNL = j
		}
		lastStart = j
		j += n
	}
	if lastNL >= 0 {
		return lastNL + 1 // \s*[\r\n]+ backtracks to the last newline
	}
	if j == len(s) || lastStart == i {
		return j // \s+(?!\S) at the end, or a single space: \s+
	}
	return lastStart // \s+(?!\S) leaves one space for the next word
}

// contraction matches `(?i:s|t|re|ve|m|ll|d)` (after the apostrophe) and
// returns its byte length or 0. Case folding includes U+017F (ſ → s), as
// Unicode case-insensitive matching does.
func contraction(s string, i int) int {
	r, n := runeAt(s, i)
	switch r {
	case 's', 'S', 't', 'T', 'm', 'M', 'd', 'D', 'ſ':
		return n
	case 'r', 'R', 'v', 'V':
		if r2, _ := runeAt(s, i+1); r2 == 'e' || r2 == 'E' {
			return 2
		}
	case 'l', 'L':
		if r2, _ := runeAt(s, i+1); r2 == 'l' || r2 == 'L' {
			return 2
		}
	}
	return 0
}

// clScanner is patQwen2 (maxDigits 1) or patLlama3 (maxDigits 3).
type clScanner struct{ maxDigits int }

func (p clScanner) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		end := p.matchAt(s, i)
		fn(i, end)
		i = end
	}
}

func (p clScanner) matchAt(s string, i int) int {
	r, n := runeAt(s, i)
	if r == '\'' {
		if l := contraction(s, i+n); l > 0 {
			return i + n + l
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r) {
		return run(s, i+n, isL)
	}
	if !isCRLF(r) && !isN(r) {
		if r2, n2 := runeAt(s, i+n); isL(r2) {
			return run(s, i+n+n2, isL)
		}
	}
	// \p{N}{1,maxDigits}
	if isN(r) {
		j := i + n
		for k := 1; k < p.maxDigits; k++ {
			r2, n2 := runeAt(s, j)
			if !isN(r2) {
				break
			}
			j += n2
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	other := func(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) }
	j, rj := i, r
	if r == ' ' {
		if r2, _ := runeAt(s, i+1); other(r2) {
			j, rj = i+1, r2
		}
	}
	if other(rj) {
		j = run(s, j, other)
		return run(s, j, isCRLF)
	}
	return spaceTail(s, i)
}

// digitGroups is `\p{N}{1,3}`.
type digitGroups struct{}

func (digitGroups) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		r, n := runeAt(s, i)
		if !isN(r) {
			i += n
			continue
		}
		j := i + n
		for k := 1; k < 3; k++ {
			r2, n2 := runeAt(s, j)
			if !isN(r2) {
				break
			}
			j += n2
		}
		fn(i, j)
		i = j
	}
}

// cjkRuns is patDSCJK.
type cjkRuns struct{}

func isCJK(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

func (cjkRuns) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		r, n := runeAt(s, i)
		if !isCJK(r) {
			i += n
			continue
		}
		j := run(s, i+n, isCJK)
		fn(i, j)
		i = j
	}
}

// dsScanner is patDSMain.
type dsScanner struct{}

func (dsScanner) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		end := dsMatchAt(s, i)
		if end < 0 {
			_, n := runeAt(s, i)
			i += n
			continue
		}
		fn(i, end)
		i = end
	}
}

func isASCIIPunct(r rune) bool {
	return r > ' ' && r < 0x7f && !isN(r) && !isL(r)
}

func isASCIILetter(r rune) bool { return r < utf8.RuneSelf && isL(r) }

func isLM(r rune) bool { return isL(r) || isM(r) }

// dsMatchAt returns the end of the match at i, or -1.
func dsMatchAt(s string, i int) int {
	r, n := runeAt(s, i)
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if isASCIIPunct(r) {
		if r2, _ := runeAt(s, i+1); isASCIILetter(r2) {
			return run(s, i+1, isASCIILetter)
		}
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if isLM(r) {
		return run(s, i+n, isLM)
	}
	if !isCRLF(r) && !isPS(r) {
		if r2, n2 := runeAt(s, i+n); isLM(r2) {
			return run(s, i+n+n2, isLM)
		}
	}
	// ` ?[\p{P}\p{S}]+[\r\n]*`
	j, rj := i, r
	if r == ' ' {
		if r2, _ := runeAt(s, i+1); isPS(r2) {
			j, rj = i+1, r2
		}
	}
	if isPS(rj) {
		j = run(s, j, isPS)
		return run(s, j, isCRLF)
	}
	if isS(r) {
		return spaceTail(s, i)
	}
	return -1
}
