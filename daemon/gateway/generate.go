package gateway

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// Generation shared by both completion routes: the prompt's checks, the
// call into the session manager (stateless or on a named session), and
// the hand-off of streamed tokens from the generating goroutine to the
// response writer.

// runFunc generates, streaming tokens to onToken (nil: none).
type runFunc func(ctx context.Context, onToken func(session.TokenEvent) error) (session.GenerateResult, error)

// prepared is a request ready to run.
type prepared struct {
	m      *modelInfo
	owner  session.Owner
	prompt []int32 // the stateless prompt, or the tokens added to the session
	run    runFunc // choice 0
	// choice is the run of choice i (n > 1, stateless requests only):
	// its sampling seeded seed+i when the request gave a seed, so that
	// the choices differ and each stays reproducible. Choices after the
	// first find the prompt in the prefix cache.
	choice func(i int) runFunc
}

// prepare resolves the model (or the session), checks the context length
// and builds the run function for prompt. encode's start tells that the
// prompt starts a sequence: the request has no session, or its session
// is empty.
func (g *Gateway) prepare(ctx *fasthttp.RequestCtx, j *job, encode func(m *modelInfo, start bool) ([]int32, *apiError)) (*prepared, *apiError) {
	owner := g.owner(ctx)
	mgr := g.srv.Sessions()
	var sessTokens int
	name := j.model
	if j.sessionID != "" {
		info, err := mgr.Get(owner, j.sessionID)
		if err != nil {
			return nil, fromSession(err)
		}
		if name != "" && name != info.Model {
			return nil, badParam("model", "model: session %s runs model %q, not %q", j.sessionID, info.Model, name)
		}
		name, sessTokens = info.Model, info.Tokens
	}
	m, aerr := g.model(name)
	if aerr != nil {
		return nil, aerr
	}
	prompt, aerr := encode(m, sessTokens == 0)
	if aerr != nil {
		return nil, aerr
	}
	for i, id := range prompt {
		if int(id) >= m.vocab {
			return nil, badParam("prompt", "prompt[%d]: token id %d is outside the vocabulary (%d)", i, id, m.vocab)
		}
	}
	for id := range j.params.Sampling.LogitBias {
		if int(id) >= m.vocab {
			return nil, badParam("logit_bias", "logit_bias: token id %d is outside the vocabulary (%d)", id, m.vocab)
		}
	}
	if len(j.params.Stop) > 0 && m.tok == nil {
		return nil, badParam("stop", "stop: model %s has no tokenizer to match stop strings with", m.name)
	}
	n := sessTokens + len(prompt)
	switch {
	case n == 0:
		return nil, badParam("prompt", "the prompt is empty")
	case n >= m.ctxLen:
		return nil, &apiError{status: fasthttp.StatusBadRequest, code: "context_length_exceeded", param: "messages",
			msg: fmt.Sprintf("the prompt is %d tokens; model %s's context is %d tokens and must leave room for at least one new token", n, m.name, m.ctxLen)}
	case j.maxTokensSet && n+j.params.MaxTokens > m.ctxLen:
		return nil, &apiError{status: fasthttp.StatusBadRequest, code: "context_length_exceeded", param: "max_tokens",
			msg: fmt.Sprintf("the prompt (%d tokens) plus max_tokens (%d) exceeds model %s's context of %d tokens", n, j.params.MaxTokens, m.name, m.ctxLen)}
	}
	p := &prepared{m: m, owner: owner, prompt: prompt}
	params := j.params
	if j.sessionID == "" {
		p.choice = func(i int) runFunc {
			params := params
			if s := params.Sampling.Seed; s != nil && i > 0 {
				seed := *s + uint64(i)
				params.Sampling.Seed = &seed
			}
			return func(rctx context.Context, onToken func(session.TokenEvent) error) (session.GenerateResult, error) {
				return mgr.Complete(rctx, owner, m.name, prompt, params, onToken)
			}
		}
		p.run = p.choice(0)
		return p, nil
	}
	id := j.sessionID
	p.run = func(rctx context.Context, onToken func(session.TokenEvent) error) (session.GenerateResult, error) {
		prefilled := 0
		if len(prompt) > 0 {
			ar, err := mgr.Append(rctx, owner, id, session.AppendInput{Tokens: prompt})
			if err != nil {
				return session.GenerateResult{}, err
			}
			prefilled = ar.Prefilled
		}
		res, err := mgr.Generate(rctx, owner, id, params, onToken)
		// The append computed part of the prompt; Generate counts it as cached.
		res.Usage.CachedTokens = max(0, res.Usage.CachedTokens-prefilled)
		return res, err
	}
	p.choice = func(int) runFunc { return p.run } // n is 1 with a session
	return p, nil
}

