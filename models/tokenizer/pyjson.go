package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// Chat templates put JSON into prompts with `tojson` (tools, tool-call
// arguments). transformers overrides Jinja's tojson with
//
//	json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=False)
//
// so the model was trained on Python's formatting: ", " and ": "
// separators, keys in insertion order, non-ASCII and <>& unescaped, floats
// as repr. gonja's own tojson is Go's json.Marshal (compact, sorted keys,
// HTML-escaped), which gives a different token sequence. This file holds
// the Python-compatible filter and the ordered values it needs: JSON
// objects reach templates as gonja's ordered *exec.Dict, in the order of
// the JSON they were decoded from, as Python dicts are.

// decodeOrdered parses JSON into the shapes templates see: *exec.Dict for
// non-empty objects (keys in document order), map[string]any{} for empty
// ones (gonja treats any Dict as true, Python treats {} as false), []any,
// string, bool, nil, int64 or float64 (Python keeps "1" an int and "1.0" a
// float).
func decodeOrdered(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("json: trailing data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return decodeObject(dec)
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("json: unexpected %v", t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		f, err := t.Float64()
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil // out of range: ±Inf, as Python's float() gives
	default:
		return t, nil // string, bool or nil
	}
}

func decodeObject(dec *json.Decoder) (any, error) {
	d := &exec.Dict{}
	index := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("json: object key %v is not a string", tok)
		}
		v, err := decodeValue(dec)
		if err != nil {
			return nil, err
		}
		// A repeated key keeps its first place and its last value, as
		// json.loads builds a dict.
		if i, dup := index[key]; dup {
			d.Pairs[i].Value = exec.AsValue(v)
			continue
		}
		index[key] = len(d.Pairs)
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(key), Value: exec.AsValue(v)})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if len(d.Pairs) == 0 {
		return map[string]any{}, nil
	}
	return d, nil
}

// UnmarshalJSON keeps object arguments as the raw JSON they came in
// (json.RawMessage) instead of a map, so that their key order survives to
// the template, which may write them back with tojson. String arguments
// (OpenAI's form) stay strings.
func (f *FunctionCall) UnmarshalJSON(b []byte) error {
	var raw struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	f.Name = raw.Name
	f.Arguments = nil
	args := bytes.TrimSpace(raw.Arguments)
	switch {
	case len(args) == 0 || string(args) == "null":
	case args[0] == '"':
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			return err
		}
		f.Arguments = s
	default:
		var c bytes.Buffer
		if err := json.Compact(&c, args); err != nil {
			return err
		}
		f.Arguments = json.RawMessage(c.Bytes())
	}
	return nil
}

// dumpOptions are json.dumps' keyword arguments that tojson passes on.
type dumpOptions struct {
	ensureASCII bool
	indent      *string // nil: one line
	itemSep     string
	keySep      string
	sortKeys    bool
}

