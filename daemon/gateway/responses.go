package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's
// Responses API for text (what its newer clients and agents call by
// default). A request's input (a string, or messages with text parts),
// its instructions and, with previous_response_id, the conversation of a
// stored response before it are rendered with the model's chat template
// and run as a stateless chat completion: a continued conversation finds
// its earlier turns in the prefix cache, as a client that resends them
// would. Stored responses (store, the default) are kept per owner, the
// latest maxStoredResponses of them (and no more than maxStoredBytes), in
// memory and in the state directory's database, so that a conversation
// continues across restarts.
// Function tools are chat's (responses_tools.go). Not supported, and
// refused with a 400 naming the field: other tools, and input items other
// than text messages, function calls and their outputs.

// responsesRequest is POST /v1/responses.
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Stream             *bool             `json:"stream"`
	PreviousResponseID string            `json:"previous_response_id"`
	Store              *bool             `json:"store"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	Include           []string          `json:"include"`
	TopLogprobs       *int              `json:"top_logprobs"`
	Metadata          map[string]string `json:"metadata"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	Truncation        *string           `json:"truncation"`
	// Reasoning.effort "none" or "minimal" asks a thinking template not
	// to think (enable_thinking false, as Qwen3's templates take it);
	// other efforts think as the template does by default.
	Reasoning *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
}

// includeLogprobs is the include entry that asks for the output text's
// token logprobs. The API's other entries (reasoning.encrypted_content,
// which agents send with every request, and the built-in tools' results)
// name what this gateway never produces, so they are accepted and add
// nothing.
const includeLogprobs = "message.output_text.logprobs"

// responseObject is a Response as OpenAI's API returns it.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Error              *apiErrorBody     `json:"error"`
	IncompleteDetails  *incomplete       `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"` // responseReasoning, responseItem, functionCallItem
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	TopP               float64           `json:"top_p"`
	Text               json.RawMessage   `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopLogprobs        int               `json:"top_logprobs"`
	Truncation         string            `json:"truncation"`
	Usage              *responsesUsage   `json:"usage"`
	Metadata           map[string]string `json:"metadata"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

// apiErrorBody is a failed response's error.
type apiErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type responseItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string         `json:"type"`
	Text        string         `json:"text"`
	Annotations []any          `json:"annotations"`
	Logprobs    []tokenLogprob `json:"logprobs"`
}

type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// responsesJob is a decoded Responses request.
type responsesJob struct {
	*job
	input        []tokenizer.Message // this request's own messages
	items        []listedItem        // and its input items as input_items lists them
	instructions *string
	previous     string
	store        bool
	text         json.RawMessage // the request's text configuration, echoed
	temperature  float64
	topP         float64
	toolsEcho    []json.RawMessage // the request's tools and tool_choice, echoed
	choiceEcho   json.RawMessage
	metadata     map[string]string // echoed
	parallel     bool              // parallel_tool_calls, echoed
	truncate     bool              // truncation "auto" (responses_truncate.go)
}

