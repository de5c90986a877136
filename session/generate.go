package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/pocketllm/pocketllm/internal/textutil"
	"slices"
	"strings"
	"time"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// AppendInput is what Append adds: exactly one of Text (encoded without
// special tokens being added), Tokens, or Messages (rendered with the
// model's chat template, then encoded).
type AppendInput struct {
	Text     string
	Tokens   []int32
	Messages []tokenizer.Message
	// AddGenerationPrompt applies to Messages; nil means true.
	AddGenerationPrompt *bool
	ChatKwargs          map[string]any
}

// AppendResult reports an append: Tokens is the session's new length,
// Reused the positions whose KV came from the prefix cache, Prefilled the
// positions computed by this call.
type AppendResult struct {
	Tokens, Reused, Prefilled int
}

// GenerateParams control a generation.
type GenerateParams struct {
	// MaxTokens bounds the new tokens; ≤ 0 means up to the context length.
	MaxTokens int
	Sampling  SamplingParams
	// Stop strings end generation when they appear in the generated text;
	// the returned text stops before them.
	Stop []string
	// Logprobs asks for each token's log-probability; TopLogprobs > 0 also
	// for that many alternatives (both from the raw logits).
	Logprobs    bool
	TopLogprobs int
	// JSON holds the output to one JSON object (OpenAI's response_format
	// json_object): tokens that would break it are never sampled, and
	// generation stops when the object closes (jsonmode.go). It needs the
	// model's tokenizer.
	JSON bool
	// Schema holds the output to one value of a JSON schema (OpenAI's
	// response_format json_schema; CompileSchema), as JSON does to any
	// object.
	Schema *JSONSchema
}

// TokenEvent is one generated token, streamed as it is sampled. Every id
// of GenerateResult.IDs gets exactly one event, in order, and the Texts of
// the events concatenate to GenerateResult.Text.
type TokenEvent struct {
	ID int32
	// Text is the text that became final with this token: "" while a
	// multi-byte character or a possible stop string is incomplete, and
	// never an EOS token's own text.
	Text    string
	Logprob float32
	Top     []TopLogprob
}

// TopLogprob is one alternative of a TokenEvent.
type TopLogprob struct {
	ID      int32
	Text    string
	Logprob float32
}

// Usage counts tokens: PromptTokens is the length the generation was
// conditioned on, CachedTokens those of them whose KV was reused rather
// than computed by this call, CompletionTokens the generated ones.
type Usage struct {
	PromptTokens, CachedTokens, CompletionTokens int
}

// GenerateResult is a finished generation. IDs are the generated tokens,
// all of which joined the session (an EOS that ended it included); Text
// excludes EOS text and anything from a stop string on.
type GenerateResult struct {
	IDs          []int32
	Text         string
	FinishReason string // "stop" or "length"
	// Stop is the stop string that ended the generation (GenerateParams.Stop;
	// "" when something else did).
	Stop  string
	Usage Usage
}

