package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// feedAll runs text through a fresh automaton: whether every byte was
// accepted, and whether the object is then complete.
func feedAll(text string) (prefix, complete bool) {
	var j jsonPrefix
	for i := 0; i < len(text); i++ {
		if !j.feed(text[i]) {
			return false, false
		}
	}
	return true, j.complete()
}

func TestJSONPrefixAcceptsObjectsAndTheirPrefixes(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` { } `, `{"a":1}`, `{"a": -0.5e+10, "b": [true, false, null, "x\"y\\\/\b\f\n\r\t\u00e9"]}`,
		`{"nested": {"deep": [[[], {}], [1, 2.25, -3E-2, 0, 0.0]]}, "k": "v"}`, "{\n\t\"a\" :\r\n 1 \n}",
		`{"unicode": "héllo 世界 🙂", "esc": "\uD83D\uDE42"}`, `{"a":[{"b":[{"c":{}}]}]}`,
	} {
		if !json.Valid([]byte(doc)) {
			t.Fatalf("test document %q is not JSON", doc)
		}
		for i := 0; i <= len(doc); i++ {
			prefix, complete := feedAll(doc[:i])
			if !prefix {
				t.Fatalf("%q: prefix %q refused", doc, doc[:i])
			}
			whole := strings.TrimSpace(doc[:i]) == strings.TrimSpace(doc)
			if complete != whole && !(complete && strings.TrimSpace(doc[:i]) == strings.TrimSpace(doc)) {
				t.Fatalf("%q: prefix %q complete=%v", doc, doc[:i], complete)
			}
		}
	}
}

func TestJSONPrefixRefuses(t *testing.T) {
	for _, bad := range []string{
		`[]`, `"a"`, `1`, `true`, `x`, `{,}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":01}`,
		`{"a":1.}`, `{"a":1.e5}`, `{"a":-}`, `{"a":.5}`, `{"a":1e}`, `{"a":tru}`, `{"a":nul }`, `{"a":"\x"}`,
		`{"a":"\u12g4"}`, "{\"a\":\"line\nbreak\"}", `{"a":[1,]}`, `{"a":[,1]}`, `{"a":1]`, `{"a":[1}`,
		`{} {}`, `{}x`, `{"a":1}}`, `{'a':1}`, `{"a":+1}`, `{"a":1e+}`,
	} {
		prefix, complete := feedAll(bad)
		if prefix && complete {
			t.Errorf("%q accepted as a complete object", bad)
		}
		// Every string here is invalid at some byte or unfinished; the
		// unfinished ones are true prefixes of JSON objects.
		if prefix && json.Valid([]byte(bad)) {
			t.Errorf("%q: valid JSON yet not complete", bad)
		}
	}
	// A refused byte must be a byte no valid document could have there.
	for _, bad := range []string{`{"a":1.}`, `{"a":01}`, `{,}`, `{"a":[1,]}`, `{} {}`} {
		if p, _ := feedAll(bad); p {
			t.Errorf("%q accepted as a prefix", bad)
		}
	}
}

func TestJSONPrefixDepthBound(t *testing.T) {
	doc := `{"a":` + strings.Repeat("[", maxJSONDepth-1)
	if p, _ := feedAll(doc); !p {
		t.Fatalf("depth %d refused", maxJSONDepth)
	}
	if p, _ := feedAll(doc + "["); p {
		t.Fatalf("depth %d accepted", maxJSONDepth+1)
	}
}

// FuzzJSONPrefix checks the automaton against encoding/json: a text it
// calls complete is valid JSON holding an object, and every prefix of a
// valid object is accepted.
func FuzzJSONPrefix(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2,{"b":null}]}`, `{"x":"\u00e9\n"}`, `{"n":-1.5e3}`, `[1]`, `{"a":tru}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		prefix, complete := feedAll(s)
		if complete {
			var v map[string]any
			if err := json.Unmarshal([]byte(s), &v); err != nil {
				t.Fatalf("%q complete but not a JSON object: %v", s, err)
			}
		}
		var v map[string]any
		shallow := strings.Count(s, "[")+strings.Count(s, "{") <= maxJSONDepth
		if shallow && json.Unmarshal([]byte(s), &v) == nil && v != nil && strings.HasPrefix(strings.TrimSpace(s), "{") {
			if !prefix || !complete {
				t.Fatalf("JSON object %q: prefix=%v complete=%v", s, prefix, complete)
			}
		}
	})
}

