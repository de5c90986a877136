package gateway

import (
	"bufio"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

// Server-sent events as OpenAI streams them: "data: JSON\n\n" per chunk,
// then "data: [DONE]\n\n". An error after the stream has started is sent
// as a data line holding an error object, which OpenAI's clients raise.

// sse writes one stream's events.
type sse struct {
	w   *bufio.Writer
	enc *json.Encoder
}

func newSSE(w *bufio.Writer) *sse {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &sse{w: w, enc: enc}
}

// event writes v as one event and flushes it to the client. An error
// means the client is gone.
func (s *sse) event(v any) error {
	s.w.WriteString("data: ")
	if err := s.enc.Encode(v); err != nil { // Encode ends the line
		return err
	}
	s.w.WriteByte('\n')
	return s.w.Flush()
}

// raw writes pre-encoded JSON as one event and flushes it.
func (s *sse) raw(b []byte) error {
	s.w.WriteString("data: ")
	s.w.Write(b)
	s.w.WriteString("\n\n")
	return s.w.Flush()
}

func (s *sse) done() error {
	s.w.WriteString("data: [DONE]\n\n")
	return s.w.Flush()
}

func (s *sse) fail(e *apiError) error {
	return s.event(e.body())
}

// sseHeaders starts an event-stream reply.
func sseHeaders(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
}

// chunkPrefix is the constant head of a stream's chunks, so that a plain
// content delta costs an append, not a reflection-driven encode.
func chunkPrefix(id, object, model string, created time.Time, index int) []byte {
	b := []byte(`{"id":`)
	b = appendJSONString(b, id)
	b = append(b, `,"object":`...)
	b = appendJSONString(b, object)
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, created.Unix(), 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"system_fingerprint":"`+fingerprint+`","choices":[{"index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	return append(b, ',')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string (s is valid UTF-8; invalid
// bytes become U+FFFD).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