// decodeResponses decodes a Responses request.
func decodeResponses(body []byte) (*responsesJob, *apiError) {
	var r responsesRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	j := &responsesJob{job: &job{model: r.Model, n: 1}, instructions: r.Instructions, previous: r.PreviousResponseID,
		store: r.Store == nil || *r.Store, temperature: 1, topP: 1, text: json.RawMessage(`{"format":{"type":"text"}}`)}
	j.params.Sampling.Temperature = 1
	if r.Temperature != nil {
		if *r.Temperature < 0 || *r.Temperature > 2 {
			return nil, badParam("temperature", "temperature: must be in [0, 2], got %v", *r.Temperature)
		}
		j.params.Sampling.Temperature, j.temperature = *r.Temperature, *r.Temperature
	}
	if r.TopP != nil {
		if !(*r.TopP > 0 && *r.TopP <= 1) {
			return nil, badParam("top_p", "top_p: must be in (0, 1], got %v", *r.TopP)
		}
		j.params.Sampling.TopP, j.topP = *r.TopP, *r.TopP
	}
	if r.MaxOutputTokens != nil {
		if *r.MaxOutputTokens < 1 {
			return nil, badParam("max_output_tokens", "max_output_tokens: must be at least 1, got %d", *r.MaxOutputTokens)
		}
		j.params.MaxTokens, j.maxTokensSet = *r.MaxOutputTokens, true
	}
	j.stream = r.Stream != nil && *r.Stream
	j.parallel = r.ParallelToolCalls == nil || *r.ParallelToolCalls
	j.params.Logprobs = slices.Contains(r.Include, includeLogprobs)
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > 20 {
			return nil, badParam("top_logprobs", "top_logprobs: must be in [0, 20], got %d", *r.TopLogprobs)
		}
		j.params.TopLogprobs = *r.TopLogprobs
		j.params.Logprobs = j.params.Logprobs || *r.TopLogprobs > 0
	}
	if aerr := checkMetadata(r.Metadata); aerr != nil {
		return nil, aerr
	}
	j.metadata = r.Metadata
	if j.metadata == nil {
		j.metadata = map[string]string{}
	}
	if r.Truncation != nil {
		switch *r.Truncation {
		case "auto":
			j.truncate = true
		case "disabled":
		default:
			return nil, badParam("truncation", "truncation: must be auto or disabled, got %q", *r.Truncation)
		}
	}
	if aerr := j.responsesTools(r.Tools, r.ToolChoice); aerr != nil {
		return nil, aerr
	}
	if r.Reasoning != nil && (r.Reasoning.Effort == "none" || r.Reasoning.Effort == "minimal") {
		if j.kwargs == nil {
			j.kwargs = map[string]any{}
		}
		j.kwargs["enable_thinking"] = false
	}
	msgs, items, aerr := responsesInput(r.Input)
	if aerr != nil {
		return nil, aerr
	}
	j.input, j.items = msgs, items
	if r.Text != nil && len(bytes.TrimSpace(r.Text.Format)) > 0 && string(bytes.TrimSpace(r.Text.Format)) != "null" {
		if aerr := textFormat(r.Text.Format, &j.params); aerr != nil {
			return nil, aerr
		}
		j.text, _ = json.Marshal(r.Text)
	}
	return j, nil
}

// checkMetadata refuses metadata the API would: more than 16 pairs, a
// key over 64 characters or a value over 512.
func checkMetadata(m map[string]string) *apiError {
	if len(m) > 16 {
		return badParam("metadata", "metadata: at most 16 pairs, got %d", len(m))
	}
	for k, v := range m {
		switch {
		case len(k) > 64:
			return badParam("metadata", "metadata: key %.20q... is over 64 characters", k)
		case len(v) > 512:
			return badParam("metadata", "metadata[%q]: value over 512 characters", k)
		}
	}
	return nil
}

// responsesInput reads input: a string (one user message) or a list of
// messages, each {"role", "content"} (with or without "type":
// "message"), content a string or a list of input_text / output_text
// parts, and function calls and their outputs (responses_tools.go);
// reasoning items are left out. It also returns the items as input_items
// lists them (responses_items.go).
func responsesInput(raw json.RawMessage) ([]tokenizer.Message, []listedItem, *apiError) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, nil, badParam("input", "input: missing")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, badParam("input", "input: %v", err)
		}
		return []tokenizer.Message{{Role: "user", Content: s}}, []listedItem{listedMessage("", "user", s)}, nil
	case raw[0] != '[':
		return nil, nil, badParam("input", "input: expected a string or a list of messages")
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, badParam("input", "input: expected a string or a list of messages")
	}
	if len(items) == 0 {
		return nil, nil, badParam("input", "input: must not be empty")
	}
	out := make([]tokenizer.Message, 0, len(items))
	listed := make([]listedItem, 0, len(items))
	for i, it := range items {
		p := fmt.Sprintf("input[%d]", i)
		if it.Type == "reasoning" {
			// Another model's reasoning, replayed by clients that keep the
			// whole context (its summary or encrypted content): nothing a
			// chat template renders, so it is left out, not refused.
			continue
		}
		if it.Type == "function_call" || it.Type == "function_call_output" {
			var aerr *apiError
			if out, aerr = addCallItem(out, it, p); aerr != nil {
				return nil, nil, aerr
			}
			output, _ := out[len(out)-1].Content.(string) // an output's tool message
			listed = append(listed, listedCall(it, output))
			continue
		}
		if it.Type != "" && it.Type != "message" {
			return nil, nil, badParam(p+".type", "%s.type: %q items are not supported, only messages with text and function calls and their outputs", p, it.Type)
		}
		role, ok := roles[it.Role]
		if !ok || role == "tool" {
			return nil, nil, badParam(p+".role", "%s.role: %q is not user, system, developer or assistant", p, it.Role)
		}
		text, aerr := responsesContent(it.Content, p)
		if aerr != nil {
			return nil, nil, aerr
		}
		out = append(out, tokenizer.Message{Role: role, Content: text})
		listed = append(listed, listedMessage(it.ID, it.Role, text))
	}
	if len(out) == 0 {
		return nil, nil, badParam("input", "input: only reasoning items, nothing to answer")
	}
	return out, listed, nil
}

