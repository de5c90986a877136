package gateway

import (
	"bufio"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// completionObject is a completion reply of either route, whole or one
// streamed chunk; C is the route's choice.
type completionObject[C any] struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []C    `json:"choices"`
	Usage             *usage `json:"usage,omitempty"`
}

// chunkStream is what a streamed completion route sends around the
// generated tokens; streamChunks sends the rest.
type chunkStream[C any] struct {
	route      string // names the route in the log
	id, object string
	created    time.Time
	// opening is sent before the first token (nil: nothing).
	opening *C
	// scored is a token's choice with its logprobs (nil: none asked for;
	// a token's text goes out pre-encoded between textOpen and textClose).
	scored              func(ev session.TokenEvent) C
	textOpen, textClose string
	// filter, when set, turns each token into the choices to send (none
	// or several), in place of scored and the text fast path; end then
	// returns what the end of the generation releases, and may change the
	// finish reason (tool calls).
	filter func(ev session.TokenEvent) []C
	end    func(reason *string) []C
	// closing is the choice carrying the finish reason.
	closing      func(reason *string) C
	includeUsage bool
}

// streamChunks replies with the chunks of n choices around p's generated
// tokens, choice after choice: mk(i) is what choice i sends around its
// tokens, each of its chunks carrying index i. An error before the first
// token gets a plain error reply with its status.
func streamChunks[C any](g *Gateway, ctx *fasthttp.RequestCtx, p *prepared, start time.Time, n int, mk func(i int) chunkStream[C]) {
	gen, first, ok := g.startStream(ctx, p, start)
	if gen == nil {
		return
	}
	cs := mk(0)
	chunk := func(c C) completionObject[C] {
		return completionObject[C]{ID: cs.id, Object: cs.object, Created: cs.created.Unix(), Model: p.m.name,
			SystemFingerprint: fingerprint, Choices: []C{c}}
	}
	log := g.srv.Logger()
	daemon.StreamBody(ctx, log, func(w *bufio.Writer) {
		s := newSSE(w)
		usages := make([]session.Usage, 0, n)
		for i := range n {
			if i > 0 {
				gen, cs = g.start(p, i, start), mk(i)
				first, ok = gen.next()
			}
			switch streamChoice(s, gen, first, ok, cs, chunk, chunkPrefix(cs.id, cs.object, p.m.name, cs.created, i)) {
			case clientGone:
				log.Debug("client went away during a "+cs.route+" stream", "id", cs.id, "choice", i, "generated", len(gen.res.IDs))
				return
			case choiceFailed:
				return
			}
			usages = append(usages, gen.res.Usage)
		}
		if cs.includeUsage {
			var zero C
			c := chunk(zero)
			c.Choices = []C{}
			c.Usage = usageOf(choicesUsage(usages))
			if s.event(c) != nil {
				return
			}
		}
		s.done()
	})
}

// startStream starts p's first choice and waits for its first token: a
// generation that fails before it gets a plain error reply with its
// status (gen nil); otherwise the event-stream headers are set and the
// generation and that token (ok false: none came) are returned.
func (g *Gateway) startStream(ctx *fasthttp.RequestCtx, p *prepared, start time.Time) (gen *generation, first session.TokenEvent, ok bool) {
	return g.startStreamErr(ctx, p, start, writeError)
}

// startStreamErr is startStream with the error reply written by fail (in
// the shape of the route's API).
func (g *Gateway) startStreamErr(ctx *fasthttp.RequestCtx, p *prepared, start time.Time,
	fail func(*fasthttp.RequestCtx, *apiError)) (gen *generation, first session.TokenEvent, ok bool) {
	gen = g.start(p, 0, start)
	first, ok = gen.next()
	if !ok && gen.err != nil {
		gen.cancel()
		fail(ctx, fromSession(gen.err))
		return nil, first, false
	}
	sseHeaders(ctx)
	return gen, first, ok
}

// How a choice's stream ended.
const (
	choiceSent   = iota
	choiceFailed // the generation failed: the error was sent
	clientGone   // a write failed: the generation was cancelled and waited for
)

// streamChoice sends one choice's chunks: its opening, its tokens (first
// taken already, when ok) and its closing.
func streamChoice[C any](s *sse, gen *generation, first session.TokenEvent, ok bool, cs chunkStream[C],
	chunk func(C) completionObject[C], prefix []byte) int {
	defer gen.cancel()
	gone := func() int {
		gen.cancel() // stop at the next token
		<-gen.done
		return clientGone
	}
	if cs.opening != nil && s.event(chunk(*cs.opening)) != nil {
		return gone()
	}
	var buf []byte
	for ev, more := first, ok; more; ev, more = gen.next() {
		var err error
		switch {
		case cs.filter != nil:
			for _, c := range cs.filter(ev) {
				if err = s.event(chunk(c)); err != nil {
					break
				}
			}
		case cs.scored != nil:
			err = s.event(chunk(cs.scored(ev)))
		case ev.Text != "":
			buf = append(append(buf[:0], prefix...), cs.textOpen...)
			buf = appendJSONString(buf, ev.Text)
			buf = append(buf, cs.textClose...)
			err = s.raw(buf)
		}
		if err != nil {
			return gone()
		}
	}
	if gen.err != nil {
		s.fail(fromSession(gen.err))
		return choiceFailed
	}
	reason := gen.res.FinishReason
	if cs.end != nil {
		for _, c := range cs.end(&reason) {
			if s.event(chunk(c)) != nil {
				return gone()
			}
		}
	}
	if s.event(chunk(cs.closing(&reason))) != nil {
		return gone()
	}
	return choiceSent
}