// TestGenerateJSONMode drives the demo model (random weights, byte-level
// tokenizer) in JSON mode: whatever it samples is a prefix of one JSON
// object, a "stop" finish is exactly one complete object, the runner's
// argmax path is not taken (it cannot see the constraint), and a model
// without a tokenizer is refused.
func TestGenerateJSONMode(t *testing.T) {
	model, tok := loadDemo(t)
	am := &argmaxModel{Model: model}
	m := newManager(t, "", ModelConfig{Name: "demo", Model: am, Tokenizer: tok})
	ctx := context.Background()
	pr := tok.Encode("Reply in JSON: ")
	stops := 0
	for seed := range uint64(12) {
		temp := 1.0
		if seed%3 == 0 {
			temp = 0
		}
		var streamed strings.Builder
		res, err := m.Complete(ctx, 1, "demo", pr, GenerateParams{MaxTokens: 40, JSON: true,
			Sampling: SamplingParams{Temperature: temp, Seed: &seed}}, func(ev TokenEvent) error {
			streamed.WriteString(ev.Text)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if streamed.String() != res.Text {
			t.Fatalf("seed %d: streamed %q, result %q", seed, streamed.String(), res.Text)
		}
		prefix, complete := feedAll(res.Text)
		if !prefix {
			t.Fatalf("seed %d: %q is not a JSON object prefix", seed, res.Text)
		}
		switch res.FinishReason {
		case "stop":
			stops++
			var obj map[string]any
			if !complete || json.Unmarshal([]byte(res.Text), &obj) != nil || obj == nil {
				t.Fatalf("seed %d: stopped on %q, not one JSON object", seed, res.Text)
			}
		case "length":
			if complete || len(res.IDs) != 40 {
				t.Fatalf("seed %d: length finish after %d tokens, complete=%v: %q", seed, len(res.IDs), complete, res.Text)
			}
		}
	}
	if stops == 0 {
		t.Fatal("no generation closed its object in 40 tokens") // the seeds are fixed: some do
	}
	t.Logf("%d of 12 generations closed their object", stops)
	if am.steps.Load() != 0 {
		t.Fatalf("%d argmax steps in JSON mode", am.steps.Load())
	}
	// A bias toward '}' (then '{') closes the object at once.
	res, err := m.Complete(ctx, 1, "demo", pr, GenerateParams{MaxTokens: 8, JSON: true,
		Sampling: SamplingParams{LogitBias: map[int32]float32{'}': 100, '{': 50}}}, nil)
	if err != nil || res.Text != "{}" || res.FinishReason != "stop" {
		t.Fatalf("biased to close: %q, %q, %v", res.Text, res.FinishReason, err)
	}
	// A stop string held back at the close is released with it.
	res, err = m.Complete(ctx, 1, "demo", pr, GenerateParams{MaxTokens: 8, JSON: true, Stop: []string{"}x"},
		Sampling: SamplingParams{LogitBias: map[int32]float32{'}': 100, '{': 50}}}, nil)
	if err != nil || res.Text != "{}" || res.FinishReason != "stop" {
		t.Fatalf("stop string held at the close: %q, %q, %v", res.Text, res.FinishReason, err)
	}
	bare := newManager(t, "", ModelConfig{Name: "demo", Model: model})
	if _, err := bare.Complete(ctx, 1, "demo", pr, GenerateParams{MaxTokens: 4, JSON: true}, nil); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("JSON mode without a tokenizer: %v", err)
	}
}

// TestJSONSpaceBound: whitespace between JSON tokens runs to at most
// maxJSONSpace bytes, whitespace inside strings is content and unbounded.
func TestJSONSpaceBound(t *testing.T) {
	_, tok := loadDemo(t)
	id := func(s string) int32 {
		ids := tok.Encode(s)
		if len(ids) != 1 {
			t.Fatalf("%q is %d tokens", s, len(ids))
		}
		return ids[0]
	}
	sp, open, quote := id(" "), id("{"), id(`"`)
	for _, schema := range []*JSONSchema{nil, mustSchema(t, `{"type":"object","properties":{"a b":{"type":"string"}}}`)} {
		c := newJSONConstraint(tok, map[int32]bool{}, schema)
		take := func(x int32) {
			if !c.allows(x) {
				t.Fatalf("schema %v: token %q refused", schema != nil, tok.TokenBytes(x))
			}
			c.advance(x)
		}
		for range maxJSONSpace {
			take(sp)
		}
		if c.allows(sp) {
			t.Fatalf("schema %v: whitespace run past %d allowed", schema != nil, maxJSONSpace)
		}
		take(open)
		take(quote)
		if schema != nil { // into the value string
			for _, s := range []string{"a", " ", "b", `"`, ":", `"`} {
				take(id(s))
			}
		}
		for range 3 * maxJSONSpace {
			take(sp) // inside a string: content
		}
	}
}
