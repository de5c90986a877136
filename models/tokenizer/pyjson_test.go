package tokenizer

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// renderWith renders a template source with vars through the chat
// template environment.
func renderWith(t testing.TB, src string, vars map[string]any) (string, error) {
	t.Helper()
	return newChatTemplate(src).render(vars)
}

// TestToJSONPython: tojson writes what Python's json.dumps writes (the
// wants are json.dumps(json.loads(in), ensure_ascii=False, **args) run in
// Python 3.11).
func TestToJSONPython(t *testing.T) {
	cases := []struct{ in, args, want string }{
		{"null", "", "null"},
		{"true", "", "true"},
		{"false", "", "false"},
		{"0", "", "0"},
		{"-7", "", "-7"},
		{"1.0", "", "1.0"},
		{"-0.0", "", "-0.0"},
		{"1e-05", "", "1e-05"},
		{"0.0001", "", "0.0001"},
		{"1e16", "", "1e+16"},
		{"1e15", "", "1000000000000000.0"},
		{"123456789012345678.0", "", "1.2345678901234568e+17"},
		{"0.1", "", "0.1"},
		{"1.5e300", "", "1.5e+300"},
		{"-2.5e-7", "", "-2.5e-07"},
		{"3.141592653589793", "", "3.141592653589793"},
		{"1e400", "", "Infinity"},
		{"\"\"", "", "\"\""},
		{"\"a\\\"b\\\\c\\/d\"", "", "\"a\\\"b\\\\c/d\""},
		{"\"\\n\\r\\t\\b\\f\"", "", "\"\\n\\r\\t\\b\\f\""},
		{"\"\\u0000\\u0001\\u001f\\u007f\"", "", "\"\\u0000\\u0001\\u001f\x7f\""},
		{"\"é 中 😀 \\u2028\"", "", "\"é 中 😀 \u2028\""},
		{"\"<>&'\"", "", "\"<>&'\""},
		{"\"é 中 😀 <\"", "(ensure_ascii=true)", "\"\\u00e9 \\u4e2d \\ud83d\\ude00 <\""},
		{"\"\\u007f\"", "(ensure_ascii=true)", "\"\\u007f\""},
		{"[]", "", "[]"},
		{"{}", "", "{}"},
		{"[1, \"a\", null, true, 2.5]", "", "[1, \"a\", null, true, 2.5]"},
		{"{\"b\": 1, \"a\": [1, 2], \"c\": {\"z\": {}, \"y\": []}}", "", "{\"b\": 1, \"a\": [1, 2], \"c\": {\"z\": {}, \"y\": []}}"},
		{"{\"b\": 1, \"a\": 2, \"b\": 3}", "", "{\"b\": 3, \"a\": 2}"},
		{"{\"b\": 1, \"a\": [1, {\"x\": null}], \"c\": {}, \"d\": []}", "(indent=2)", "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {\n      \"x\": null\n    }\n  ],\n  \"c\": {},\n  \"d\": []\n}"},
		{"[1, [2, []], {}]", "(indent=0)", "[\n1,\n[\n2,\n[]\n],\n{}\n]"},
		{"{\"b\": 1, \"a\": [1, 2]}", "(indent='\\t')", "{\n\t\"b\": 1,\n\t\"a\": [\n\t\t1,\n\t\t2\n\t]\n}"},
		{"{\"b\": 1, \"a\": [1, 2]}", "(separators=(',', ':'))", "{\"b\":1,\"a\":[1,2]}"},
		{"{\"b\": 1, \"a\": [1, 2]}", "(sort_keys=true)", "{\"a\": [1, 2], \"b\": 1}"},
		{"{\"b\": 1, \"a\": [1, 2]}", "(indent=-1)", "{\n\"b\": 1,\n\"a\": [\n1,\n2\n]\n}"},
	}
	for _, c := range cases {
		v, err := decodeOrdered([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		got, err := renderWith(t, "{{ x | tojson"+c.args+" }}", map[string]any{"x": v})
		if err != nil {
			t.Fatalf("%s %s: %v", c.in, c.args, err)
		}
		if got != c.want {
			t.Errorf("%s | tojson%s = %q, want %q", c.in, c.args, got, c.want)
		}
	}
}

// TestToJSONGoValues: values that come from Go rather than JSON.
func TestToJSONGoValues(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{map[string]any{"b": 1, "a": []string{"x"}}, `{"a": ["x"], "b": 1}`}, // no order: sorted
		{[]any(nil), `[]`},
		{[]int{1, 2}, `[1, 2]`},
		{math.NaN(), `NaN`},
		{math.Inf(-1), `-Infinity`},
		{float32(0.5), `0.5`},
		{uint8(7), `7`},
		{"bad \xff utf-8", `"bad ` + "\ufffd" + ` utf-8"`},
		{json.RawMessage(`{"z":1,"a":2}`), `{"z": 1, "a": 2}`},
		{json.Number("1.50"), `1.5`},
	} {
		got, err := pyDumps(c.in, dumpOptions{itemSep: ", ", keySep: ": "})
		if err != nil || got != c.want {
			t.Errorf("%#v: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := pyDumps(struct{}{}, dumpOptions{}); err == nil {
		t.Error("a struct serialized; Python raises TypeError")
	}
}

// TestTemplateDictOrder: dicts built in a template or decoded from JSON
// keep their order through tojson, items(), keys(), values(), iteration
// and get(), as Python dicts do; attribute and item access, `in`, length
// and truth still work.
func TestTemplateDictOrder(t *testing.T) {
	v, err := decodeOrdered([]byte(`{"zeta": {"y": 1, "x": [2]}, "alpha": "a", "empty": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ src, want string }{
		{`{{ {'b': 1, 'a': 2} | tojson }}`, `{"b": 1, "a": 2}`},
		{`{{ d | tojson }}`, `{"zeta": {"y": 1, "x": [2]}, "alpha": "a", "empty": {}}`},
		{`{% for k, v in d.items() %}{{ k }}={{ v | tojson }};{% endfor %}`, `zeta={"y": 1, "x": [2]};alpha="a";empty={};`},
		{`{% for k in d %}{{ k }},{% endfor %}`, `zeta,alpha,empty,`},
		{`{{ d.keys() | join(',') }}`, `zeta,alpha,empty`},
		{`{{ d.values() | length }}`, `3`},
		{`{{ d.get('zeta') | tojson }}|{{ d.get('nope', 'dflt') }}`, `{"y": 1, "x": [2]}|dflt`},
		{`{{ d.zeta.x[0] }} {{ d['zeta']['y'] }} {{ d.alpha }}`, `2 1 a`},
		{`{{ 'alpha' in d }} {{ 'beta' in d }} {{ d | length }}`, `True False 3`},
		{`{{ d.empty is mapping }} {{ d.zeta is mapping }}`, `True True`},
		{`{% if d.empty %}T{% else %}F{% endif %}{% if d.zeta %}T{% else %}F{% endif %}`, `FT`},
		{`{{ d.nope is defined }} {{ d.alpha is defined }}`, `False True`},
		{`{{ d | tojson(sort_keys=true) }}`, `{"alpha": "a", "empty": {}, "zeta": {"x": [2], "y": 1}}`},
	} {
		got, err := renderWith(t, c.src, map[string]any{"d": v})
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s = %q, want %q", c.src, got, c.want)
		}
	}
	for _, src := range []string{
		`{{ 1 | tojson(indent=1.5) }}`,
		`{{ 1 | tojson(separators=',') }}`,
		`{{ 1 | tojson(bogus=1) }}`,
		`{{ 1 | tojson(false, 2, none, false, 5) }}`,
	} {
		if got, err := renderWith(t, src, nil); err == nil {
			t.Errorf("%s rendered %q; Python raises", src, got)
		}
	}
}

// TestFunctionCallArgumentsOrder: object arguments in message history keep
// their order up to the template.
func TestFunctionCallArgumentsOrder(t *testing.T) {
	var m Message
	if err := json.Unmarshal([]byte(`{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"b": 1, "a": 2}}},{"function":{"name":"g","arguments":"{\"x\":1}"}}]}`), &m); err != nil {
		t.Fatal(err)
	}
	if s, ok := m.ToolCalls[1].Function.Arguments.(string); !ok || s != `{"x":1}` {
		t.Fatalf("string arguments: %#v", m.ToolCalls[1].Function.Arguments)
	}
	v, err := plainJSON([]Message{m})
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderWith(t, `{{ m[0].tool_calls[0].function.arguments | tojson }}`, map[string]any{"m": v})
	if err != nil || got != `{"b": 1, "a": 2}` {
		t.Fatalf("%q, %v", got, err)
	}
}

// FuzzToJSON: whatever JSON comes in, tojson's output (any options) parses
// back to the same value.
func FuzzToJSON(f *testing.F) {
	for _, s := range []string{`{"b": [1, 2.5, -0.0, 1e-7, 1e300], "a": {"\u0000<é😀": null}}`, `"\u2028\\\""`, `[[], {}, true, false]`, `12345678901234567890`} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, mode uint8) {
		var want any
		if json.Unmarshal(in, &want) != nil {
			return
		}
		v, err := decodeOrdered(in)
		if err != nil {
			t.Fatalf("decodeOrdered rejected valid JSON %q: %v", in, err)
		}
		o := dumpOptions{ensureASCII: mode&1 != 0, sortKeys: mode&2 != 0, itemSep: ", ", keySep: ": "}
		if mode&4 != 0 {
			ind := "  "
			o.indent, o.itemSep = &ind, ","
		}
		out, err := pyDumps(v, o)
		if err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			if hasInf(want) {
				return // Python writes Infinity, which is not JSON
			}
			t.Fatalf("%q -> %q does not parse: %v", in, out, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q -> %q -> %#v, want %#v", in, out, got, want)
		}
	})
}

func hasInf(v any) bool {
	switch x := v.(type) {
	case float64:
		return math.IsInf(x, 0)
	case []any:
		for _, e := range x {
			if hasInf(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasInf(e) {
				return true
			}
		}
	}
	return false
}