// pyDumps formats v as Python's json.dumps does.
func pyDumps(v any, o dumpOptions) (string, error) {
	var b strings.Builder
	if err := dumpValue(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

// maxDumpDepth bounds recursion on values built inside a template
// (Python raises RecursionError much earlier).
const maxDumpDepth = 10000

func dumpValue(b *strings.Builder, v any, o dumpOptions, level int) error {
	if level > maxDumpDepth {
		return errors.New("tojson: value nested too deeply")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
		return nil
	case *exec.Value:
		if x == nil {
			b.WriteString("null")
			return nil
		}
		return dumpValue(b, x.Interface(), o, level)
	case json.RawMessage:
		d, err := decodeOrdered(x)
		if err != nil {
			return fmt.Errorf("tojson: %w", err)
		}
		return dumpValue(b, d, o, level)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			b.WriteString(strconv.FormatInt(i, 10))
			return nil
		}
		f, _ := x.Float64()
		b.WriteString(pyFloat(f))
		return nil
	case *exec.Dict:
		if x == nil {
			b.WriteString("null")
			return nil
		}
		return dumpDict(b, x.Pairs, o, level)
	case exec.Dict:
		return dumpDict(b, x.Pairs, o, level)
	case error:
		return x // a failed expression inside the template
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Interface:
		if r.IsNil() {
			b.WriteString("null")
			return nil
		}
		return dumpValue(b, r.Elem().Interface(), o, level)
	case reflect.Bool:
		if r.Bool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(r.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b.WriteString(strconv.FormatUint(r.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		b.WriteString(pyFloat(r.Float()))
	case reflect.String:
		pyString(b, r.String(), o.ensureASCII)
	case reflect.Slice, reflect.Array:
		if r.Kind() == reflect.Slice && r.IsNil() {
			b.WriteString("[]") // a nil list is still a list
			return nil
		}
		n := r.Len()
		if n == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(b, o, level+1)
			if err := dumpValue(b, r.Index(i).Interface(), o, level+1); err != nil {
				return err
			}
		}
		newline(b, o, level)
		b.WriteByte(']')
	case reflect.Map:
		// A Go map has no order; sorting keeps the output deterministic.
		pairs := make([]*exec.Pair, 0, r.Len())
		it := r.MapRange()
		for it.Next() {
			pairs = append(pairs, &exec.Pair{Key: exec.AsValue(it.Key().Interface()), Value: exec.AsValue(it.Value().Interface())})
		}
		keys, err := dictKeys(pairs)
		if err != nil {
			return err
		}
		sort.Sort(byKey{keys, pairs})
		return dumpPairs(b, keys, pairs, o, level)
	default:
		return fmt.Errorf("tojson: object of type %T is not JSON serializable", v)
	}
	return nil
}

func dumpDict(b *strings.Builder, pairs []*exec.Pair, o dumpOptions, level int) error {
	keys, err := dictKeys(pairs)
	if err != nil {
		return err
	}
	if o.sortKeys {
		keys = append([]string(nil), keys...)
		pairs = append([]*exec.Pair(nil), pairs...)
		sort.Stable(byKey{keys, pairs})
	}
	return dumpPairs(b, keys, pairs, o, level)
}

func dumpPairs(b *strings.Builder, keys []string, pairs []*exec.Pair, o dumpOptions, level int) error {
	if len(pairs) == 0 {
		b.WriteString("{}")
		return nil
	}
	b.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		newline(b, o, level+1)
		pyString(b, keys[i], o.ensureASCII)
		b.WriteString(o.keySep)
		var v any
		if p.Value != nil {
			v = p.Value.Interface()
		}
		if err := dumpValue(b, v, o, level+1); err != nil {
			return err
		}
	}
	newline(b, o, level)
	b.WriteByte('}')
	return nil
}

// dictKeys converts keys as json.dumps does: strings as they are, numbers,
// booleans and None to their JSON text.
func dictKeys(pairs []*exec.Pair) ([]string, error) {
	keys := make([]string, len(pairs))
	for i, p := range pairs {
		var k any
		if p.Key != nil {
			k = p.Key.Interface()
		}
		r := reflect.ValueOf(k)
		switch r.Kind() {
		case reflect.Invalid:
			keys[i] = "null"
		case reflect.String:
			keys[i] = r.String()
		case reflect.Bool:
			keys[i] = strconv.FormatBool(r.Bool())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			keys[i] = strconv.FormatInt(r.Int(), 10)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			keys[i] = strconv.FormatUint(r.Uint(), 10)
		case reflect.Float32, reflect.Float64:
			keys[i] = pyFloat(r.Float())
		default:
			return nil, fmt.Errorf("tojson: keys must be str, int, float, bool or None, not %T", k)
		}
	}
	return keys, nil
}

type byKey struct {
	keys  []string
	pairs []*exec.Pair
}

func (s byKey) Len() int           { return len(s.keys) }
func (s byKey) Less(i, j int) bool { return s.keys[i] < s.keys[j] }
func (s byKey) Swap(i, j int) {
	s.keys[i], s.keys[j] = s.keys[j], s.keys[i]
	s.pairs[i], s.pairs[j] = s.pairs[j], s.pairs[i]
}

func newline(b *strings.Builder, o dumpOptions, level int) {
	if o.indent == nil {
		return
	}
	b.WriteByte('\n')
	for i := 0; i < level; i++ {
		b.WriteString(*o.indent)
	}
}

// pyString quotes s as json.dumps does: ensure_ascii=False escapes only
// '"', '\\' and the C0 controls (\n, \r, \t, \b, \f by name, the rest as
// lowercase \u00XX); ensure_ascii=True also escapes everything outside
// ' '..'~' as \uXXXX (surrogate pairs above U+FFFF). Invalid UTF-8, which
// a Python str cannot hold, becomes U+FFFD.
func pyString(b *strings.Builder, s string, ensureASCII bool) {
	const hex = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&0xf])
		b.WriteByte(hex[r>>8&0xf])
		b.WriteByte(hex[r>>4&0xf])
		b.WriteByte(hex[r&0xf])
	}
	b.WriteByte('"')
	for _, r := range s { // invalid bytes range as utf8.RuneError
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				u4(r)
			case !ensureASCII || r <= '~':
				b.WriteRune(r)
			case r > 0xffff:
				r -= 0x10000
				u4(0xd800 | (r>>10)&0x3ff)
				u4(0xdc00 | r&0x3ff)
			default:
				u4(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat is Python's repr(float) as json.dumps writes it: the shortest
// digits that round-trip, positional for exponents in [-4, 16) with at
// least one decimal ("1.0"), otherwise d[.ddd]e±XX ("1e-05", "1.5e+16");
// NaN and the infinities as NaN, Infinity, -Infinity (allow_nan=True).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	e := strings.IndexByte(s, 'e')
	mant, expText := s[:e], s[e+1:]
	exp, _ := strconv.Atoi(expText)
	sign := ""
	if mant[0] == '-' {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		return fmt.Sprintf("%s%se%+03d", sign, m, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

// filterToJSON is transformers' tojson:
// tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	o, err := toJSONOptions(params)
	if err != nil {
		return exec.AsValue(err)
	}
	out, err := pyDumps(in.Interface(), o)
	if err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(out)
}

func toJSONOptions(params *exec.VarArgs) (dumpOptions, error) {
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	args := map[string]*exec.Value{}
	if params != nil {
		if len(params.Args) > len(names) {
			return dumpOptions{}, fmt.Errorf("tojson: takes at most %d arguments, got %d", len(names), len(params.Args))
		}
		for i, a := range params.Args {
			args[names[i]] = a
		}
		for k, v := range params.KwArgs {
			known := false
			for _, n := range names {
				known = known || n == k
			}
			if !known {
				return dumpOptions{}, fmt.Errorf("tojson: unexpected keyword argument %q", k)
			}
			if _, dup := args[k]; dup {
				return dumpOptions{}, fmt.Errorf("tojson: multiple values for argument %q", k)
			}
			args[k] = v
		}
	}
	var o dumpOptions
	if v := args["ensure_ascii"]; v != nil {
		o.ensureASCII = v.IsTrue()
	}
	if v := args["sort_keys"]; v != nil {
		o.sortKeys = v.IsTrue()
	}
	if v := args["indent"]; v != nil && !v.IsNil() {
		var ind string
		switch {
		case v.IsString():
			ind = v.String()
		case v.IsInteger():
			// ' ' * n in Python: negative counts give "".
			n := v.Integer()
			if n > 1<<16 {
				return dumpOptions{}, fmt.Errorf("tojson: indent %d is too large", n)
			}
			ind = strings.Repeat(" ", max(n, 0))
		case v.IsBool():
			if v.Bool() {
				ind = " "
			}
		default:
			return dumpOptions{}, fmt.Errorf("tojson: indent must be an int or a str, got %s", v.String())
		}
		o.indent = &ind
	}
	// json.dumps' default separators: a bare "," before a newline.
	o.itemSep, o.keySep = ", ", ": "
	if o.indent != nil {
		o.itemSep = ","
	}
	if v := args["separators"]; v != nil && !v.IsNil() {
		if !v.IsList() || v.Len() != 2 || !v.Index(0).IsString() || !v.Index(1).IsString() {
			return dumpOptions{}, fmt.Errorf("tojson: separators must be a pair of strings, got %s", v.String())
		}
		o.itemSep, o.keySep = v.Index(0).String(), v.Index(1).String()
	}
	return o, nil
}

// templateFilters is gonja's filter set with tojson replaced, copied so
// that gonja's global set stays untouched.
func templateFilters() *exec.FilterSet {
	f := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if f.Replace("tojson", filterToJSON) != nil {
		_ = f.Register("tojson", filterToJSON) // only fails if already there
	}
	return f
}

// templateMethods is gonja's method set with the dict methods that expose
// order (items, keys, values) or hand out nested values (get) working on
// an ordered Dict directly: gonja's own convert the dict to a Go map,
// which sorts keys and turns nested Dicts into maps. Other values go to
// gonja's methods.
func templateMethods() exec.Methods {
	m := builtins.Methods
	base := m.Dict
	wrap := func(name string, ordered func(d *exec.Dict, args *exec.VarArgs) (any, error)) exec.Method[map[string]any] {
		return func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			if d := asDict(selfValue); d != nil {
				return ordered(d, args)
			}
			fn, ok := base.Get(name)
			if !ok {
				return nil, fmt.Errorf("unknown method %q", name)
			}
			return fn(self, selfValue, args)
		}
	}
	noArgs := func(name string, args *exec.VarArgs) error {
		if args != nil && (len(args.Args) > 0 || len(args.KwArgs) > 0) {
			return fmt.Errorf("%s() takes no arguments", name)
		}
		return nil
	}
	methods := map[string]exec.Method[map[string]any]{
		"items": wrap("items", func(d *exec.Dict, args *exec.VarArgs) (any, error) {
			if err := noArgs("items", args); err != nil {
				return nil, err
			}
			out := make([]any, len(d.Pairs))
			for i, p := range d.Pairs {
				out[i] = []any{p.Key.Interface(), p.Value.Interface()}
			}
			return out, nil
		}),
		"keys": wrap("keys", func(d *exec.Dict, args *exec.VarArgs) (any, error) {
			if err := noArgs("keys", args); err != nil {
				return nil, err
			}
			out := make([]any, len(d.Pairs))
			for i, p := range d.Pairs {
				out[i] = p.Key.Interface()
			}
			return out, nil
		}),
		"values": wrap("values", func(d *exec.Dict, args *exec.VarArgs) (any, error) {
			if err := noArgs("values", args); err != nil {
				return nil, err
			}
			out := make([]any, len(d.Pairs))
			for i, p := range d.Pairs {
				out[i] = p.Value.Interface()
			}
			return out, nil
		}),
		"get": wrap("get", func(d *exec.Dict, args *exec.VarArgs) (any, error) {
			if args == nil || len(args.Args) < 1 || len(args.Args) > 2 {
				return nil, errors.New("get() takes 1 or 2 positional arguments")
			}
			for _, p := range d.Pairs {
				if p.Key.EqualValueTo(args.Args[0]) {
					return p.Value.Interface(), nil
				}
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return nil, nil
		}),
	}
	for _, name := range []string{"pop", "setdefault", "update", "copy", "clear"} {
		if fn, ok := base.Get(name); ok {
			methods[name] = fn
		}
	}
	m.Dict = exec.NewMethodSet(methods)
	return m
}

func asDict(v *exec.Value) *exec.Dict {
	if v == nil {
		return nil
	}
	switch d := v.Interface().(type) {
	case *exec.Dict:
		return d
	case exec.Dict:
		return &d
	}
	return nil
}
