package main

import (
	"strings"

	"github.com/pocketllm/pocketllm/internal/textutil"
)

// thinkStyler dims a thinking model's reasoning (<think> ... </think>) in a
// reply streamed to a terminal, so that the answer stands out; the tags
// are dropped. Text is held back only while it may still be the start of
// a tag (most tokenizers make each tag one token).
type thinkStyler struct {
	held string
	in   bool
}

const (
	dim   = "\x1b[2m"
	reset = "\x1b[0m"
)

// write returns what to print for the streamed text s.
func (t *thinkStyler) write(s string) string {
	t.held += s
	var b strings.Builder
	for {
		tag, style := "<think>", dim
		if t.in {
			tag, style = "</think>", reset
		}
		if i := strings.Index(t.held, tag); i >= 0 {
			b.WriteString(t.held[:i])
			b.WriteString(style)
			t.held, t.in = t.held[i+len(tag):], !t.in
			continue
		}
		// Hold a suffix that may start the tag.
		keep := textutil.HeldPrefix(t.held, tag)
		b.WriteString(t.held[:len(t.held)-keep])
		t.held = t.held[len(t.held)-keep:]
		return b.String()
	}
}

// end returns what is left to print at the reply's end (the style reset
// if the reasoning was never closed).
func (t *thinkStyler) end() string {
	s := t.held
	t.held = ""
	if t.in {
		t.in = false
		s += reset
	}
	return s
}