// encode turns an append's input into tokens. Text that starts a
// session (start) gets the special tokens the tokenizer puts before a
// text (Llama's BOS), as a prompt encoded on its own does; chat messages
// get what their template writes.
func (e *engine) encode(in AppendInput, start bool) ([]int32, error) {
	n := 0
	if in.Text != "" {
		n++
	}
	if len(in.Tokens) > 0 {
		n++
	}
	if len(in.Messages) > 0 {
		n++
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: give exactly one of text, tokens or messages", ErrBadRequest)
	}
	var toks []int32
	switch {
	case len(in.Tokens) > 0:
		toks = slices.Clone(in.Tokens)
	case e.tok == nil:
		return nil, fmt.Errorf("%w: model %s has no tokenizer; send tokens", ErrBadRequest, e.name)
	case in.Text != "" && start:
		toks = e.tok.EncodeStart(in.Text)
	case in.Text != "":
		toks = e.tok.Encode(in.Text)
	default:
		gen := true
		if in.AddGenerationPrompt != nil {
			gen = *in.AddGenerationPrompt
		}
		text, err := e.tok.ApplyChatTemplate(in.Messages, gen, in.ChatKwargs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		toks = e.tok.Encode(text)
	}
	return toks, e.checkTokens(toks)
}

func (e *engine) checkTokens(toks []int32) error {
	v := e.model.ModelConfig().VocabSize
	for _, t := range toks {
		if t < 0 || int(t) >= v {
			return fmt.Errorf("%w: token id %d outside the vocabulary (%d)", ErrBadRequest, t, v)
		}
	}
	return nil
}

// prefill brings sq's KV up to all of toks, one budgeted scheduler step
// at a time, and returns the logits at the last token (or, with g, maybe
// only their argmax: see ensure).
func (e *engine) prefill(ctx context.Context, sq *seqState, toks []int32, g GreedyRunner) (progress, error) {
	var total progress
	for {
		var pr progress
		err := e.submit(ctx, func() (err error) {
			pr, err = e.ensure(sq, toks, e.stepTokens(), g)
			return err
		})
		total.reused += pr.reused
		total.computed += pr.computed
		if err != nil {
			return total, err
		}
		if pr.done {
			total.logits, total.done = pr.logits, true
			total.argmax, total.id = pr.argmax, pr.id
			return total, nil
		}
	}
}

// use marks sq busy for eviction's preferences while a request runs.
func (e *engine) use(sq *seqState, d int) {
	e.kvMu.Lock()
	sq.active += d
	e.kvMu.Unlock()
}

// lockedWithEngine locks session id (see locked) and finds its model's
// engine; on an error the session is not left locked.
func (m *Manager) lockedWithEngine(ctx context.Context, owner Owner, id string) (*session, *engine, error) {
	s, err := m.locked(ctx, owner, id)
	if err != nil {
		return nil, nil, err
	}
	e, err := m.engine(s.model)
	if err != nil {
		s.release()
		return nil, nil, err
	}
	return s, e, nil
}

// enter admits a request on s to e and marks s's sequence busy; leave
// undoes both.
func (e *engine) enter(s *session) (sq *seqState, leave func(), err error) {
	if err := e.admit(); err != nil {
		return nil, nil, err
	}
	e.kvMu.Lock()
	sq = e.seqOf(s)
	sq.active++
	e.kvMu.Unlock()
	return sq, func() {
		e.use(sq, -1)
		e.leave()
	}, nil
}

// rollback drops sq's KV past its first n positions.
func (e *engine) rollback(sq *seqState, n int) {
	e.kvMu.Lock()
	e.truncateKV(sq, n)
	e.kvMu.Unlock()
}

// Append adds tokens to a session and prefills their KV, reusing the live
// KV of the session and cached prefix blocks.
func (m *Manager) Append(ctx context.Context, owner Owner, id string, in AppendInput) (AppendResult, error) {
	if err := m.begin(); err != nil {
		return AppendResult{}, err
	}
	defer m.end()
	s, e, err := m.lockedWithEngine(ctx, owner, id)
	if err != nil {
		return AppendResult{}, err
	}
	defer s.release()
	add, err := e.encode(in, len(s.tokens) == 0)
	if err != nil {
		return AppendResult{}, err
	}
	old := len(s.tokens)
	toks := append(slices.Clone(s.tokens), add...)
	if len(toks) > e.ctxLen {
		return AppendResult{}, fmt.Errorf("%w: %d tokens, model %s allows %d", ErrContextLength, len(toks), e.name, e.ctxLen)
	}
	sq, leave, err := e.enter(s)
	if err != nil {
		return AppendResult{}, err
	}
	defer leave()
	// The new history is written (and fsynced) while the prefill runs: the
	// answer waits for both, so it still comes only once the append is
	// durable, but the two no longer add up in the time to first token. A
	// crash between the write and the answer leaves the append applied,
	// as a crash after the write and before the answer always could.
	r := s.record()
	r.Updated = time.Now().UTC()
	durable := make(chan error, 1)
	go func() { durable <- m.store.put(r, toks) }()
	pr, err := e.prefill(ctx, sq, toks, nil)
	m.prefilled.Add(int64(pr.computed))
	werr := <-durable
	if err == nil {
		err = werr
	}
	if err != nil {
		e.rollback(sq, old) // the session is unchanged
		if werr == nil {
			// The prefill failed after the new history was stored: put
			// the old one back.
			if rerr := m.store.put(s.record(), s.tokens); rerr != nil {
				m.log.Error("append failed and its history could not be reverted", "session", s.id, "err", rerr)
			}
		}
		return AppendResult{}, err
	}
	m.setHistory(s, toks, r.Updated)
	return AppendResult{Tokens: len(toks), Reused: pr.reused, Prefilled: pr.computed}, nil
}

// Generate samples tokens after a session's history, streaming each to
// onToken (which may be nil; an error from it stops the generation and is
// returned). The generated tokens join the session, also when ctx ends
// the generation early (then the partial result comes with ctx's error).
func (m *Manager) Generate(ctx context.Context, owner Owner, id string, p GenerateParams, onToken func(TokenEvent) error) (GenerateResult, error) {
	if err := m.begin(); err != nil {
		return GenerateResult{}, err
	}
	defer m.end()
	s, e, err := m.lockedWithEngine(ctx, owner, id)
	if err != nil {
		return GenerateResult{}, err
	}
	defer s.release()
	sq, leave, err := e.enter(s)
	if err != nil {
		return GenerateResult{}, err
	}
	defer leave()
	res, toks, err := m.generate(ctx, e, sq, slices.Clone(s.tokens), p, onToken, &s.closing)
	if len(res.IDs) > 0 {
		if cerr := m.commit(s, toks); cerr != nil {
			e.rollback(sq, len(s.tokens))
			return GenerateResult{}, cerr
		}
	}
	return res, err
}

// ephemeral admits a request for e and gives it a sequence of its own
// (the stateless routes': Complete, PromptLogprobs, Embed); done drops the
// sequence (its full blocks stay in the prefix cache) and leaves.
func (e *engine) ephemeral(owner Owner) (sq *seqState, done func(), err error) {
	if err := e.admit(); err != nil {
		return nil, nil, err
	}
	e.kvMu.Lock()
	sq = e.newSeq(owner)
	sq.active++
	e.kvMu.Unlock()
	return sq, func() {
		e.kvMu.Lock()
		e.dropSeq(sq)
		e.kvMu.Unlock()
		e.leave()
	}, nil
}

// Complete generates after prompt on an ephemeral sequence (the stateless
// OpenAI routes): the prompt reuses the prefix cache, and the full blocks
// of prompt and completion stay in it afterwards.
func (m *Manager) Complete(ctx context.Context, owner Owner, model string, prompt []int32, p GenerateParams, onToken func(TokenEvent) error) (GenerateResult, error) {
	if err := m.begin(); err != nil {
		return GenerateResult{}, err
	}
	defer m.end()
	e, err := m.engine(model)
	if err != nil {
		return GenerateResult{}, err
	}
	if err := e.checkTokens(prompt); err != nil {
		return GenerateResult{}, err
	}
	sq, done, err := e.ephemeral(owner)
	if err != nil {
		return GenerateResult{}, err
	}
	defer done()
	res, _, err := m.generate(ctx, e, sq, slices.Clone(prompt), p, onToken, nil)
	return res, err
}

// generate is the decode loop shared by Generate and Complete: one
// scheduler step per token; sampling, detokenising, stop strings and the
// callback run on the caller's goroutine so a slow client never stalls the
// scheduler. It returns the result and the extended token history.
func (m *Manager) generate(ctx context.Context, e *engine, sq *seqState, toks []int32, p GenerateParams, onToken func(TokenEvent) error, closing interface{ Load() bool }) (GenerateResult, []int32, error) {
	var res GenerateResult
	n := len(toks)
	if n == 0 {
		return res, toks, fmt.Errorf("%w: nothing to generate from: append tokens first", ErrBadRequest)
	}
	if n >= e.ctxLen {
		return res, toks, fmt.Errorf("%w: %d tokens, model %s allows %d", ErrContextLength, n, e.name, e.ctxLen)
	}
	if len(p.Stop) > 0 && e.tok == nil {
		return res, toks, fmt.Errorf("%w: stop strings need a tokenizer", ErrBadRequest)
	}
	if p.TopLogprobs < 0 || p.TopLogprobs > 20 {
		return res, toks, fmt.Errorf("%w: top_logprobs must be in [0, 20]", ErrBadRequest)
	}
	var js *jsonConstraint
	if p.JSON || p.Schema != nil {
		if e.tok == nil {
			return res, toks, fmt.Errorf("%w: JSON mode needs a tokenizer", ErrBadRequest)
		}
		js = newJSONConstraint(e.tok, e.eos, p.Schema)
	}
	maxNew := e.ctxLen - n
	if p.MaxTokens > 0 {
		maxNew = min(maxNew, p.MaxTokens)
	}
	res.Usage.PromptTokens = n
	smp := newSampler(p.Sampling, toks)
	st := newStopper(e.tok, p.Stop)
	res.FinishReason = "length"
	first := true
	greedy := e.greedyRunner(p)
	drawn := false     // greedy is the runner's drawing path (sampledSteps)
	if greedy == nil { // a drawn step's Adjust carries penalties and bias
		greedy = e.sampledRunner(p, smp)
		drawn = greedy != nil
	}
	if js != nil { // no step of the runner sees the constraint
		greedy = nil
		drawn = false
	}
	var err error
	for len(res.IDs) < maxNew {
		if closing != nil && closing.Load() {
			err = fmt.Errorf("session: %w", ErrClosed)
			break
		}
		var pr progress
		pr, err = e.prefill(ctx, sq, toks, greedy)
		m.prefilled.Add(int64(pr.computed))
		if first {
			// Positions of the prompt computed now: everything else was reused.
			res.Usage.CachedTokens = n - pr.computed
			m.prompt.Add(int64(n))
			m.cached.Add(int64(res.Usage.CachedTokens))
			first = false
		}
		if err != nil {
			break
		}
		var id int32
		if js != nil {
			if id, err = smp.sampleJSON(pr.logits, js); err != nil {
				break
			}
			js.advance(id)
		} else {
			id = pr.next(smp)
			if pr.argmax && drawn {
				smp.drawTaken() // the runner drew id with it
			}
		}
		smp.observe(id)
		toks = append(toks, id)
		res.IDs = append(res.IDs, id)
		m.completion.Add(1)
		ev := TokenEvent{ID: id}
		if p.Logprobs || p.TopLogprobs > 0 {
			ev.Logprob, ev.Top = logSoftmax(pr.logits, id, p.TopLogprobs)
			if e.tok != nil {
				for i := range ev.Top {
					ev.Top[i].Text = e.tok.Decode([]int32{ev.Top[i].ID})
				}
			}
		}
		eos := e.eos[id]
		jsonDone := js != nil && js.done()
		stopped := false
		if st != nil {
			if eos {
				ev.Text = st.flush()
			} else {
				ev.Text, stopped = st.next(id)
			}
			if !eos && !stopped && (len(res.IDs) == maxNew || jsonDone) {
				ev.Text += st.flush()
			}
			res.Text += ev.Text
		}
		if onToken != nil {
			if cerr := onToken(ev); cerr != nil {
				err = cerr
				break
			}
		}
		if eos || stopped || jsonDone {
			res.FinishReason = "stop"
			if stopped {
				res.Stop = st.matched
			}
			break
		}
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
			break
		}
	}
	res.Usage.CompletionTokens = len(res.IDs)
	if err != nil && errors.Is(err, ErrContextLength) && len(res.IDs) > 0 {
		err = nil // the pool or context filled up: a length finish
	}
	return res, toks, err
}

