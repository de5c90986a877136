package session

import (
	"encoding/json"
	"strings"
	"testing"
)

// numberRangeCases are numbers beside the float64 range: whether a JSON
// object holding one is accepted, which encoding/json decides (it refuses
// a number past math.MaxFloat64 into a float64 and reads underflow as 0).
var numberRangeCases = []struct {
	num string
	ok  bool
}{
	{"1e308", true},
	{"1.7976931348623157e308", true},
	{"1.7976931348623158e308", true},   // rounds down to the maximum
	{"1.797693134862315807e308", true}, // just below the halfway point
	{"1.797693134862315808e308", false},
	{"1.7976931348623159e308", false},
	{"1.8e308", false},
	{"-1.8e308", false},
	{"1e309", false},
	{"1e700", false},
	{"0.5e309", false},
	{"0.1e309", true},
	{"0.001e310", true},
	{"1" + strings.Repeat("0", 308), true},
	{"1" + strings.Repeat("0", 309), false},
	{"1" + strings.Repeat("0", 309) + "e-5", true},
	{"1" + strings.Repeat("0", 309) + ".5", false},
	{"123e306", true},
	{"234e306", false},
	{"12e306", true},
	{"1e-400", true},
	{"0e999", true},
	{"0.0e99999", true},
	{"-0E+400", true},
	{"1E+0308", true},
	{"1e00000000000000000000309", false},
}

func TestJSONModeNumbersFitAFloat64(t *testing.T) {
	for _, c := range numberRangeCases {
		doc := `{"a":` + c.num + `}`
		var v map[string]any
		if goOK := json.Unmarshal([]byte(doc), &v) == nil; goOK != c.ok {
			t.Fatalf("%s: the case says %v, encoding/json %v", c.num, c.ok, goOK)
		}
		if _, complete := feedAll(doc); complete != c.ok {
			t.Errorf("json mode: %s complete=%v, want %v", c.num, complete, c.ok)
		}
		if _, complete := feedAll(`{"a":[` + c.num + ` ]}`); complete != c.ok {
			t.Errorf("json mode, in an array before a space: %s complete=%v, want %v", c.num, complete, c.ok)
		}
	}
	s := mustSchema(t, `{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`)
	for _, c := range numberRangeCases {
		if _, complete := feedSchema(s, `{"a":`+c.num+`}`); complete != c.ok {
			t.Errorf("schema: %s complete=%v, want %v", c.num, complete, c.ok)
		}
	}
}

// An exponent digit after which every number overflows is refused, so
// that a sampler cannot run on through digits no number can end with.
func TestJSONModeRefusesAnOverflowingExponentDigit(t *testing.T) {
	for _, prefix := range []string{`{"a":1e309`, `{"a":-25e308`, `{"a":1e+1000`} {
		if p, _ := feedAll(prefix); p {
			t.Errorf("%s accepted as a prefix", prefix)
		}
	}
	for _, prefix := range []string{`{"a":1e308`, `{"a":1e-1000`, `{"a":0e1000`, `{"a":1` + strings.Repeat("0", 400)} {
		if p, _ := feedAll(prefix); !p {
			t.Errorf("%.40s... refused as a prefix", prefix)
		}
	}
}
