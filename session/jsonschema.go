package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Structured outputs (OpenAI's response_format json_schema): the reply is
// held to one JSON value of a schema, token by token, as JSON mode holds
// it to any object. The schema is compiled to a tree of schemaNodes, and
// schemaPrefix walks it byte by byte with a stack of frames. Supported is
// the subset OpenAI's strict mode uses, which fixes the reply's shape:
// type (one or a list of primitive types), properties (generated in the
// schema's order, all of them), required, items, enum, const,
// additionalProperties false; annotations are ignored. Keywords that
// constrain values further (pattern, format, minimum, anyOf, $ref, ...)
// are refused rather than ignored: a reply that does not meet them would
// pass for one that does.

// ErrSchema is wrapped by the errors of a schema this server cannot
// follow.
var ErrSchema = errors.New("unsupported JSON schema")

type schemaKind uint8

const (
	kString schemaKind = 1 << iota
	kNumber
	kInteger
	kBoolean
	kNull
	kObject
	kArray
)

// schemaNode is one compiled (sub)schema.
type schemaNode struct {
	kinds schemaKind
	props []schemaProp // kObject, in the schema's order
	items *schemaNode  // kArray
	enum  [][]byte     // the allowed values as compact JSON, when enum/const is given
}

type schemaProp struct {
	key  []byte // the name as a JSON string, quotes included
	node *schemaNode
}

// maxSchemaDepth bounds the nesting of a schema (and so of the stack).
const maxSchemaDepth = 32

// JSONSchema is a compiled schema for GenerateParams.Schema.
type JSONSchema struct{ root *schemaNode }

// CompileSchema reads a JSON schema (the "schema" member of OpenAI's
// json_schema response format). The root must be an object.
func CompileSchema(raw []byte) (*JSONSchema, error) {
	v, err := decodeOrdered(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	n, err := compileNode(v, "schema", 0)
	if err != nil {
		return nil, err
	}
	if n.kinds != kObject || n.enum != nil {
		return nil, fmt.Errorf("%w: the root must be {\"type\": \"object\"}", ErrSchema)
	}
	return &JSONSchema{root: n}, nil
}

// ordered is a JSON object with its members in document order.
type ordered []struct {
	key string
	val any
}

// decodeOrdered decodes JSON keeping object member order (ordered) and
// numbers as json.Number.
func decodeOrdered(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the schema")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		var o ordered
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			o = append(o, struct {
				key string
				val any
			}{k.(string), v})
		}
		_, err := d.Token() // '}'
		return o, err
	case json.Delim('['):
		var a []any
		for d.More() {
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token() // ']'
		return a, err
	}
	return t, nil
}

// compact is v as compact JSON (an enum or const value).
func compact(v any) ([]byte, error) {
	switch x := v.(type) {
	case ordered:
		var b bytes.Buffer
		b.WriteByte('{')
		for i, m := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := marshalJSON(m.key)
			b.Write(k)
			b.WriteByte(':')
			mv, err := compact(m.val)
			if err != nil {
				return nil, err
			}
			b.Write(mv)
		}
		b.WriteByte('}')
		return b.Bytes(), nil
	case []any:
		var b bytes.Buffer
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			ev, err := compact(e)
			if err != nil {
				return nil, err
			}
			b.Write(ev)
		}
		b.WriteByte(']')
		return b.Bytes(), nil
	}
	return marshalJSON(v)
}

// marshalJSON is json.Marshal without the HTML escapes (<, >, & as
// \u003c...): the reply must hold the text as a model would write it.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

var schemaKinds = map[string]schemaKind{"string": kString, "number": kNumber, "integer": kInteger, "boolean": kBoolean,
	"null": kNull, "object": kObject, "array": kArray}

