package gateway

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode"
)

// How each model family writes tool calls in its replies. The chat
// template teaches the model one of these; toolFormatFor picks it from the
// template, and toolParser (toolcall.go) finds the blocks in the reply:
//
//	hermes   (Qwen, many others)  <tool_call>{"name": "f", "arguments": {...}}</tool_call>
//	glm      (GLM-4.5)            <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>
//	deepseek (DeepSeek-V3)        <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f
//	                              ```json {...} ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//	         (DeepSeek-V3.1)      ... <｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜> ...
//	minimax  (MiniMax-M2)         <minimax:tool_call><invoke name="f"><parameter name="k">v</parameter>
//	                              </invoke></minimax:tool_call>
//	llama    (Llama 3.1-3.3)      the whole reply: {"name": "f", "parameters": {...}}, after an
//	                              optional <|python_tag|>; several separated by ";"
//
// A block may hold several calls (DeepSeek, MiniMax). A block that does
// not read as calls stays content, verbatim.

// toolFormat is one family's way of writing calls.
type toolFormat struct {
	name        string
	open, close string // a block's delimiters
	// whole: the calls are the whole reply (Llama), not blocks in it;
	// marker is then what a template that teaches the format writes.
	whole  bool
	marker string
	// calls reads a block's body; false: not calls (the block is content).
	calls func(body string, types paramTypes) ([]toolCall, bool)
	// prefix ends the prompt to force a call: of any tool (name "", for
	// tool_choice "required") or of the named one.
	prefix func(name string) string
}

// paramTypes are the JSON-schema types of the tools' parameters (tool →
// parameter → "string", "number", ...), from the request: the formats
// that write arguments as text (GLM, MiniMax) read a value as a string
// when its parameter is a string, else as the JSON it spells.
type paramTypes map[string]map[string]string

var (
	hermesFormat = &toolFormat{name: "hermes", open: "<tool_call>", close: "</tool_call>",
		calls: func(body string, _ paramTypes) ([]toolCall, bool) {
			c, ok := parseToolBody(body)
			return []toolCall{c}, ok
		},
		prefix: func(name string) string {
			if name == "" {
				return "<tool_call>\n{\"name\": \""
			}
			n, _ := json.Marshal(name)
			return "<tool_call>\n{\"name\": " + string(n) + ", \"arguments\": "
		}}
	glmFormat = &toolFormat{name: "glm", open: "<tool_call>", close: "</tool_call>", calls: glmCalls,
		prefix: func(name string) string {
			if name == "" {
				return "<tool_call>"
			}
			return "<tool_call>" + name + "\n"
		}}
	deepseekFormat = &toolFormat{name: "deepseek", open: dsCallsBegin, close: dsCallsEnd, calls: deepseekCalls,
		prefix: func(name string) string {
			if name == "" {
				return dsCallsBegin + dsCallBegin + "function" + dsSep
			}
			return dsCallsBegin + dsCallBegin + "function" + dsSep + name + "\n```json\n"
		}}
	// deepseek31Format is DeepSeek-V3.1's: the name before the separator,
	// bare JSON after it.
	deepseek31Format = &toolFormat{name: "deepseek-v3.1", open: dsCallsBegin, close: dsCallsEnd, calls: deepseekCalls,
		prefix: func(name string) string {
			if name == "" {
				return dsCallsBegin + dsCallBegin
			}
			return dsCallsBegin + dsCallBegin + name + dsSep
		}}
	llamaFormat = &toolFormat{name: "llama", whole: true, marker: llamaJSONHint, calls: llamaCalls,
		prefix: func(name string) string {
			if name == "" {
				return "{\"name\": \""
			}
			n, _ := json.Marshal(name)
			return "{\"name\": " + string(n) + ", \"parameters\": "
		}}
	minimaxFormat = &toolFormat{name: "minimax", open: "<minimax:tool_call>", close: "</minimax:tool_call>", calls: minimaxCalls,
		prefix: func(name string) string {
			if name == "" {
				return "<minimax:tool_call>\n<invoke name=\""
			}
			return "<minimax:tool_call>\n<invoke name=\"" + name + "\">\n"
		}}
)