// stopper detokenises a stream and finds stop strings in it, holding back
// text that could still become a stop string.
type stopper struct {
	dec     *tokenizer.Decoder
	stops   []string
	all     string // decoded so far
	emitted int    // bytes of all already released
	matched string // the stop string found (the earliest)
}

func newStopper(tok *tokenizer.Tokenizer, stops []string) *stopper {
	if tok == nil {
		return nil
	}
	var ss []string
	for _, s := range stops {
		if s != "" {
			ss = append(ss, s)
		}
	}
	return &stopper{dec: tok.NewDecoder(), stops: ss}
}

// next adds a token and returns the text now safe to release, and whether
// a stop string was found (then the text ends before it).
func (s *stopper) next(id int32) (string, bool) {
	prev := len(s.all)
	s.all += s.dec.Next(id)
	maxStop := 0
	for _, st := range s.stops {
		maxStop = max(maxStop, len(st))
	}
	// A stop string not found before must end in the new text.
	from := max(0, prev-maxStop+1)
	cut := -1
	for _, st := range s.stops {
		if i := strings.Index(s.all[from:], st); i >= 0 && (cut < 0 || from+i < cut) {
			cut, s.matched = from+i, st
		}
	}
	if cut >= 0 {
		out := s.all[s.emitted:max(cut, s.emitted)]
		s.emitted = len(s.all)
		return out, true
	}
	// Hold back the longest suffix that is a proper prefix of a stop string.
	hold := 0
	for _, st := range s.stops {
		hold = max(hold, textutil.HeldPrefix(s.all, st))
	}
	end := max(len(s.all)-hold, s.emitted)
	out := s.all[s.emitted:end]
	s.emitted = end
	return out, false
}

