package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/pocketllm/pocketllm/session"
)

// The request side of tool calling, logit_bias and response_format.

// toolDef is the part of a tool the gateway checks; the tool itself goes
// to the chat template as the client sent it.
type toolDef struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// chatTools decodes tools and tool_choice into j: which tools the
// template sees, whether the reply is parsed for calls, and the call
// prefix that "required" or a named function forces (see forceToolCall).
func (j *job) chatTools(tools []json.RawMessage, choice json.RawMessage) *apiError {
	names := map[string]bool{}
	var defs []toolDef
	for i, raw := range tools {
		p := fmt.Sprintf("tools[%d]", i)
		var td toolDef
		if err := json.Unmarshal(raw, &td); err != nil {
			return badParam(p, "%s: expected a tool object", p)
		}
		if td.Type != "function" {
			return badParam(p+".type", "%s.type: only \"function\" tools are supported, got %q", p, td.Type)
		}
		if td.Function == nil || td.Function.Name == "" {
			return badParam(p+".function.name", "%s.function.name: missing", p)
		}
		if ps := bytes.TrimSpace(td.Function.Parameters); len(ps) > 0 && ps[0] != '{' && string(ps) != "null" {
			return badParam(p+".function.parameters", "%s.function.parameters: expected a JSON schema object", p)
		}
		names[td.Function.Name] = true
		defs = append(defs, td)
	}
	mode, name, aerr := toolChoice(choice)
	if aerr != nil {
		return aerr
	}
	if len(tools) == 0 {
		if mode == "required" || mode == "function" {
			return badParam("tool_choice", "tool_choice: %q needs tools", mode)
		}
		return nil
	}
	if mode == "none" {
		return nil // no tools in the prompt, no parsing: a plain reply
	}
	if mode == "function" && !names[name] {
		return badParam("tool_choice", "tool_choice: function %q is not among the tools", name)
	}
	if j.kwargs == nil {
		j.kwargs = map[string]any{}
	}
	j.kwargs["tools"] = tools
	j.tools = true
	j.toolTypes = toolParamTypes(defs)
	j.toolForce = mode == "required" || mode == "function"
	if mode == "function" {
		j.toolName = name
	}
	return nil
}

// toolChoice reads tool_choice: "auto" (the default), "none", "required",
// or {"type": "function", "function": {"name": ...}} (mode "function").
func toolChoice(raw json.RawMessage) (mode, name string, aerr *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "auto", "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return s, "", nil
		}
		return "", "", badParam("tool_choice", "tool_choice: %q is not auto, none, required or a function", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Type != "function" || obj.Function.Name == "" {
		return "", "", badParam("tool_choice", `tool_choice: expected "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`)
	}
	return "function", obj.Function.Name, nil
}

// logitBias decodes OpenAI's logit_bias: token id (a decimal string) →
// bias in [-100, 100].
func logitBias(m map[string]float64) (map[int32]float32, *apiError) {
	out, err := session.ParseLogitBias(m)
	if err != nil {
		return nil, badParam("logit_bias", "%v", err)
	}
	return out, nil
}

// responseFormat reads response_format: "text" (or none);
// "json_object", which holds the reply to one JSON object
// (session.GenerateParams.JSON); or "json_schema", which holds it to a
// value of json_schema.schema (session.CompileSchema: the subset strict
// mode uses; a schema it cannot follow is refused, not ignored).
func responseFormat(raw json.RawMessage, p *session.GenerateParams) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(raw, &rf) != nil || rf.Type == "" {
		return badParam("response_format", `response_format: expected {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {...}}`)
	}
	switch rf.Type {
	case "text":
		return nil
	case "json_object":
		p.JSON = true
		return nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return badParam("response_format", "response_format: json_schema.schema: missing")
		}
		s, err := session.CompileSchema(rf.JSONSchema.Schema)
		if err != nil {
			return badParam("response_format", "response_format: json_schema.schema: %v", err)
		}
		p.Schema = s
		return nil
	}
	return badParam("response_format", "response_format: unknown type %q", rf.Type)
}