// responsesContent is a message's text: a string, or its text parts
// joined.
func responsesContent(raw json.RawMessage, p string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badParam(p+".content", "%s.content: %v", p, err)
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		return "", badParam(p+".content", "%s.content: expected a string or a list of text parts", p)
	}
	var b strings.Builder
	for k, part := range parts {
		switch {
		case part.Text == nil, part.Type != "input_text" && part.Type != "output_text" && part.Type != "text":
			return "", badParam(fmt.Sprintf("%s.content[%d]", p, k), "%s.content[%d]: only text parts are supported, got type %q", p, k, part.Type)
		}
		b.WriteString(*part.Text)
	}
	return b.String(), nil
}

// textFormat reads text.format ("text", "json_object", or "json_schema"
// with its name, schema and strict flattened in) as chat's
// response_format.
func textFormat(raw json.RawMessage, p *session.GenerateParams) *apiError {
	var f struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return badParam("text.format", "text.format: expected an object")
	}
	chat := map[string]any{"type": f.Type}
	if f.Type == "json_schema" {
		chat["json_schema"] = map[string]any{"name": f.Name, "schema": f.Schema, "strict": f.Strict}
	}
	b, _ := json.Marshal(chat)
	if aerr := responseFormat(b, p); aerr != nil {
		aerr.param = "text.format"
		aerr.msg = strings.Replace(aerr.msg, "response_format", "text.format", 1)
		return aerr
	}
	return nil
}

