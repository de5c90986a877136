package session

import (
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// JSON mode (OpenAI's response_format {"type": "json_object"}): every
// sampled token must keep the generated text a prefix of one JSON object
// (RFC 8259, its numbers within a float64's range: jsonnumber.go), and
// generation stops as soon as the object closes. The
// check runs on the bytes of each candidate token through jsonPrefix, a
// byte-level pushdown automaton; the sampler draws as usual and redraws
// without a token the automaton refuses (see sampleJSON), so the common
// case costs a few token checks per step, not one per vocabulary entry.
// Written here rather than taken from a library: the Go JSON libraries
// parse whole documents, and what is needed is "may these bytes still
// become one", byte by byte, with a state small enough to copy per check.

// maxJSONDepth bounds the nesting a JSON-mode generation may open.
const maxJSONDepth = 64

// maxJSONSpace bounds a run of whitespace between JSON tokens: enough for
// a newline and the indentation of pretty-printed JSON a few levels deep,
// but a model cannot spend its tokens on whitespace (OpenAI's JSON mode
// warns of exactly that), which a weak or confused model otherwise does.
const maxJSONSpace = 12

type jsonMode uint8

const (
	jTop      jsonMode = iota // before the object: whitespace or '{'
	jValue                    // a value (after ':', or in an array after ',')
	jObjFirst                 // after '{': a key or '}'
	jObjKey                   // after ',' in an object: a key
	jArrFirst                 // after '[': a value or ']'
	jColon                    // after a key
	jAfter                    // after a value: ',', '}' or ']' as the container allows
	jString                   // inside a string (key or value: inKey)
	jEscape                   // after '\' in a string
	jHex                      // inside \uXXXX (hex digits left)
	jNumMinus                 // after '-'
	jNumZero                  // a leading 0
	jNumInt                   // integer digits
	jNumDot                   // after '.': a digit
	jNumFrac                  // fraction digits
	jNumE                     // after 'e'/'E': sign or digit
	jNumESign                 // after the exponent's sign: a digit
	jNumExp                   // exponent digits
	jLiteral                  // inside true/false/null (lit left)
	jDone                     // the object closed: whitespace only
)

// jsonPrefix is the automaton's state. The zero value expects an object.
type jsonPrefix struct {
	mode  jsonMode
	inKey bool   // the string being read is an object key
	hex   uint8  // \u digits left
	lit   string // literal bytes left
	num   numMag // the number being read (jsonnumber.go)
	stack []byte // open containers, '{' or '['
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// closed is the state after a value ends (with the container on top).
func (j *jsonPrefix) closed() {
	if len(j.stack) == 0 {
		j.mode = jDone
	} else {
		j.mode = jAfter
	}
}

// open starts a container, within the depth bound.
func (j *jsonPrefix) open(c byte) bool {
	if len(j.stack) >= maxJSONDepth {
		return false
	}
	j.stack = append(j.stack, c)
	if c == '{' {
		j.mode = jObjFirst
	} else {
		j.mode = jArrFirst
	}
	return true
}

// value starts a value at byte c.
func (j *jsonPrefix) value(c byte) bool {
	switch {
	case c == '{' || c == '[':
		return j.open(c)
	case c == '"':
		j.mode, j.inKey = jString, false
	case c == '-' || c >= '0' && c <= '9':
		j.mode, j.num = numberStart(c)
	case c == 't':
		j.mode, j.lit = jLiteral, "rue"
	case c == 'f':
		j.mode, j.lit = jLiteral, "alse"
	case c == 'n':
		j.mode, j.lit = jLiteral, "ull"
	default:
		return false
	}
	return true
}

// after is a byte after a complete value: whitespace, or the container's
// separator or end.
func (j *jsonPrefix) after(c byte) bool {
	if isJSONSpace(c) {
		j.closed()
		return true
	}
	if len(j.stack) == 0 {
		return false
	}
	top := j.stack[len(j.stack)-1]
	switch {
	case c == ',' && top == '{':
		j.mode = jObjKey
	case c == ',' && top == '[':
		j.mode = jValue
	case (c == '}' && top == '{') || (c == ']' && top == '['):
		j.stack = j.stack[:len(j.stack)-1]
		j.closed()
	default:
		return false
	}
	return true
}

// feed advances by one byte and reports whether the text is still a
// prefix of a JSON object; on false the state is unspecified.
func (j *jsonPrefix) feed(c byte) bool {
	switch j.mode {
	case jTop:
		if isJSONSpace(c) {
			return true
		}
		return c == '{' && j.open(c)
	case jValue:
		return isJSONSpace(c) || j.value(c)
	case jObjFirst, jObjKey:
		switch {
		case isJSONSpace(c):
		case c == '"':
			j.mode, j.inKey = jString, true
		case c == '}' && j.mode == jObjFirst:
			j.stack = j.stack[:len(j.stack)-1]
			j.closed()
		default:
			return false
		}
		return true
	case jArrFirst:
		switch {
		case isJSONSpace(c):
			return true
		case c == ']':
			j.stack = j.stack[:len(j.stack)-1]
			j.closed()
			return true
		}
		return j.value(c)
	case jColon:
		if c == ':' {
			j.mode = jValue
			return true
		}
		return isJSONSpace(c)
	case jAfter:
		return j.after(c)
	case jString, jEscape, jHex:
		ok, closed := stringStep(&j.mode, &j.hex, c)
		if closed {
			if j.inKey {
				j.mode = jColon
			} else {
				j.closed()
			}
		}
		return ok
	case jNumMinus, jNumZero, jNumInt, jNumDot, jNumFrac, jNumE, jNumESign, jNumExp:
		ok, ended := numberStep(&j.mode, &j.num, c, false)
		if ended {
			return j.after(c) // the number ended before c
		}
		return ok
	case jLiteral:
		if c != j.lit[0] {
			return false
		}
		if j.lit = j.lit[1:]; j.lit == "" {
			j.closed()
		}
		return true
	case jDone:
		return isJSONSpace(c)
	}
	return false
}

// stringStep advances a string's scan (sub: jString, jEscape or jHex,
// hex: \u digits left) by byte c: ok false when c cannot be there, closed
// when c is the closing quote.
func stringStep(sub *jsonMode, hex *uint8, c byte) (ok, closed bool) {
	switch *sub {
	case jString:
		switch {
		case c == '"':
			return true, true
		case c == '\\':
			*sub = jEscape
		case c < 0x20:
			return false, false // control characters must be escaped
		}
		return true, false
	case jEscape:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			*sub = jString
		case 'u':
			*sub, *hex = jHex, 4
		default:
			return false, false
		}
		return true, false
	case jHex:
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false, false
		}
		if *hex--; *hex == 0 {
			*sub = jString
		}
		return true, false
	}
	return false, false
}

