package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// ErrNoChatTemplate is returned by ApplyChatTemplate when the tokenizer has
// no chat template.
var ErrNoChatTemplate = errors.New("tokenizer has no chat template")

// Message is one chat message as chat templates see it (the OpenAI shape).
// Empty optional fields are left out, so a template's
// `message.reasoning_content is defined` is false unless it was set.
type Message struct {
	Role             string     `json:"role"`
	Content          any        `json:"content"` // string, nil, or a list of parts
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// ToolCall is an assistant's function call.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments (a JSON string as
// OpenAI sends it, or an object).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
}

type chatTemplate struct {
	source string
	once   sync.Once
	tmpl   *exec.Template
	err    error
	mu     sync.Mutex // serializes renders: gonja does not promise concurrency safety
}

func newChatTemplate(source string) *chatTemplate { return &chatTemplate{source: source} }

// templateConfig matches transformers' sandboxed Jinja environment
// (trim_blocks and lstrip_blocks on).
func templateConfig() *config.Config {
	c := config.New()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	return c
}

func templateEnv() *exec.Environment {
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("raise_exception", func(msg string) (string, error) {
		return "", fmt.Errorf("chat template: %s", msg)
	})
	ctx.Set("strftime_now", func(format string) string { return strftime(time.Now(), format) })
	return &exec.Environment{
		Context:           ctx,
		Filters:           templateFilters(), // tojson as transformers has it (pyjson.go)
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           templateMethods(), // dict methods keep key order
	}
}

func (c *chatTemplate) compile() (tmpl *exec.Template, err error) {
	c.once.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				c.err = fmt.Errorf("chat template: parse panicked: %v", r)
			}
		}()
		// The template may only see itself: no includes from disk.
		loader, lerr := loaders.NewMemoryLoader(map[string]string{"/chat_template": c.source})
		if lerr != nil {
			c.err = lerr
			return
		}
		c.tmpl, c.err = exec.NewTemplate("/chat_template", templateConfig(), loader, templateEnv())
		if c.err != nil {
			c.err = fmt.Errorf("chat template: %w", c.err)
		}
	})
	return c.tmpl, c.err
}

func (c *chatTemplate) render(vars map[string]any) (out string, err error) {
	tmpl, err := c.compile()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template: render panicked: %v", r)
		}
	}()
	s, err := tmpl.ExecuteToString(exec.NewContext(vars))
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return s, nil
}

// HasChatTemplate reports whether ApplyChatTemplate can render.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil }

// ChatTemplate is the chat template's Jinja source ("" without one), for
// callers that adapt to what a template does (e.g. its tool-call format).
func (t *Tokenizer) ChatTemplate() string {
	if t.chat == nil {
		return ""
	}
	return t.chat.source
}

// ApplyChatTemplate renders messages ([]Message, []map[string]any or any
// JSON-shaped list) with the model's chat template. The template sees
// messages, add_generation_prompt, bos_token and eos_token (from
// tokenizer_config.json), raise_exception and strftime_now, plus every
// entry of kwargs (tools, enable_thinking, ...), as transformers passes them.
func (t *Tokenizer) ApplyChatTemplate(messages any, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	msgs, err := plainJSON(messages)
	if err != nil {
		return "", fmt.Errorf("chat template: messages: %w", err)
	}
	if _, ok := msgs.([]any); !ok {
		return "", errors.New("chat template: messages must be a list")
	}
	vars := map[string]any{}
	if len(kwargs) > 0 {
		kw, err := plainJSON(kwargs)
		if err != nil {
			return "", fmt.Errorf("chat template: kwargs: %w", err)
		}
		if d, ok := kw.(*exec.Dict); ok {
			for _, p := range d.Pairs {
				vars[p.Key.String()] = p.Value.Interface()
			}
		}
	}
	if t.hasBOSTok {
		vars["bos_token"] = t.bosToken
	}
	if t.hasEOSTok {
		vars["eos_token"] = t.eosToken
	}
	vars["messages"] = msgs
	vars["add_generation_prompt"] = addGenerationPrompt
	return t.chat.render(vars)
}

// plainJSON converts v to the shapes Python's json.loads gives templates
// (see decodeOrdered: objects keep their key order, integers stay
// integral), so that Go structs and request JSON render as transformers
// renders the same request.
func plainJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeOrdered(b)
}

// strftime implements the common directives of Python's time.strftime.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