const (
	// llamaJSONHint is how Llama 3.1's template asks for a call.
	llamaJSONHint = `{"name": function name, "parameters": dictionary of argument name and its value}`
	pythonTag     = "<|python_tag|>"

	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// toolFormatFor is the format a chat template teaches, by the markers it
// writes; Hermes where it shows none (the format most templates use).
func toolFormatFor(template string) *toolFormat {
	switch {
	case strings.Contains(template, minimaxFormat.open):
		return minimaxFormat
	case strings.Contains(template, dsCallBegin):
		// V3 writes the call's type before the separator and the
		// arguments in a json code block.
		if strings.Contains(template, "```json") {
			return deepseekFormat
		}
		return deepseek31Format
	case strings.Contains(template, "<arg_key>"):
		return glmFormat
	case strings.Contains(template, llamaJSONHint) && !strings.Contains(template, hermesFormat.open):
		return llamaFormat
	}
	return hermesFormat
}

// canForce reports whether the gateway can force a call by ending the
// prompt with the format's opening: only where the template writes that
// opening (or, for a whole-reply format, asks for it), so that it is the
// model's own.
func (f *toolFormat) canForce(template string) bool {
	if f.whole {
		return strings.Contains(template, f.marker)
	}
	return strings.Contains(template, f.open)
}

// llamaStart reports whether a reply that begins with t (left-trimmed)
// may still be a whole-reply call: a JSON object or list, after the
// python tag or a part of it.
func llamaStart(t string) bool {
	t = strings.TrimPrefix(t, pythonTag)
	return strings.HasPrefix(pythonTag, t) || strings.HasPrefix(strings.TrimLeftFunc(t, unicode.IsSpace), "{") ||
		strings.HasPrefix(strings.TrimLeftFunc(t, unicode.IsSpace), "[") || strings.TrimSpace(t) == ""
}

// llamaCalls reads a whole reply as Llama's calls: after an optional
// python tag, one call object, a list of them, or several separated by
// ";".
func llamaCalls(reply string, _ paramTypes) ([]toolCall, bool) {
	t := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(reply), pythonTag))
	var parts []string
	if strings.HasPrefix(t, "[") {
		var list []json.RawMessage
		if json.Unmarshal([]byte(t), &list) != nil {
			return nil, false
		}
		for _, r := range list {
			parts = append(parts, string(r))
		}
	} else {
		dec := json.NewDecoder(strings.NewReader(t))
		for {
			var r json.RawMessage
			if err := dec.Decode(&r); err != nil {
				return nil, false
			}
			parts = append(parts, string(r))
			rest := strings.TrimSpace(t[dec.InputOffset():])
			if rest == "" {
				break
			}
			rest, ok := strings.CutPrefix(rest, ";")
			if !ok {
				return nil, false
			}
			t = strings.TrimSpace(rest)
			if t == "" {
				break
			}
			dec = json.NewDecoder(strings.NewReader(t))
		}
	}
	var calls []toolCall
	for _, p := range parts {
		c, ok := parseToolBody(p)
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
	}
	return calls, len(calls) > 0
}

// deepseekCalls reads the calls between DeepSeek's begin and end markers,
// whitespace between them.
func deepseekCalls(body string, _ paramTypes) ([]toolCall, bool) {
	var calls []toolCall
	rest := strings.TrimSpace(body)
	for rest != "" {
		after, ok := strings.CutPrefix(rest, dsCallBegin)
		if !ok {
			return nil, false
		}
		one, tail, ok := strings.Cut(after, dsCallEnd)
		if !ok {
			return nil, false
		}
		head, args, ok := strings.Cut(one, dsSep)
		if !ok {
			return nil, false
		}
		name := strings.TrimSpace(head)
		if name == "function" { // V3: the name, then the arguments in a json code block
			n, block, ok := strings.Cut(args, "\n")
			if !ok {
				return nil, false
			}
			name = strings.TrimSpace(n)
			block = strings.TrimSpace(block)
			block, ok1 := strings.CutPrefix(block, "```json")
			block, ok2 := strings.CutSuffix(block, "```")
			if !ok1 || !ok2 {
				return nil, false
			}
			args = block
		}
		a, ok := jsonObject(args)
		if name == "" || !ok {
			return nil, false
		}
		calls = append(calls, toolCall{Name: name, Arguments: a})
		rest = strings.TrimSpace(tail)
	}
	return calls, len(calls) > 0
}