// numberStart is the scan of a number after its first byte c ('-' or a
// digit): its mode and magnitude.
func numberStart(c byte) (jsonMode, numMag) {
	var m numMag
	switch c {
	case '-':
		return jNumMinus, m
	case '0':
		return jNumZero, m
	}
	m.digit(jNumInt, c)
	return jNumInt, m
}

// numberStep advances a number's scan (sub: one of the jNum* modes, m its
// magnitude) by byte c: ok false when c cannot be there, ended when the
// number is complete and c is not part of it (it belongs to what
// follows). An integer takes no fraction or exponent. A number that
// overflows a float64 (numMag) cannot end, nor take an exponent digit
// past which every number does.
func numberStep(sub *jsonMode, m *numMag, c byte, integer bool) (ok, ended bool) {
	digit := c >= '0' && c <= '9'
	switch *sub {
	case jNumMinus:
		switch {
		case c == '0':
			*sub = jNumZero
		case digit:
			*sub = jNumInt
			m.digit(jNumInt, c)
		default:
			return false, false
		}
		return true, false
	case jNumZero, jNumInt, jNumFrac:
		switch {
		case digit && *sub != jNumZero:
			m.digit(*sub, c)
			return true, false
		case c == '.' && *sub != jNumFrac && !integer:
			*sub = jNumDot
			return true, false
		case (c == 'e' || c == 'E') && !integer:
			*sub = jNumE
			return true, false
		}
		return false, !m.overflows()
	case jNumDot:
		if digit {
			*sub = jNumFrac
			m.digit(jNumFrac, c)
		}
		return digit, false
	case jNumE:
		switch {
		case c == '+' || c == '-':
			*sub, m.expNeg = jNumESign, c == '-'
			return true, false
		case !digit:
			return false, false
		}
		fallthrough
	case jNumESign:
		if !digit {
			return false, false
		}
		*sub = jNumExp
		return expDigit(m, c), false
	case jNumExp:
		if digit {
			return expDigit(m, c), false
		}
		return false, !m.overflows()
	}
	return false, false
}

// expDigit takes exponent digit c into m unless every number it begins
// overflows (m is left as it was then).
func expDigit(m *numMag, c byte) bool {
	next := *m
	next.digit(jNumExp, c)
	if next.surelyOverflows() {
		return false
	}
	*m = next
	return true
}

