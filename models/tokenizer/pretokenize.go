package tokenizer

import (
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The pre-tokenizer regexes of Qwen, Llama 3 and DeepSeek-V3 use
// look-ahead (`\s+(?!\S)`) and Unicode classes, which Go's regexp (RE2)
// cannot express. github.com/dlclark/regexp2 is a backtracking engine with
// .NET semantics whose leftmost-first alternation, \s (Unicode White_Space)
// and \p{..} classes behave like the Oniguruma engine Hugging Face tokenizers
// uses, so the patterns from tokenizer.json run unchanged.
// The two most common patterns also have an exact hand-written scanner
// (scan.go) that is several times faster; tests check it against regexp2.

// pattern finds non-overlapping matches, calling fn with the byte offsets
// of each in order.
type pattern interface {
	find(s string, fn func(start, end int))
}

// findAll collects the matches of p in s.
func findAll(p pattern, s string) [][2]int {
	var out [][2]int
	p.find(s, func(a, b int) { out = append(out, [2]int{a, b}) })
	return out
}

type regexPattern struct{ re *regexp2.Regexp }

const regexTimeout = 2 * time.Second

func compileRegex(expr string) (pattern, error) {
	if p := knownScanner(expr); p != nil {
		return p, nil
	}
	return compileRegexp2(expr)
}

func compileRegexp2(expr string) (*regexPattern, error) {
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", expr, err)
	}
	// A pathological pattern from a file must not hang Encode: past the
	// timeout the rest of the piece is left unsplit.
	re.MatchTimeout = regexTimeout
	return &regexPattern{re: re}, nil
}

func compilePattern(p *hfPattern) (pattern, error) {
	switch {
	case p.Regex != nil:
		return compileRegex(*p.Regex)
	case p.String != nil:
		if *p.String == "" {
			return nil, errors.New("empty String pattern")
		}
		return literalPattern(*p.String), nil
	}
	return nil, errors.New("pattern is neither String nor Regex")
}

func (p *regexPattern) find(s string, fn func(start, end int)) {
	if s == "" {
		return
	}
	// regexp2 works on runes; keep the byte offset of each rune so that
	// invalid UTF-8 bytes keep their own width.
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		runes = append(runes, r)
		offs = append(offs, i)
		i += n
	}
	offs = append(offs, len(s))
	m, err := p.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			fn(offs[m.Index], offs[m.Index+m.Length])
		}
		m, err = p.re.FindNextMatch(m)
	}
}

type literalPattern string

func (p literalPattern) find(s string, fn func(start, end int)) {
	for i := 0; i+len(p) <= len(s); {
		if s[i:i+len(p)] == string(p) {
			fn(i, i+len(p))
			i += len(p)
			continue
		}
		i++
	}
}

// preStep splits a piece of text into smaller pieces, in order.
type preStep interface {
	split(s string, emit func(string))
}

// splitStep is HF's Split pre-tokenizer.
type splitStep struct {
	pat      pattern
	behavior string
	invert   bool
}

func newSplitStep(pat pattern, behavior string, invert bool) (*splitStep, error) {
	switch behavior {
	case "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous":
	default:
		return nil, fmt.Errorf("unsupported split behavior %q", behavior)
	}
	return &splitStep{pat: pat, behavior: behavior, invert: invert}, nil
}

type span struct {
	start, end int
	match      bool
}

func (st *splitStep) split(s string, emit func(string)) {
	if s == "" {
		return
	}
	if st.behavior == "Isolated" && !st.invert {
		// The common case streams: gaps and matches are both pieces.
		prev := 0
		st.pat.find(s, func(a, b int) {
			if a > prev {
				emit(s[prev:a])
			}
			emit(s[a:b])
			prev = b
		})
		if prev < len(s) {
			emit(s[prev:])
		}
		return
	}
	ms := findAll(st.pat, s)
	spans := make([]span, 0, 2*len(ms)+1)
	prev := 0
	for _, m := range ms {
		if m[0] > prev {
			spans = append(spans, span{prev, m[0], false})
		}
		spans = append(spans, span{m[0], m[1], true})
		prev = m[1]
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	if st.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var out []span
	switch st.behavior {
	case "Isolated":
		out = spans
	case "Removed":
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case "MergedWithPrevious":
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case "MergedWithNext":
		prevMatch := false
		var rev []span
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(rev) > 0 {
				rev[len(rev)-1].start = sp.start
			} else {
				rev = append(rev, sp)
			}
			prevMatch = sp.match
		}
		for i := len(rev) - 1; i >= 0; i-- {
			out = append(out, rev[i])
		}
	case "Contiguous":
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	}
	for _, sp := range out {
		if sp.end > sp.start {
			emit(s[sp.start:sp.end])
		}
	}
}

// gpt2Pattern is the split ByteLevel applies when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevelStep is the splitting part of HF's ByteLevel pre-tokenizer; the
// byte → character mapping itself is folded into BPE (bpe.go).
type byteLevelStep struct {
	addPrefixSpace bool
	re             pattern // nil when use_regex is false
}

func (st *byteLevelStep) split(s string, emit func(string)) {
	if s == "" {
		return
	}
	if st.addPrefixSpace && s[0] != ' ' {
		s = " " + s
	}
	if st.re == nil {
		emit(s)
		return
	}
	(&splitStep{pat: st.re, behavior: "Isolated"}).split(s, emit)
}

// digitsStep is HF's Digits pre-tokenizer.
type digitsStep struct{ individual bool }

func (st digitsStep) split(s string, emit func(string)) {
	start := 0
	prevDigit := false
	for i, r := range s {
		d := unicode.IsDigit(r)
		if i > start && (d != prevDigit || (d && st.individual)) {
			emit(s[start:i])
			start = i
		}
		prevDigit = d
	}
	if start < len(s) {
		emit(s[start:])
	}
}

// buildPreTokenizer flattens a pre_tokenizer into steps and reports
// whether a ByteLevel step was present (required: only byte-level BPE is
// supported).
func buildPreTokenizer(c *component, steps []preStep, byteLevel *bool) ([]preStep, error) {
	switch c.Type {
	case "Sequence":
		for i, raw := range c.Pretokenizers {
			sub, err := parseComponent(raw)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer %d: %w", i, err)
			}
			if steps, err = buildPreTokenizer(sub, steps, byteLevel); err != nil {
				return nil, fmt.Errorf("pre_tokenizer %d: %w", i, err)
			}
		}
		return steps, nil
	case "Split":
		if c.Pattern == nil {
			return nil, errors.New("split pre-tokenizer without a pattern")
		}
		pat, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, err
		}
		st, err := newSplitStep(pat, c.Behavior, c.Invert)
		if err != nil {
			return nil, err
		}
		return append(steps, st), nil
	case "ByteLevel":
		*byteLevel = true
		st := &byteLevelStep{addPrefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			re, err := compileRegex(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			st.re = re
		}
		if !st.addPrefixSpace && st.re == nil {
			return steps, nil // a no-op split
		}
		return append(steps, st), nil
	case "Digits":
		return append(steps, digitsStep{individual: c.IndividualDigits}), nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer %q", c.Type)
}

// isWhitespace is Rust's char::is_whitespace (Unicode White_Space).
func isWhitespace(r rune) bool { return unicode.Is(unicode.White_Space, r) }