// compileNode compiles the schema v found at path.
func compileNode(v any, path string, depth int) (*schemaNode, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("%w: %s: nested deeper than %d", ErrSchema, path, maxSchemaDepth)
	}
	obj, ok := v.(ordered)
	if !ok {
		return nil, fmt.Errorf("%w: %s: a schema must be an object", ErrSchema, path)
	}
	n := &schemaNode{}
	var props ordered
	var required []any
	hasProps, hasItems := false, false
	var items any
	for _, m := range obj {
		switch m.key {
		case "type":
			switch t := m.val.(type) {
			case string:
				k, ok := schemaKinds[t]
				if !ok {
					return nil, fmt.Errorf("%w: %s.type: unknown type %q", ErrSchema, path, t)
				}
				n.kinds |= k
			case []any:
				for _, e := range t {
					s, _ := e.(string)
					k, ok := schemaKinds[s]
					if !ok {
						return nil, fmt.Errorf("%w: %s.type: unknown type %v", ErrSchema, path, e)
					}
					n.kinds |= k
				}
			default:
				return nil, fmt.Errorf("%w: %s.type: a string or a list of strings", ErrSchema, path)
			}
		case "properties":
			if props, ok = m.val.(ordered); !ok {
				return nil, fmt.Errorf("%w: %s.properties: an object", ErrSchema, path)
			}
			hasProps = true
		case "required":
			if required, ok = m.val.([]any); !ok {
				return nil, fmt.Errorf("%w: %s.required: a list", ErrSchema, path)
			}
		case "items":
			items, hasItems = m.val, true
		case "enum", "const":
			vals := []any{m.val}
			if m.key == "enum" {
				if vals, ok = m.val.([]any); !ok || len(vals) == 0 {
					return nil, fmt.Errorf("%w: %s.enum: a non-empty list", ErrSchema, path)
				}
			}
			for _, e := range vals {
				b, err := compact(e)
				if err != nil {
					return nil, fmt.Errorf("%w: %s.%s: %v", ErrSchema, path, m.key, err)
				}
				n.enum = append(n.enum, b)
			}
			if len(n.enum) > 64 {
				return nil, fmt.Errorf("%w: %s.enum: more than 64 values", ErrSchema, path)
			}
		case "additionalProperties":
			if b, ok := m.val.(bool); !ok || b {
				return nil, fmt.Errorf("%w: %s.additionalProperties: only false is supported (the reply has exactly the listed properties)", ErrSchema, path)
			}
		case "title", "description", "$schema", "$comment", "default", "examples", "$id":
			// Annotations: they do not constrain the value.
		default:
			return nil, fmt.Errorf("%w: %s: keyword %q is not supported", ErrSchema, path, m.key)
		}
	}
	if n.enum != nil {
		return n, nil // the values fix everything else
	}
	if n.kinds == 0 {
		return nil, fmt.Errorf("%w: %s: needs a type, enum or const", ErrSchema, path)
	}
	if n.kinds&kObject != 0 {
		if n.kinds != kObject {
			return nil, fmt.Errorf("%w: %s: an object type cannot be combined with others", ErrSchema, path)
		}
		seen := map[string]bool{}
		for _, p := range props {
			child, err := compileNode(p.val, path+".properties."+p.key, depth+1)
			if err != nil {
				return nil, err
			}
			key, _ := marshalJSON(p.key)
			n.props = append(n.props, schemaProp{key: key, node: child})
			seen[p.key] = true
		}
		for _, r := range required {
			if s, _ := r.(string); !seen[s] {
				return nil, fmt.Errorf("%w: %s.required: %v is not a property", ErrSchema, path, r)
			}
		}
	} else if hasProps || required != nil {
		return nil, fmt.Errorf("%w: %s: properties on a non-object type", ErrSchema, path)
	}
	if n.kinds&kArray != 0 {
		if n.kinds != kArray || !hasItems {
			return nil, fmt.Errorf("%w: %s: an array type needs items and cannot be combined with others", ErrSchema, path)
		}
		child, err := compileNode(items, path+".items", depth+1)
		if err != nil {
			return nil, err
		}
		n.items = child
	} else if hasItems {
		return nil, fmt.Errorf("%w: %s: items on a non-array type", ErrSchema, path)
	}
	return n, nil
}