func (g *Gateway) serveResponses(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	j, aerr := decodeResponses(ctx.PostBody())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	owner := g.owner(ctx)
	var history []tokenizer.Message
	var prevID *string
	if j.previous != "" {
		prev, ok := g.responses.get(g.docs(), owner, j.previous)
		if !ok {
			writeError(ctx, &apiError{status: fasthttp.StatusNotFound, code: "previous_response_not_found", param: "previous_response_id",
				msg: fmt.Sprintf("previous_response_id: no stored response %q (responses are kept in memory, the latest %d)", j.previous, maxStoredResponses)})
			return
		}
		if j.model == "" {
			j.model = prev.Model
		}
		history, prevID = prev.Messages, &j.previous
	}
	conversation := append(append([]tokenizer.Message{}, history...), j.input...)
	j.messages = conversation
	if j.instructions != nil {
		j.messages = append([]tokenizer.Message{{Role: "system", Content: *j.instructions}}, conversation...)
	}
	p, aerr := g.prepare(ctx, j.job, func(m *modelInfo, _ bool) ([]int32, *apiError) {
		if j.truncate {
			room := 1
			if j.maxTokensSet {
				room = j.params.MaxTokens
			}
			return j.truncatedPrompt(m, room)
		}
		return j.chatPrompt(m, "input")
	})
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	obj := responseObject{ID: newID("resp"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Instructions: j.instructions, Model: p.m.name, Output: []any{}, ParallelToolCalls: j.parallel,
		PreviousResponseID: prevID, Store: j.store, Temperature: j.temperature, TopP: j.topP, Text: j.text,
		ToolChoice: json.RawMessage(`"auto"`), Tools: []json.RawMessage{}, TopLogprobs: j.params.TopLogprobs,
		Truncation: "disabled", Metadata: j.metadata}
	if j.truncate {
		obj.Truncation = "auto"
	}
	if j.toolsEcho != nil {
		obj.Tools = j.toolsEcho
	}
	if j.choiceEcho != nil {
		obj.ToolChoice = j.choiceEcho
	}
	if j.maxTokensSet {
		obj.MaxOutputTokens = &j.params.MaxTokens
	}
	msgID, rsID := newID("msg"), newID("rs")
	var lps replyLogprobs // the reply's tokens' logprobs, when asked for
	finish := func(res session.GenerateResult) responseObject {
		done := obj
		done.Status = "completed"
		if res.FinishReason == "length" {
			done.Status, done.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
		}
		var reply tokenizer.Message
		done.Output, reply = replyItems(res, j, msgID, rsID, done.Status, lps)
		u := &responsesUsage{InputTokens: res.Usage.PromptTokens, OutputTokens: res.Usage.CompletionTokens,
			TotalTokens: res.Usage.PromptTokens + res.Usage.CompletionTokens}
		u.InputTokensDetails.CachedTokens = res.Usage.CachedTokens
		done.Usage = u
		if j.store {
			raw, _ := json.Marshal(done)
			r := &storedResponse{id: done.ID, Owner: owner, Model: p.m.name, Object: raw,
				Messages: append(slices.Clip(conversation), reply), Input: j.items}
			if err := g.responses.put(g.docs(), r); err != nil {
				g.srv.Logger().Warn("a stored response was not written to the state directory", "id", done.ID, "err", err)
			}
		}
		return done
	}
	if j.stream {
		var into *replyLogprobs
		if j.params.Logprobs {
			into = &lps
		}
		var rs *reasonSplit
		if j.reasoning && !j.tools {
			rs = newReasonSplit(j.thinkInside)
		}
		g.streamResponse(ctx, p, obj, msgID, rsID, j.tools, rs, start, into, finish)
		return
	}
	var onToken func(session.TokenEvent) error
	if j.params.Logprobs {
		onToken = func(ev session.TokenEvent) error {
			lps.add(p.m.chatLogprob(ev), ev.Text)
			return nil
		}
	}
	res, err := p.run(g.srv.RequestContext(), g.timed(p.m.name, start, 0, onToken))
	if err != nil {
		writeError(ctx, fromSession(err))
		return
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, finish(res))
}

// streamResponse replies with the Responses API's events: the response
// created and in progress; without tools the message item and its text
// part opened, a delta a token (with the logprobs of the tokens it
// holds, where lps is not nil: they are also gathered in lps), then the text,
// part and item done (after a thinking model's reasoning item, streamed
// the same way, where rs splits the reply: streamReasoning); with tools (whose calls are known only once the
// reply is parsed) every item of the reply, whole, after the generation;
// then the response completed or incomplete (response.failed after an
// error).
func (g *Gateway) streamResponse(ctx *fasthttp.RequestCtx, p *prepared, obj responseObject, msgID, rsID string, tools bool,
	rs *reasonSplit, start time.Time, lps *replyLogprobs, finish func(session.GenerateResult) responseObject) {
	gen, first, ok := g.startStream(ctx, p, start)
	if gen == nil {
		return
	}
	log := g.srv.Logger()
	daemon.StreamBody(ctx, log, func(w *bufio.Writer) {
		defer gen.cancel()
		ev := responseEvents{s: newSSE(w), w: w}
		gone := func() {
			gen.cancel()
			<-gen.done
			log.Debug("client went away during a responses stream", "id", obj.ID, "generated", len(gen.res.IDs))
		}
		if ev.send("response.created", map[string]any{"response": obj}) != nil ||
			ev.send("response.in_progress", map[string]any{"response": obj}) != nil {
			gone()
			return
		}
		// Without tools the message streams: at once, or, for a thinking
		// model (rs), after its reasoning item (streamReasoning).
		opened := !tools && rs == nil
		if opened && ev.openMessage(msgID, 0) != nil {
			gone()
			return
		}
		sr := streamReasoning{ev: &ev, id: rsID, msgID: msgID}
		held := 0 // tokens whose logprobs wait for a delta with text
		text := func(s string) error {
			if s == "" {
				return nil
			}
			if !opened {
				if err := sr.openMessage(); err != nil {
					return err
				}
				opened = true
			}
			mine := []tokenLogprob{}
			if lps != nil {
				mine, held = lps.lps[len(lps.lps)-held:], 0
			}
			return ev.send("response.output_text.delta", ev.at(msgID, sr.sent, map[string]any{"delta": s, "logprobs": mine}))
		}
		split := func(reasoning, content string) error {
			if rs.thinking() {
				held = 0 // the reasoning's tokens have no logprobs in the reply
			}
			if reasoning != "" {
				if err := sr.delta(reasoning); err != nil {
					return err
				}
			}
			return text(content)
		}
		for tok, more := first, ok; more; tok, more = gen.next() {
			if lps != nil {
				lps.add(p.m.chatLogprob(tok), tok.Text)
				held++
			}
			var err error
			switch {
			case rs != nil:
				err = split(rs.feed(tok.Text))
			case opened:
				err = text(tok.Text)
			}
			if err != nil {
				gone()
				return
			}
		}
		if rs != nil && split(rs.flush()) != nil {
			gone()
			return
		}
		if gen.err != nil {
			failed := obj
			failed.Status = "failed"
			e := fromSession(gen.err)
			failed.Error = &apiErrorBody{Code: e.code, Message: e.msg}
			ev.send("response.failed", map[string]any{"response": failed})
			return
		}
		done := finish(gen.res)
		for i, item := range done.Output {
			var err error
			switch {
			case i < sr.sent: // the reasoning item, sent whole
			case sr.open && i == 0:
				err = sr.close(item)
			default:
				err = ev.item(i, item, !opened || i != sr.sent)
			}
			if err != nil {
				gone()
				return
			}
		}
		kind := "response.completed"
		if done.Status == "incomplete" {
			kind = "response.incomplete"
		}
		ev.send(kind, map[string]any{"response": done})
	})
}

// responseEvents writes a response's stream events, numbered.
type responseEvents struct {
	s   *sse
	w   *bufio.Writer
	seq int
}

func (e *responseEvents) send(typ string, fields map[string]any) error {
	fields["type"], fields["sequence_number"] = typ, e.seq
	e.seq++
	e.w.WriteString("event: " + typ + "\n")
	return e.s.event(fields)
}

// at is fields with the position of output item index's first content
// part.
func (e *responseEvents) at(itemID string, index int, fields map[string]any) map[string]any {
	fields["item_id"], fields["output_index"], fields["content_index"] = itemID, index, 0
	return fields
}

func textPart(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []tokenLogprob{}}
}