// complete reports whether the object has closed.
func (j *jsonPrefix) complete() bool { return j.mode == jDone }

// inLiteral reports whether the next byte is the content of a string or
// literal (whitespace there is not a gap between tokens).
func (j *jsonPrefix) inLiteral() bool {
	return j.mode == jString || j.mode == jEscape || j.mode == jHex || j.mode == jLiteral
}

// copyTo makes dst (a *jsonPrefix) a copy of j, reusing its stack
// storage.
func (j *jsonPrefix) copyTo(dst automaton) {
	d := dst.(*jsonPrefix)
	stack := append(d.stack[:0], j.stack...)
	*d = *j
	d.stack = stack
}

// automaton is a byte-level prefix check: jsonPrefix (any object) or
// schemaPrefix (a value of a schema).
type automaton interface {
	// feed advances by one byte and reports whether the text is still a
	// prefix of an accepted value (on false the state is unspecified).
	feed(c byte) bool
	// complete reports whether the value has closed.
	complete() bool
	// inLiteral reports whether the next byte is inside a string or
	// literal.
	inLiteral() bool
	// copyTo makes dst, of the same type, a copy.
	copyTo(dst automaton)
}

// jsonConstraint holds a JSON-mode generation to one object, or to one
// value of a schema, token by token.
type jsonConstraint struct {
	tok            *tokenizer.Tokenizer
	eos            map[int32]bool
	state, scratch automaton
	space          int       // whitespace bytes between tokens at the end of the text
	masked         []float32 // sampleJSON's copy of the logits
}

func newJSONConstraint(tok *tokenizer.Tokenizer, eos map[int32]bool, schema *JSONSchema) *jsonConstraint {
	c := &jsonConstraint{tok: tok, eos: eos, state: &jsonPrefix{}, scratch: &jsonPrefix{}}
	if schema != nil {
		c.state, c.scratch = newSchemaPrefix(schema.root), &schemaPrefix{}
	}
	return c
}

// allows reports whether token id may come next: its bytes keep the text
// a JSON object prefix (special tokens never do), or it is an end of
// sequence and the object is complete.
func (c *jsonConstraint) allows(id int32) bool {
	if c.eos[id] {
		return c.state.complete()
	}
	b := c.tok.TokenBytes(id)
	if len(b) == 0 || c.tok.IsSpecial(id) {
		return false
	}
	c.state.copyTo(c.scratch)
	space := c.space
	for _, x := range b {
		if space = spaceRun(c.scratch, x, space); space > maxJSONSpace || !c.scratch.feed(x) {
			return false
		}
	}
	return true
}

// spaceRun is the whitespace run after byte x, at automaton a's state
// before it.
func spaceRun(a automaton, x byte, run int) int {
	if isJSONSpace(x) && !a.inLiteral() {
		return run + 1
	}
	return 0
}

// advance takes an allowed token.
func (c *jsonConstraint) advance(id int32) {
	for _, x := range c.tok.TokenBytes(id) {
		c.space = spaceRun(c.state, x, c.space)
		c.state.feed(x)
	}
}

// done reports whether the object has closed (generation stops).
func (c *jsonConstraint) done() bool { return c.state.complete() }

// sampleJSON draws the next token as the sampler would, among the tokens
// c allows: a refused draw is masked out and drawn again; after 32
// refusals every token is checked once and the draw is among the allowed
// ones. (Masking a refused token and redrawing samples the distribution
// restricted to the allowed tokens, as masking all of them first would;
// top-p is recomputed over what is left.)
func (s *sampler) sampleJSON(logits []float32, c *jsonConstraint) (int32, error) {
	masked := append(c.masked[:0], logits...) // reused: a vocabulary of floats per token
	c.masked = masked
	ninf := float32(math.Inf(-1))
	for range 32 {
		id := s.sample(masked)
		if c.allows(id) {
			return id, nil
		}
		masked[id] = ninf
	}
	best := -1
	for id := range masked {
		if masked[id] != ninf && !c.allows(int32(id)) {
			masked[id] = ninf
		}
		if masked[id] != ninf && (best < 0 || masked[id] > masked[best]) {
			best = id
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%w: JSON mode: no token of the vocabulary continues the object", ErrBadRequest)
	}
	if id := s.sample(masked); c.allows(id) {
		return id, nil
	}
	// The draw's rounding fell on a token of probability zero.
	return int32(best), nil
}