// Frame phases of schemaPrefix.
const (
	pValue      uint8 = iota // a value of the node, whitespace first
	pObjOpen                 // after '{'
	pKey                     // inside property prop's key (pos bytes matched)
	pColon                   // after the key
	pObjAfter                // after property prop's value
	pObjNextKey              // after ','
	pArrOpen                 // after '['
	pArrAfter                // after an item
	pString                  // inside a string value (sub: jString/jEscape/jHex)
	pNumber                  // inside a number (sub: the jNum* modes)
	pEnum                    // matching the enum values in alts (pos bytes matched)
)

type schemaFrame struct {
	n     *schemaNode
	phase uint8
	sub   jsonMode
	hex   uint8
	num   numMag // a number's magnitude (jsonnumber.go)
	prop  int
	pos   int
	alts  uint64
}

// schemaPrefix is a byte-level check that the text is a prefix of one
// value of the schema root (an object).
type schemaPrefix struct {
	stack []schemaFrame
	done  bool
}

func newSchemaPrefix(root *schemaNode) *schemaPrefix {
	return &schemaPrefix{stack: []schemaFrame{{n: root, phase: pValue}}}
}

func (s *schemaPrefix) complete() bool { return s.done }

func (s *schemaPrefix) inLiteral() bool {
	if s.done {
		return false
	}
	switch s.stack[len(s.stack)-1].phase {
	case pString, pKey, pEnum:
		return true
	}
	return false
}

func (s *schemaPrefix) copyTo(dst automaton) {
	d := dst.(*schemaPrefix)
	d.stack = append(d.stack[:0], s.stack...)
	d.done = s.done
}

// pop ends the top frame's value.
func (s *schemaPrefix) pop() {
	s.stack = s.stack[:len(s.stack)-1]
	if len(s.stack) == 0 {
		s.done = true
	}
}

// push starts a value of n above the top frame.
func (s *schemaPrefix) push(n *schemaNode) bool {
	if len(s.stack) > 2*maxSchemaDepth+2 {
		return false
	}
	s.stack = append(s.stack, schemaFrame{n: n, phase: pValue})
	return true
}

func (s *schemaPrefix) feed(c byte) bool {
	if s.done {
		return isJSONSpace(c)
	}
	f := &s.stack[len(s.stack)-1]
	switch f.phase {
	case pValue:
		if isJSONSpace(c) {
			return true
		}
		return s.start(f, c)
	case pObjOpen, pObjNextKey:
		switch {
		case isJSONSpace(c):
			return true
		case c == '}' && f.phase == pObjOpen && len(f.n.props) == 0:
			s.pop()
			return true
		case c == '"' && f.prop < len(f.n.props):
			f.phase, f.pos = pKey, 1
			return true
		}
		return false
	case pKey:
		key := f.n.props[f.prop].key
		if c != key[f.pos] {
			return false
		}
		if f.pos++; f.pos == len(key) {
			f.phase = pColon
		}
		return true
	case pColon:
		if c == ':' {
			f.phase = pObjAfter
			return s.push(f.n.props[f.prop].node)
		}
		return isJSONSpace(c)
	case pObjAfter:
		switch {
		case isJSONSpace(c):
			return true
		case c == ',' && f.prop+1 < len(f.n.props):
			f.prop++
			f.phase = pObjNextKey
			return true
		case c == '}' && f.prop+1 == len(f.n.props):
			s.pop()
			return true
		}
		return false
	case pArrOpen:
		switch {
		case isJSONSpace(c):
			return true
		case c == ']':
			s.pop()
			return true
		}
		f.phase = pArrAfter
		if !s.push(f.n.items) {
			return false
		}
		return s.feed(c)
	case pArrAfter:
		switch {
		case isJSONSpace(c):
			return true
		case c == ',':
			return s.push(f.n.items)
		case c == ']':
			s.pop()
			return true
		}
		return false
	case pString:
		return s.stringByte(f, c)
	case pNumber:
		return s.numberByte(f, c)
	case pEnum:
		return s.enumByte(f, c)
	}
	return false
}