// openMessage announces the message item (output index) and its empty
// text part, before the deltas.
func (e *responseEvents) openMessage(msgID string, index int) error {
	opening := responseItem{Type: "message", ID: msgID, Status: "in_progress", Role: "assistant", Content: []outputText{}}
	if err := e.send("response.output_item.added", map[string]any{"output_index": index, "item": opening}); err != nil {
		return err
	}
	return e.send("response.content_part.added", e.at(msgID, index, map[string]any{"part": textPart("")}))
}

// item sends output item index done; announce first sends it added (and a
// message's text as one delta), where it was not streamed.
func (e *responseEvents) item(index int, item any, announce bool) error {
	switch it := item.(type) {
	case responseItem:
		part := it.Content[0]
		if announce {
			if err := e.openMessage(it.ID, index); err != nil {
				return err
			}
			if err := e.send("response.output_text.delta", e.at(it.ID, index, map[string]any{"delta": part.Text, "logprobs": part.Logprobs})); err != nil {
				return err
			}
		}
		if err := e.send("response.output_text.done", e.at(it.ID, index, map[string]any{"text": part.Text, "logprobs": part.Logprobs})); err != nil {
			return err
		}
		if err := e.send("response.content_part.done", e.at(it.ID, index, map[string]any{"part": part})); err != nil {
			return err
		}
	case responseReasoning: // (announced: a reasoning item streams only without tools)
		sr := streamReasoning{ev: e, id: it.ID}
		if err := sr.delta(it.Content[0].Text); err != nil {
			return err
		}
		return sr.close(it)
	case functionCallItem:
		opening := it
		opening.Status, opening.Arguments = "in_progress", ""
		if err := e.send("response.output_item.added", map[string]any{"output_index": index, "item": opening}); err != nil {
			return err
		}
		if err := e.send("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": index, "delta": it.Arguments}); err != nil {
			return err
		}
		if err := e.send("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": index, "arguments": it.Arguments}); err != nil {
			return err
		}
	}
	return e.send("response.output_item.done", map[string]any{"output_index": index, "item": item})
}