// choicesUsage is the usage of a request's choices: the prompt (and its
// cached part) once, as the first choice counted it, and every choice's
// completion tokens.
func choicesUsage(us []session.Usage) session.Usage {
	if len(us) == 0 {
		return session.Usage{}
	}
	out := us[0]
	for _, u := range us[1:] {
		out.CompletionTokens += u.CompletionTokens
	}
	return out
}

// timed wraps onToken of choice i to observe time to first token and
// inter-token latency. A later choice's first token is neither: it
// follows the choices before it.
func (g *Gateway) timed(model string, start time.Time, i int, next func(session.TokenEvent) error) func(session.TokenEvent) error {
	ttft, itl := g.metrics.latency(model)
	var last time.Time
	return func(ev session.TokenEvent) error {
		now := time.Now()
		if last.IsZero() {
			if i == 0 {
				ttft.Observe(now.Sub(start).Seconds())
			}
		} else {
			itl.Observe(now.Sub(last).Seconds())
		}
		last = now
		if next == nil {
			return nil
		}
		return next(ev)
	}
}

// generation is a streamed generation running on its own goroutine; the
// response writer takes its tokens from events, unbuffered, so the
// generation never runs ahead of what the client has been sent. A failed
// write (the client went away) cancels it: the generating goroutine stops
// at its next token.
type generation struct {
	events chan session.TokenEvent
	done   chan struct{}
	cancel context.CancelFunc
	res    session.GenerateResult
	err    error
}

// start runs choice i of p.
func (g *Gateway) start(p *prepared, i int, start time.Time) *generation {
	ctx, cancel := context.WithCancel(g.srv.RequestContext())
	gen := &generation{events: make(chan session.TokenEvent), done: make(chan struct{}), cancel: cancel}
	send := func(ev session.TokenEvent) error {
		select {
		case gen.events <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	go func() {
		defer close(gen.done)
		gen.res, gen.err = p.choice(i)(ctx, g.timed(p.m.name, start, i, send))
	}()
	return gen
}

// next returns the next token; ok is false once the generation is over
// and every token was taken.
func (gen *generation) next() (ev session.TokenEvent, ok bool) {
	select {
	case ev = <-gen.events:
		return ev, true
	case <-gen.done:
	}
	select {
	case ev = <-gen.events:
		return ev, true
	default:
		return ev, false
	}
}

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usageOf(u session.Usage) *usage {
	out := &usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	out.PromptTokensDetails.CachedTokens = u.CachedTokens
	return out
}

// finiteLogprob keeps JSON encodable what the model may give as -Inf.
func finiteLogprob(v float32) float64 {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return -9999
	}
	return f
}

func newID(prefix string) string {
	return fmt.Sprintf("%s-%016x%08x", prefix, rand.Uint64(), rand.Uint32())
}

// tokenText is one token's own text (for logprobs).
func (m *modelInfo) tokenText(id int32) string {
	if m.tok == nil {
		return ""
	}
	return m.tok.Decode([]int32{id})
}

const fingerprint = "pocketd"