// start begins a value of f's node at byte c.
func (s *schemaPrefix) start(f *schemaFrame, c byte) bool {
	n := f.n
	if n.enum != nil {
		f.phase, f.pos = pEnum, 0
		f.alts = 1<<len(n.enum) - 1
		if len(n.enum) == 64 {
			f.alts = ^uint64(0)
		}
		return s.enumByte(f, c)
	}
	switch {
	case c == '{' && n.kinds&kObject != 0:
		f.phase, f.prop = pObjOpen, 0
	case c == '[' && n.kinds&kArray != 0:
		f.phase = pArrOpen
	case c == '"' && n.kinds&kString != 0:
		f.phase, f.sub = pString, jString
	case (c == '-' || c >= '0' && c <= '9') && n.kinds&(kNumber|kInteger) != 0:
		f.phase = pNumber
		f.sub, f.num = numberStart(c)
	case c == 't' && n.kinds&kBoolean != 0:
		return s.literal(f, "true")
	case c == 'f' && n.kinds&kBoolean != 0:
		return s.literal(f, "false")
	case c == 'n' && n.kinds&kNull != 0:
		return s.literal(f, "null")
	default:
		return false
	}
	return true
}

// literal matches true, false or null as a one-value enum.
func (s *schemaPrefix) literal(f *schemaFrame, lit string) bool {
	f.phase, f.pos, f.alts = pEnum, 1, 1
	f.n = literalNodes[lit]
	return true
}

var literalNodes = map[string]*schemaNode{"true": {enum: [][]byte{[]byte("true")}},
	"false": {enum: [][]byte{[]byte("false")}}, "null": {enum: [][]byte{[]byte("null")}}}

// stringByte is a byte inside a string value.
func (s *schemaPrefix) stringByte(f *schemaFrame, c byte) bool {
	ok, closed := stringStep(&f.sub, &f.hex, c)
	if closed {
		s.pop()
	}
	return ok
}

// numberByte is a byte inside a number; a byte that cannot continue it
// ends it and goes to the enclosing frame.
func (s *schemaPrefix) numberByte(f *schemaFrame, c byte) bool {
	ok, ended := numberStep(&f.sub, &f.num, c, f.n.kinds&kNumber == 0)
	if !ended {
		return ok
	}
	s.pop()
	if s.done {
		return false // the root is an object: unreachable
	}
	return s.feed(c)
}

// enumByte matches c against the alternatives still possible.
func (s *schemaPrefix) enumByte(f *schemaFrame, c byte) bool {
	next, ended := uint64(0), false
	for i, v := range f.n.enum {
		if f.alts&(1<<i) == 0 {
			continue
		}
		switch {
		case f.pos < len(v) && v[f.pos] == c:
			next |= 1 << i
		case f.pos == len(v):
			ended = true
		}
	}
	if next != 0 {
		f.alts = next
		f.pos++
		// A value that is complete and no other can continue ends here.
		for i, v := range f.n.enum {
			if next&(1<<i) != 0 && f.pos == len(v) && next == 1<<i && selfDelimited(v) {
				s.pop()
				break
			}
		}
		return true
	}
	if ended {
		// c follows a complete value (a number or a literal that another
		// alternative extended): it belongs to the enclosing frame.
		s.pop()
		if s.done {
			return isJSONSpace(c)
		}
		return s.feed(c)
	}
	return false
}

// selfDelimited reports whether a JSON value ends with a byte that
// cannot be continued (a string, object, array or literal), unlike a
// number.
func selfDelimited(v []byte) bool {
	switch v[len(v)-1] {
	case '"', '}', ']', 'e', 'l':
		return true
	}
	return false
}

// instance writes the shortest value of the schema (first enum value,
// empty strings and arrays, zeros) to b: tests check it is accepted.
func (n *schemaNode) instance(b *strings.Builder) {
	switch {
	case n.enum != nil:
		b.Write(n.enum[0])
	case n.kinds&kObject != 0:
		b.WriteByte('{')
		for i, p := range n.props {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(p.key)
			b.WriteByte(':')
			p.node.instance(b)
		}
		b.WriteByte('}')
	case n.kinds&kArray != 0:
		b.WriteString("[]")
	case n.kinds&kString != 0:
		b.WriteString(`""`)
	case n.kinds&(kNumber|kInteger) != 0:
		b.WriteByte('0')
	case n.kinds&kBoolean != 0:
		b.WriteString("false")
	default:
		b.WriteString("null")
	}
}