var (
	glmArg        = regexp.MustCompile(`^\s*<arg_key>([^<]*)</arg_key>\s*<arg_value>((?s:.*?))</arg_value>`)
	minimaxInvoke = regexp.MustCompile(`^\s*<invoke name="([^"<>]+)">((?s:.*?))</invoke>`)
	minimaxParam  = regexp.MustCompile(`^\s*<parameter name="([^"<>]+)">((?s:.*?))</parameter>`)
)

// glmCalls reads GLM-4.5's block: the name, then <arg_key>/<arg_value>
// pairs. A JSON body (the Hermes form) is read as Hermes.
func glmCalls(body string, types paramTypes) ([]toolCall, bool) {
	if strings.HasPrefix(strings.TrimSpace(body), "{") {
		return hermesFormat.calls(body, types)
	}
	name, rest := body, ""
	if i := strings.Index(body, "<arg_key>"); i >= 0 {
		name, rest = body[:i], body[i:]
	}
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, "<>\n") {
		return nil, false
	}
	args, ok := xmlArgs(rest, glmArg, types[name])
	if !ok {
		return nil, false
	}
	return []toolCall{{Name: name, Arguments: args}}, true
}

// minimaxCalls reads MiniMax-M2's block: one or more <invoke>s of
// <parameter>s.
func minimaxCalls(body string, types paramTypes) ([]toolCall, bool) {
	var calls []toolCall
	rest := body
	for strings.TrimSpace(rest) != "" {
		m := minimaxInvoke.FindStringSubmatchIndex(rest)
		if m == nil {
			return nil, false
		}
		name := strings.TrimSpace(rest[m[2]:m[3]])
		args, ok := xmlArgs(rest[m[4]:m[5]], minimaxParam, types[name])
		if name == "" || !ok {
			return nil, false
		}
		calls = append(calls, toolCall{Name: name, Arguments: args})
		rest = rest[m[1]:]
	}
	return calls, len(calls) > 0
}

// xmlArgs reads key/value elements (re: the key in group 1, the value in
// group 2) up to the end of s, whitespace between them, into a JSON object
// in their order.
func xmlArgs(s string, re *regexp.Regexp, types map[string]string) (string, bool) {
	var b strings.Builder
	b.WriteByte('{')
	for n := 0; strings.TrimSpace(s) != ""; n++ {
		m := re.FindStringSubmatchIndex(s)
		if m == nil {
			return "", false
		}
		key := strings.TrimSpace(s[m[2]:m[3]])
		if key == "" {
			return "", false
		}
		if n > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteString(": ")
		b.WriteString(argValue(s[m[4]:m[5]], types[key]))
		s = s[m[1]:]
	}
	b.WriteByte('}')
	return b.String(), true
}

// argValue is a value written as text, as JSON: the text itself for a
// string parameter, else the JSON it spells (a number, true, an object,
// ...) if it spells one, else the text (the model wrote a string where
// the schema, if any, says otherwise).
func argValue(raw, typ string) string {
	v := strings.TrimSpace(raw)
	if typ != "string" && v != "" && json.Valid([]byte(v)) {
		return v
	}
	s, _ := json.Marshal(strings.Trim(raw, "\n"))
	return string(s)
}

// jsonObject is s trimmed if it is one JSON object.
func jsonObject(s string) (string, bool) {
	s = strings.TrimSpace(s)
	var obj map[string]json.RawMessage
	if !strings.HasPrefix(s, "{") || json.Unmarshal([]byte(s), &obj) != nil {
		return "", false
	}
	return s, true
}

// toolParamTypes reads the parameters' types of the request's tools.
func toolParamTypes(defs []toolDef) paramTypes {
	out := paramTypes{}
	for _, td := range defs {
		if td.Function == nil {
			continue
		}
		var schema struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(td.Function.Parameters, &schema) != nil {
			continue
		}
		ts := map[string]string{}
		for k, p := range schema.Properties {
			if t, ok := p.Type.(string); ok {
				ts[k] = t
			}
		}
		out[td.Function.Name] = ts
	}
	return out
}