// flush releases everything held back (the generation ended otherwise).
func (s *stopper) flush() string {
	s.all += s.dec.Flush()
	out := s.all[s.emitted:]
	s.emitted = len(s.all)
	return out
}

// PromptLogprobs scores a prompt: for each token after the first, its
// log-probability given the tokens before it and the top alternatives
// (the first token's event carries only its id and text). It runs on an
// ephemeral sequence that computes every position (cached blocks cannot
// give logits).
func (m *Manager) PromptLogprobs(ctx context.Context, owner Owner, model string, prompt []int32, top int) ([]TokenEvent, error) {
	if err := m.begin(); err != nil {
		return nil, err
	}
	defer m.end()
	e, err := m.engine(model)
	if err != nil {
		return nil, err
	}
	if err := e.checkTokens(prompt); err != nil {
		return nil, err
	}
	if len(prompt) > e.ctxLen {
		return nil, fmt.Errorf("%w: %d tokens, model %s allows %d", ErrContextLength, len(prompt), e.name, e.ctxLen)
	}
	if top < 0 || top > 20 {
		return nil, fmt.Errorf("%w: top logprobs must be in [0, 20]", ErrBadRequest)
	}
	sq, done, err := e.ephemeral(owner)
	if err != nil {
		return nil, err
	}
	defer done()
	text := func(id int32) string {
		if e.tok == nil {
			return ""
		}
		return e.tok.Decode([]int32{id})
	}
	out := make([]TokenEvent, len(prompt))
	for i, id := range prompt {
		out[i] = TokenEvent{ID: id, Text: text(id)}
	}
	const chunk = 16 // rows of logits held at once
	V := e.model.ModelConfig().VocabSize
	for lo := 0; lo < len(prompt)-1; lo += chunk {
		hi := min(lo+chunk, len(prompt)-1)
		var logits []float32
		err := e.submit(ctx, func() (err error) {
			logits, err = e.forward(sq, prompt, hi, models.AllLogits, passMarks{})
			return err
		})
		if err != nil {
			return nil, err
		}
		m.prefilled.Add(int64(hi - lo))
		for r := range hi - lo {
			pos := lo + r
			ev := &out[pos+1]
			ev.Logprob, ev.Top = logSoftmax(logits[r*V:(r+1)*V], ev.ID, top)
			for k := range ev.Top {
				ev.Top[k].Text = text(ev.Top[k].ID)
			}
		}
	}
	return out, nil
}
