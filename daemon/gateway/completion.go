package gateway

import (
	"slices"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// POST /v1/completions: a text prompt or token ids; echo returns the
// prompt too, and with logprobs the prompt tokens' log-probabilities.

type textChoice struct {
	Text         string          `json:"text"`
	Index        int             `json:"index"`
	Logprobs     *legacyLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// legacyLogprobs is the completions API's logprobs object; the first
// echoed prompt token has no log-probability (null) and no alternatives
// ({}: openai-go cannot decode a null there).
type legacyLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// add appends one token; offset is the text length before it.
func (l *legacyLogprobs) add(m *modelInfo, ev session.TokenEvent, scored bool, offset int) {
	l.Tokens = append(l.Tokens, m.tokenText(ev.ID))
	l.TextOffset = append(l.TextOffset, offset)
	if !scored {
		l.TokenLogprobs = append(l.TokenLogprobs, nil)
		l.TopLogprobs = append(l.TopLogprobs, map[string]float64{})
		return
	}
	lp := finiteLogprob(ev.Logprob)
	l.TokenLogprobs = append(l.TokenLogprobs, &lp)
	top := make(map[string]float64, len(ev.Top))
	for _, a := range ev.Top {
		if _, dup := top[a.Text]; !dup {
			top[a.Text] = finiteLogprob(a.Logprob)
		}
	}
	l.TopLogprobs = append(l.TopLogprobs, top)
}

// clone is a copy for one more choice (nil stays nil): each choice's
// logprobs start with the echoed prompt's.
func (l *legacyLogprobs) clone() *legacyLogprobs {
	if l == nil {
		return nil
	}
	return &legacyLogprobs{Tokens: slices.Clone(l.Tokens), TokenLogprobs: slices.Clone(l.TokenLogprobs),
		TopLogprobs: slices.Clone(l.TopLogprobs), TextOffset: slices.Clone(l.TextOffset)}
}

func newLegacyLogprobs() *legacyLogprobs {
	return &legacyLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
}

func (g *Gateway) serveCompletion(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	j, aerr := decodeCompletion(ctx.PostBody(), string(ctx.Request.Header.Peek("X-Pocket-Session")))
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	p, aerr := g.prepare(ctx, j, func(m *modelInfo, start bool) ([]int32, *apiError) {
		if j.ids != nil {
			return j.ids, nil
		}
		if *j.text == "" && j.suffix == nil {
			return nil, nil
		}
		if m.tok == nil {
			return nil, badParam("prompt", "model %s has no tokenizer: send the prompt as token ids", m.name)
		}
		if j.suffix != nil {
			f, ok := fimFor(m.tok)
			if !ok {
				return nil, badParam("suffix", "suffix: model %s's vocabulary has no fill-in-the-middle tokens", m.name)
			}
			return m.tok.EncodeSpecial(f.prompt(*j.text, *j.suffix)), nil
		}
		switch {
		case j.echo || (j.sessionID != "" && !start):
			// An echoed prompt, whose tokens must spell the text given
			// back; or more of a session's text.
			return m.tok.Encode(*j.text), nil
		case j.sessionID != "":
			// The text an empty session starts with, as
			// /v0/sessions/{id}/append encodes it.
			return m.tok.EncodeStart(*j.text), nil
		}
		// A prompt of its own starts with the special tokens the
		// tokenizer puts before a text (Llama's <|begin_of_text|>), as
		// HF and vLLM encode a completion prompt by default.
		return m.tok.EncodeSpecial(*j.text), nil
	})
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	// The echoed prompt: its text, and its tokens scored when asked.
	var echo string
	var lps *legacyLogprobs
	if j.params.Logprobs {
		lps = newLegacyLogprobs()
	}
	if j.echo {
		if j.text != nil {
			echo = *j.text
		} else if p.m.tok != nil {
			echo = p.m.tok.Decode(p.prompt)
		}
		if lps != nil {
			evs, err := g.srv.Sessions().PromptLogprobs(g.srv.RequestContext(), p.owner, p.m.name, p.prompt, j.params.TopLogprobs)
			if err != nil {
				writeError(ctx, fromSession(err))
				return
			}
			off := 0
			for i, ev := range evs {
				lps.add(p.m, ev, i > 0, off)
				off += len(lps.Tokens[i])
			}
		}
	}
	id, created := newID("cmpl"), time.Now()
	if j.stream {
		g.streamCompletion(ctx, j, p, id, created, start, echo, lps)
		return
	}
	choices := make([]textChoice, 0, j.n)
	usages := make([]session.Usage, 0, j.n)
	for i := range j.n {
		text, clps := echo, lps.clone()
		var onToken func(session.TokenEvent) error
		if clps != nil {
			onToken = func(ev session.TokenEvent) error {
				clps.add(p.m, ev, true, len(text))
				text += ev.Text
				return nil
			}
		}
		res, err := p.choice(i)(g.srv.RequestContext(), g.timed(p.m.name, start, i, onToken))
		if err != nil {
			writeError(ctx, fromSession(err))
			return
		}
		reason := res.FinishReason
		choices = append(choices, textChoice{Text: echo + res.Text, Index: i, Logprobs: clps, FinishReason: &reason})
		usages = append(usages, res.Usage)
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, completionObject[textChoice]{
		ID: id, Object: "text_completion", Created: created.Unix(), Model: p.m.name, SystemFingerprint: fingerprint,
		Choices: choices, Usage: usageOf(choicesUsage(usages)),
	})
}

// streamCompletion replies with text_completion events, each choice's
// echoed prompt first.
func (g *Gateway) streamCompletion(ctx *fasthttp.RequestCtx, j *job, p *prepared, id string, created, start time.Time, echo string, lps *legacyLogprobs) {
	streamChunks(g, ctx, p, start, j.n, func(i int) chunkStream[textChoice] {
		cs := chunkStream[textChoice]{
			route: "completion", id: id, object: "text_completion", created: created,
			textOpen: `"text":`, textClose: `,"logprobs":null,"finish_reason":null}]}`,
			closing: func(reason *string) textChoice {
				return textChoice{Index: i, FinishReason: reason}
			},
			includeUsage: j.includeUsage,
		}
		if echo != "" || lps != nil && len(lps.Tokens) > 0 {
			cs.opening = &textChoice{Text: echo, Index: i, Logprobs: lps}
		}
		if lps != nil {
			offset := len(echo)
			cs.scored = func(ev session.TokenEvent) textChoice {
				one := newLegacyLogprobs()
				one.add(p.m, ev, true, offset)
				offset += len(ev.Text)
				return textChoice{Text: ev.Text, Index: i, Logprobs: one}
			}
		}
		return cs
	})
}