// streamReasoning streams a thinking model's reasoning item (output 0)
// before its message: opened at the first reasoning text, a
// reasoning_text delta each piece, closed when the message opens (at
// output 1) or at the end.
type streamReasoning struct {
	ev        *responseEvents
	id, msgID string
	open      bool // the reasoning item is open
	// sent counts the leading output items sent whole: 1 once the
	// reasoning item closed. It is also the message's output index.
	sent int
	text strings.Builder
}

func (s *streamReasoning) delta(t string) error {
	if !s.open {
		if err := s.ev.send("response.output_item.added", map[string]any{"output_index": 0,
			"item": responseReasoning{Type: "reasoning", ID: s.id, Summary: []any{}, Content: []reasoningText{}, Status: "in_progress"}}); err != nil {
			return err
		}
		if err := s.ev.send("response.content_part.added", s.ev.at(s.id, 0, map[string]any{"part": reasoningText{Type: "reasoning_text"}})); err != nil {
			return err
		}
		s.open = true
	}
	s.text.WriteString(t)
	return s.ev.send("response.reasoning_text.delta", s.ev.at(s.id, 0, map[string]any{"delta": t}))
}

// openMessage opens the message after the reasoning, closing that.
func (s *streamReasoning) openMessage() error {
	if s.open {
		if err := s.close(reasoningItem(s.id, s.text.String(), "completed")); err != nil {
			return err
		}
	}
	return s.ev.openMessage(s.msgID, s.sent)
}

// close ends the open reasoning item (item: the reply's, or as streamed).
func (s *streamReasoning) close(item any) error {
	s.open, s.sent = false, 1
	part := reasoningText{Type: "reasoning_text", Text: s.text.String()}
	if err := s.ev.send("response.reasoning_text.done", s.ev.at(s.id, 0, map[string]any{"text": part.Text})); err != nil {
		return err
	}
	if err := s.ev.send("response.content_part.done", s.ev.at(s.id, 0, map[string]any{"part": part})); err != nil {
		return err
	}
	return s.ev.send("response.output_item.done", map[string]any{"output_index": 0, "item": item})
}

// serveResponse answers GET /v1/responses/{id} (a stored response),
// DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items.
func (g *Gateway) serveResponse(ctx *fasthttp.RequestCtx) {
	id := strings.TrimPrefix(string(ctx.Path()), "/v1/responses/")
	owner := g.owner(ctx)
	if rid, ok := strings.CutSuffix(id, "/input_items"); ok {
		g.serveInputItems(ctx, owner, rid)
		return
	}
	notFound := &apiError{status: fasthttp.StatusNotFound, code: "not_found", param: "response_id",
		msg: fmt.Sprintf("no stored response %q", id)}
	switch {
	case ctx.IsGet():
		r, ok := g.responses.get(g.docs(), owner, id)
		if !ok {
			writeError(ctx, notFound)
			return
		}
		daemon.WriteJSON(ctx, fasthttp.StatusOK, r.Object)
	case ctx.IsDelete():
		found, err := g.responses.remove(g.docs(), owner, id)
		if err != nil {
			writeError(ctx, &apiError{status: fasthttp.StatusInternalServerError, msg: fmt.Sprintf("delete response %s: %v", id, err)})
			return
		}
		if !found {
			writeError(ctx, notFound)
			return
		}
		daemon.WriteJSON(ctx, fasthttp.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
	default:
		ctx.Response.Header.Set("Allow", "GET, DELETE")
		writeError(ctx, &apiError{status: fasthttp.StatusMethodNotAllowed, msg: "method " + string(ctx.Method()) + " not allowed; use GET or DELETE"})
	}
}
