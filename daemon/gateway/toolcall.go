package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/pocketllm/pocketllm/internal/textutil"
	"math/rand/v2"
	"strings"
	"unicode"
)

// Tool calls in generated text, in the format that the model's chat
// template teaches (toolformat.go; Hermes, the most common, by default):
//
//	<tool_call>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
//	</tool_call>
//
// toolParser splits a stream of text into content and such calls. A block
// that does not read as calls, or one the generation never closed and
// that is not whole calls either, is content, verbatim: the client sees
// what the model wrote rather than an error. Whitespace between content
// and a call (the newlines a model puts between calls) are dropped, so
// that a reply of calls alone has no content, as OpenAI's replies do.
// FuzzToolParser holds it to never panicking and to losing no
// non-whitespace text.

// toolCall is a parsed call; Arguments is a JSON text (OpenAI's clients
// expect a string holding JSON).
type toolCall struct {
	Name, Arguments string
}

// toolPiece is one thing the parser released: content text, or a call.
type toolPiece struct {
	text string
	call *toolCall
}

type toolParser struct {
	f       *toolFormat // nil: Hermes
	types   paramTypes
	pending string // text not yet released: a possible tag start, a call body, or whitespace
	inCall  bool
	prose   bool   // a whole-reply format's reply is not a call: content from here on
	space   string // whitespace-only content held back
	calls   int
}

func (p *toolParser) format() *toolFormat {
	if p.f == nil {
		return hermesFormat
	}
	return p.f
}

// feed adds generated text and returns what became final.
func (p *toolParser) feed(s string) []toolPiece {
	f := p.format()
	p.pending += s
	if f.whole {
		// Hold the reply while it may still be calls; once it cannot,
		// everything is content.
		if !p.prose && llamaStart(p.pending) {
			return nil
		}
		p.prose = true
		out := p.content(nil, p.pending)
		p.pending = ""
		return out
	}
	var out []toolPiece
	for {
		if p.inCall {
			i := strings.Index(p.pending, f.close)
			if i < 0 {
				return out
			}
			body := p.pending[:i]
			p.pending = p.pending[i+len(f.close):]
			p.inCall = false
			out = p.block(out, body, f.open+body+f.close)
			continue
		}
		if i := strings.Index(p.pending, f.open); i >= 0 {
			out = p.content(out, p.pending[:i])
			p.pending = p.pending[i+len(f.open):]
			p.inCall = true
			continue
		}
		// Hold back a suffix that may still become the opening tag.
		hold := textutil.HeldPrefix(p.pending, f.open)
		out = p.content(out, p.pending[:len(p.pending)-hold])
		p.pending = p.pending[len(p.pending)-hold:]
		return out
	}
}

// block releases a block's calls, or the block as content (verbatim) if
// its body does not read as calls.
func (p *toolParser) block(out []toolPiece, body, verbatim string) []toolPiece {
	calls, ok := p.format().calls(body, p.types)
	if !ok {
		return p.content(out, verbatim)
	}
	p.space = "" // whitespace before a call is dropped
	for _, c := range calls {
		p.calls++
		out = append(out, toolPiece{call: &c})
	}
	return out
}

// content releases text as content, holding back trailing whitespace
// until something other than a call follows it (so that how the text was
// split into tokens does not change the result).
func (p *toolParser) content(out []toolPiece, s string) []toolPiece {
	t := strings.TrimRightFunc(s, unicode.IsSpace)
	if t == "" {
		p.space += s
		return out
	}
	s, p.space = p.space+t, s[len(t):]
	if n := len(out); n > 0 && out[n-1].call == nil {
		out[n-1].text += s
		return out
	}
	return append(out, toolPiece{text: s})
}

// flush ends the stream: an unclosed block is calls if its body reads as
// whole calls (a model that ends after its last call without the closing
// marker), else content; held-back whitespace is content unless the reply
// made calls.
func (p *toolParser) flush() []toolPiece {
	var out []toolPiece
	if p.format().whole && !p.prose && strings.TrimSpace(p.pending) != "" {
		out = p.block(out, p.pending, p.pending)
	} else if p.inCall {
		out = p.block(out, p.pending, p.format().open+p.pending)
	} else {
		out = p.content(out, p.pending)
	}
	p.pending, p.inCall = "", false
	if p.calls == 0 && p.space != "" {
		out = append(out, toolPiece{text: p.space})
	}
	p.space = ""
	return out
}

// parseToolBody reads a call's JSON: an object with a non-empty string
// "name" and "arguments" (or "parameters", Llama's spelling) that is an
// object, or a string holding one; missing arguments are {}.
func parseToolBody(body string) (toolCall, bool) {
	var v struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if dec.Decode(&v) != nil || dec.More() || v.Name == nil || strings.TrimSpace(*v.Name) == "" {
		return toolCall{}, false
	}
	args := bytes.TrimSpace(v.Arguments)
	if len(args) == 0 {
		args = bytes.TrimSpace(v.Parameters)
	}
	switch {
	case len(args) == 0 || string(args) == "null":
		args = []byte("{}")
	case args[0] == '"':
		var s string
		if json.Unmarshal(args, &s) != nil {
			return toolCall{}, false
		}
		args = bytes.TrimSpace([]byte(s))
		if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
			return toolCall{}, false
		}
	case args[0] != '{':
		return toolCall{}, false
	}
	return toolCall{Name: *v.Name, Arguments: string(args)}, true
}

// parseToolCalls splits a whole reply into content and calls (f nil:
// Hermes).
func parseToolCalls(text string, f *toolFormat, types paramTypes) (content string, calls []toolCall) {
	p := toolParser{f: f, types: types}
	var b strings.Builder
	for _, pc := range append(p.feed(text), p.flush()...) {
		if pc.call != nil {
			calls = append(calls, *pc.call)
		} else {
			b.WriteString(pc.text)
		}
	}
	return b.String(), calls
}

// newCallID is an OpenAI-style tool call id.
func newCallID() string {
	return fmt.Sprintf("call_%016x%08x", rand.Uint64(), rand.Uint32())
}
