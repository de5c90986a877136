package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestOpenAIGoResponses drives /v1/responses with the official Go client:
// a response, the same one streamed (the same text and usage, greedy),
// a continuation by previous_response_id that finds the first turn in the
// prefix cache and answers as the whole conversation resent would, and
// GET and DELETE of stored responses.
func TestOpenAIGoResponses(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:           "demo",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
		Instructions:    openai.String("You are terse."),
		MaxOutputTokens: openai.Int(10),
		Temperature:     openai.Float(0),
	}
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Object != "response" || res.Model != "demo" || !strings.HasPrefix(res.ID, "resp-") || len(res.Output) != 1 ||
		res.Output[0].Type != "message" || res.Output[0].Role != "assistant" {
		t.Fatalf("response %+v", res)
	}
	if res.Status != "completed" && !(res.Status == "incomplete" && res.IncompleteDetails.Reason == "max_output_tokens") {
		t.Fatalf("status %q, %+v", res.Status, res.IncompleteDetails)
	}
	u := res.Usage
	if u.OutputTokens < 1 || u.OutputTokens > 10 || u.InputTokens < 5 || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Fatalf("usage %+v", u)
	}
	text := res.OutputText()

	stream := c.Responses.NewStreaming(ctx, params)
	var deltas strings.Builder
	var completed *responses.Response
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			r := ev.Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if completed == nil || deltas.String() != text || completed.OutputText() != text || completed.Usage.OutputTokens != u.OutputTokens {
		t.Fatalf("streamed %q (events %v), final %+v; plain %q", deltas.String(), types, completed, text)
	}
	if types[0] != "response.created" || types[1] != "response.in_progress" || types[2] != "response.output_item.added" {
		t.Fatalf("event order %v", types)
	}

	// The next turn by previous_response_id: its prompt is the first
	// turn's conversation (instructions are not inherited: this client
	// sends them again, as most do) and the new input.
	next, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("And again.")},
		Instructions:       openai.String("You are terse."),
		PreviousResponseID: openai.String(res.ID),
		MaxOutputTokens:    openai.Int(6),
		Temperature:        openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.Model != "demo" || next.PreviousResponseID != res.ID || next.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Fatalf("continuation %+v (usage %+v)", next, next.Usage)
	}
	resent, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Say hello.", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfMessage(text, responses.EasyInputMessageRoleAssistant),
			responses.ResponseInputItemParamOfMessage("And again.", responses.EasyInputMessageRoleUser),
		}},
		Instructions:    openai.String("You are terse."),
		MaxOutputTokens: openai.Int(6),
		Temperature:     openai.Float(0),
		Store:           openai.Bool(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resent.OutputText() != next.OutputText() || resent.Usage.InputTokens != next.Usage.InputTokens {
		t.Fatalf("resent conversation %q (%d input tokens), continued %q (%d)", resent.OutputText(), resent.Usage.InputTokens,
			next.OutputText(), next.Usage.InputTokens)
	}

	got, err := c.Responses.Get(ctx, next.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != next.OutputText() {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if _, err := c.Responses.Get(ctx, resent.ID, responses.ResponseGetParams{}); err == nil {
		t.Fatal("a response made with store false was stored")
	}
	if err := c.Responses.Delete(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
	var apiErr *openai.Error
	if _, err := c.Responses.Get(ctx, next.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestResponsesRefusals: what /v1/responses does not do is a 400 (or a
// 404 for an unknown previous response) naming the field.
func TestResponsesRefusals(t *testing.T) {
	d := sharedDaemon(t)
	for _, tc := range []struct {
		body   string
		status int
		param  string
	}{
		{`{"model":"demo"}`, 400, "input"},
		{`{"model":"demo","input":[]}`, 400, "input"},
		{`{"model":"demo","input":5}`, 400, "input"},
		{`{"model":"demo","input":"hi","tools":[{"type":"web_search"}]}`, 400, "tools[0].type"},
		{`{"model":"demo","input":"hi","tools":[{"type":"function"}]}`, 400, "tools[0].name"},
		{`{"model":"demo","input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice"},
		{`{"model":"demo","input":[{"type":"function_call_output","output":"y"}]}`, 400, "input[0].call_id"},
		{`{"model":"demo","input":[{"type":"function_call","call_id":"c"}]}`, 400, "input[0].name"},
		{`{"model":"demo","input":[{"type":"computer_call","call_id":"c"}]}`, 400, "input[0].type"},
		{`{"model":"demo","input":[{"type":"reasoning","summary":[]}]}`, 400, "input"},
		{`{"model":"demo","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, 400, "input[0].content[0]"},
		{`{"model":"demo","input":[{"role":"tool","content":"x"}]}`, 400, "input[0].role"},
		{`{"model":"demo","input":"hi","temperature":3}`, 400, "temperature"},
		{`{"model":"demo","input":"hi","max_output_tokens":0}`, 400, "max_output_tokens"},
		{`{"model":"demo","input":"hi","text":{"format":{"type":"yaml"}}}`, 400, "text.format"},
		{`{"model":"demo","input":"hi","previous_response_id":"resp-none"}`, 404, "previous_response_id"},
		{`{"model":"nope","input":"hi"}`, 404, "model"},
	} {
		status, raw := do(t, d.tcp, "POST", d.base+"/v1/responses", []byte(tc.body))
		var eb struct {
			Error struct {
				Message string `json:"message"`
				Param   string `json:"param"`
			} `json:"error"`
		}
		json.Unmarshal(raw, &eb)
		if status != tc.status || eb.Error.Param != tc.param || eb.Error.Message == "" {
			t.Errorf("%s: %d %+v, want %d naming %s", tc.body, status, eb.Error, tc.status, tc.param)
		}
	}
}

// TestResponsesJSONSchema: text.format json_schema holds the reply to the
// schema, as chat's response_format does.
func TestResponsesJSONSchema(t *testing.T) {
	d := sharedDaemon(t)
	body := `{"model":"demo","input":"JSON please","max_output_tokens":200,"temperature":0,
		"text":{"format":{"type":"json_schema","name":"r","strict":true,
		"schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}}}}`
	r := postResponse(t, d, body)
	var v struct{ OK *bool }
	if r.Status != "completed" || json.Unmarshal([]byte(r.OutputText()), &v) != nil || v.OK == nil {
		t.Fatalf("status %s, text %q", r.Status, r.OutputText())
	}
}

// TestOpenAIGoResponsesTools: function tools on /v1/responses, with the
// scripted demo model of the chat tool tests: a call comes back as a
// function_call item (plain and streamed), forced by tool_choice too, and
// the conversation goes on by previous_response_id with the call's output
// as a function_call_output item, rendered into the prompt as the
// template's tool response.
func TestOpenAIGoResponsesTools(t *testing.T) {
	d, sr := startScripted(t)
	defer d.stop(t)
	c := goClient(d)
	ctx := context.Background()
	call := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	ids := byteIDs(call)
	sr.script.Store(&ids)
	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
		Name:        "get_weather",
		Description: openai.String("The weather in a city."),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required": []string{"city"}},
		Strict: openai.Bool(false),
	}}
	for _, choice := range []responses.ResponseNewParamsToolChoiceUnion{
		{},
		{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
		{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}},
	} {
		params := responses.ResponseNewParams{
			Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")},
			Tools: []responses.ToolUnionParam{tool}, ToolChoice: choice, MaxOutputTokens: openai.Int(200), Temperature: openai.Float(0),
		}
		res, err := c.Responses.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Output) != 1 || res.Output[0].Type != "function_call" || res.Output[0].Name != "get_weather" ||
			res.Output[0].Arguments.OfString != `{"city": "Paris"}` || res.Output[0].CallID == "" || res.Status != "completed" {
			t.Fatalf("tool_choice %+v: output %s", choice, res.RawJSON())
		}
		stream := c.Responses.NewStreaming(ctx, params)
		var args string
		var final *responses.Response
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "response.function_call_arguments.done":
				args = ev.Arguments
			case "response.completed":
				r := ev.Response
				final = &r
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if args != `{"city": "Paris"}` || final == nil || len(final.Output) != 1 || final.Output[0].Type != "function_call" {
			t.Fatalf("streamed: arguments %q, final %+v", args, final)
		}
	}

	// The call's result goes back by previous_response_id.
	first, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")},
		Tools: []responses.ToolUnionParam{tool}, MaxOutputTokens: openai.Int(200), Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	sunny := byteIDs("Sunny.")
	sr.script.Store(&sunny)
	next, err := c.Responses.New(ctx, responses.ResponseNewParams{
		PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(first.Output[0].CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("18 C, sunny")}}},
		}},
		Tools: []responses.ToolUnionParam{tool}, MaxOutputTokens: openai.Int(200), Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.OutputText() != "Sunny." {
		t.Fatalf("after the tool's output: %s", next.RawJSON())
	}
	prompt := string(bytesOf(sr.hist))
	if !strings.Contains(prompt, "<tool_response>\n18 C, sunny\n</tool_response>") || !strings.Contains(prompt, `"name": "get_weather"`) {
		t.Fatalf("the continued prompt lacks the call or its output:\n%s", prompt)
	}
	items, err := c.Responses.InputItems.List(ctx, next.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(items.Data) != 1 || items.Data[0].Type != "function_call_output" || items.Data[0].CallID != first.Output[0].CallID ||
		items.Data[0].Output.OfString != "18 C, sunny" || items.Data[0].ID == "" {
		t.Fatalf("the continuation's input items: %s", items.RawJSON())
	}
}

// TestOpenAIGoResponsesToolLogprobs: with tools and
// message.output_text.logprobs, the message before a call carries the
// logprobs of the tokens that wrote its text, plain and streamed, and the
// call's tokens none.
func TestOpenAIGoResponsesToolLogprobs(t *testing.T) {
	d, sr := startScripted(t)
	defer d.stop(t)
	c := goClient(d)
	ctx := context.Background()
	const say = "Let me check."
	ids := byteIDs(say + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
	sr.script.Store(&ids)
	params := responses.ResponseNewParams{
		Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
			Strict:     openai.Bool(false)}}},
		MaxOutputTokens: openai.Int(200), Temperature: openai.Float(0),
		Include: []responses.ResponseIncludable{"message.output_text.logprobs"},
	}
	check := func(how string, out []responses.ResponseOutputItemUnion) {
		t.Helper()
		if len(out) != 2 || out[0].Type != "message" || out[1].Type != "function_call" || out[1].Name != "get_weather" {
			t.Fatalf("%s: output %+v", how, out)
		}
		part := out[0].Content[0]
		var text strings.Builder
		for _, lp := range part.Logprobs {
			if lp.Logprob > 0 {
				t.Fatalf("%s: logprob %+v", how, lp)
			}
			text.WriteString(lp.Token)
		}
		if part.Text != say || text.String() != say {
			t.Fatalf("%s: text %q, its logprobs' tokens %q", how, part.Text, text.String())
		}
	}
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	check("plain", res.Output)
	stream := c.Responses.NewStreaming(ctx, params)
	var final *responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			r := ev.Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil || final == nil {
		t.Fatalf("stream: %v, final %v", err, final)
	}
	check("streamed", final.Output)
}

// bytesOf is the text of the demo tokenizer's byte ids (others dropped).
func bytesOf(ids []int32) []byte {
	var out []byte
	for _, id := range ids {
		if id >= 0 && id < 256 {
			out = append(out, byte(id))
		}
	}
	return out
}

// TestResponsesSurviveRestart: with a state directory, a stored response
// is found after the daemon restarts (GET, and previous_response_id
// continues its conversation); a deleted one stays deleted.
func TestResponsesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, daemonOpts{stateDir: dir})
	c := goClient(d)
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi.")},
		MaxOutputTokens: openai.Int(4), Temperature: openai.Float(0)}
	kept, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Responses.InputItems.List(ctx, kept.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Responses.Delete(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	d.stop(t)

	d = startDaemon(t, daemonOpts{stateDir: dir})
	defer d.stop(t)
	c = goClient(d)
	got, err := c.Responses.Get(ctx, kept.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != kept.OutputText() || got.Usage.OutputTokens != kept.Usage.OutputTokens {
		t.Fatalf("after a restart: %+v, %v", got, err)
	}
	if _, err := c.Responses.Get(ctx, gone.ID, responses.ResponseGetParams{}); err == nil {
		t.Fatal("a deleted response came back after a restart")
	}
	after, err := c.Responses.InputItems.List(ctx, kept.ID, responses.InputItemListParams{})
	if err != nil || after.RawJSON() != before.RawJSON() || len(after.Data) != 1 {
		t.Fatalf("input items after a restart: %s (before it %s), %v", after.RawJSON(), before.RawJSON(), err)
	}
	next, err := c.Responses.New(ctx, responses.ResponseNewParams{PreviousResponseID: openai.String(kept.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Again.")}, MaxOutputTokens: openai.Int(4), Temperature: openai.Float(0)})
	if err != nil || next.PreviousResponseID != kept.ID {
		t.Fatalf("continued after a restart: %+v, %v", next, err)
	}
}

// TestResponsesSkipReasoning: reasoning items a client replays with the
// conversation are left out of the prompt, not refused.
func TestResponsesSkipReasoning(t *testing.T) {
	d := sharedDaemon(t)
	body := `{"model":"demo","max_output_tokens":2,"input":[{"role":"user","content":"a"},
		{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"thinking"}]},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]},{"role":"user","content":"c"}]}`
	plain := `{"model":"demo","max_output_tokens":2,"input":[{"role":"user","content":"a"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]},{"role":"user","content":"c"}]}`
	if a, b := postResponse(t, d, body).Usage.InputTokens, postResponse(t, d, plain).Usage.InputTokens; a != b {
		t.Fatalf("with a reasoning item %d input tokens, without %d", a, b)
	}
}

// postResponse posts a raw /v1/responses body and decodes its 200 reply.
func postResponse(t *testing.T, d *testDaemon, body string) responses.Response {
	t.Helper()
	status, raw := do(t, d.tcp, "POST", d.base+"/v1/responses", []byte(body))
	var r responses.Response
	if err := json.Unmarshal(raw, &r); err != nil || status != 200 {
		t.Fatalf("%d %v: %s", status, err, raw)
	}
	return r
}

// TestOpenAIGoResponsesInputItems: a stored response lists its own input
// items (not the previous response's, nor its instructions) through the
// official client, newest first by default, a page at a time in either
// order; ids given in the request are kept; bad queries are 400s naming
// the parameter.
func TestOpenAIGoResponsesInputItems(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	res, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfInputMessage: &responses.ResponseInputItemMessageParam{Role: "developer",
				Content: responses.ResponseInputMessageContentListParam{responses.ResponseInputContentParamOfInputText("Be brief.")}}},
			responses.ResponseInputItemParamOfMessage("Say hello.", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfMessage("Hello.", responses.EasyInputMessageRoleAssistant),
			responses.ResponseInputItemParamOfMessage("And again.", responses.EasyInputMessageRoleUser),
		}},
		Instructions:    openai.String("You are terse."),
		MaxOutputTokens: openai.Int(4),
		Temperature:     openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	type item struct{ role, part, text string }
	want := []item{{"developer", "input_text", "Be brief."}, {"user", "input_text", "Say hello."},
		{"assistant", "output_text", "Hello."}, {"user", "input_text", "And again."}}
	got := func(it responses.ResponseItemUnion) item {
		var m struct {
			Content []struct{ Type, Text string }
		}
		if err := json.Unmarshal([]byte(it.RawJSON()), &m); err != nil || it.Type != "message" || len(m.Content) != 1 ||
			it.ID == "" || it.Status != "completed" {
			t.Fatalf("item %s", it.RawJSON())
		}
		return item{it.Role, m.Content[0].Type, m.Content[0].Text}
	}

	page, err := c.Responses.InputItems.List(ctx, res.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 4 || page.HasMore {
		t.Fatalf("default page %s", page.RawJSON())
	}
	for i, it := range page.Data { // newest first
		if g := got(it); g != want[3-i] {
			t.Fatalf("desc item %d: %+v, want %+v", i, g, want[3-i])
		}
	}
	var ids []string
	pager := c.Responses.InputItems.ListAutoPaging(ctx, res.ID, responses.InputItemListParams{Limit: openai.Int(1), Order: "asc"})
	for pager.Next() {
		if g := got(pager.Current()); len(ids) >= 4 || g != want[len(ids)] {
			t.Fatalf("asc item %d: %+v", len(ids), g)
		}
		ids = append(ids, pager.Current().ID)
	}
	if err := pager.Err(); err != nil || len(ids) != 4 {
		t.Fatalf("paged %d items: %v", len(ids), err)
	}
	if ids[1] == ids[3] || ids[0] != page.Data[3].ID {
		t.Fatalf("ids %v, desc page's last %s", ids, page.Data[3].ID)
	}

	// A page before an item (raw: this client version has no "before").
	status, raw := do(t, d.tcp, "GET", d.base+"/v1/responses/"+res.ID+"/input_items?order=asc&limit=1&before="+ids[2], nil)
	var p struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
		HasMore bool   `json:"has_more"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || status != 200 || len(p.Data) != 1 || p.Data[0].ID != ids[0] ||
		p.FirstID != ids[0] || p.LastID != ids[0] || !p.HasMore {
		t.Fatalf("before %s: %d %s", ids[2], status, raw)
	}

	// A continuation lists only its own input, with the id it was given.
	next := postResponse(t, d, `{"previous_response_id":"`+res.ID+`","max_output_tokens":2,
		"input":[{"id":"msg_given","role":"user","content":[{"type":"input_text","text":"More."}]}]}`)
	status, raw = do(t, d.tcp, "GET", d.base+"/v1/responses/"+next.ID+"/input_items", nil)
	if status != 200 || strings.Count(string(raw), `"type":"message"`) != 1 ||
		!strings.Contains(string(raw), `"id":"msg_given","type":"message","status":"completed","role":"user","content":[{"type":"input_text","text":"More."}]`) {
		t.Fatalf("continuation's items: %d %s", status, raw)
	}

	for _, tc := range []struct {
		method, query string
		status        int
		param         string
	}{
		{"GET", "?limit=0", 400, "limit"}, {"GET", "?limit=101", 400, "limit"}, {"GET", "?limit=x", 400, "limit"},
		{"GET", "?order=sideways", 400, "order"}, {"GET", "?after=msg-nope", 400, "after"}, {"GET", "?before=", 400, "before"},
		{"POST", "", 405, ""},
	} {
		status, raw := do(t, d.tcp, tc.method, d.base+"/v1/responses/"+res.ID+"/input_items"+tc.query, nil)
		if status != tc.status || !strings.Contains(string(raw), `"param":"`+tc.param+`"`) && tc.param != "" {
			t.Errorf("%s %s: %d %s", tc.method, tc.query, status, raw)
		}
	}
	if status, raw := do(t, d.tcp, "GET", d.base+"/v1/responses/resp-nope/input_items", nil); status != 404 {
		t.Errorf("unknown response: %d %s", status, raw)
	}
}

// TestOpenAIGoResponsesLogprobs: include message.output_text.logprobs
// (with top_logprobs) gives each output token's logprob on the message's
// text part and on the stream's deltas, the same tokens both ways (greedy);
// metadata, top_logprobs and parallel_tool_calls are echoed; an agent's
// include of reasoning.encrypted_content is accepted; out-of-range values
// are 400s naming the field.
func TestOpenAIGoResponsesLogprobs(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:             "demo",
		Input:             responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
		MaxOutputTokens:   openai.Int(6),
		Temperature:       openai.Float(0),
		TopLogprobs:       openai.Int(2),
		Include:           []responses.ResponseIncludable{"message.output_text.logprobs", "reasoning.encrypted_content"},
		Metadata:          map[string]string{"ticket": "42"},
		ParallelToolCalls: openai.Bool(false),
	}
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata["ticket"] != "42" || res.TopLogprobs != 2 || res.ParallelToolCalls {
		t.Fatalf("echo: metadata %v, top_logprobs %d, parallel_tool_calls %v", res.Metadata, res.TopLogprobs, res.ParallelToolCalls)
	}
	part := res.Output[0].Content[0]
	lps := part.Logprobs
	if len(lps) != int(res.Usage.OutputTokens) || len(lps) == 0 {
		t.Fatalf("%d logprobs for %d output tokens: %s", len(lps), res.Usage.OutputTokens, res.RawJSON())
	}
	var text strings.Builder
	for _, lp := range lps {
		if len(lp.TopLogprobs) != 2 || lp.Logprob > 0 || lp.TopLogprobs[0].Logprob < lp.Logprob {
			t.Fatalf("logprob %+v", lp)
		}
		text.WriteString(lp.Token)
	}
	if text.String() != part.Text {
		t.Fatalf("tokens %q, text %q", text.String(), part.Text)
	}

	stream := c.Responses.NewStreaming(ctx, params)
	var streamed []string
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.output_text.delta" {
			for _, lp := range ev.AsResponseOutputTextDelta().Logprobs {
				streamed = append(streamed, lp.Token)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(streamed) != len(lps) || strings.Join(streamed, "") != part.Text {
		t.Fatalf("streamed logprobs' tokens %q, plain %q", streamed, part.Text)
	}

	// Without include, no logprobs.
	plain, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "demo",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")}, MaxOutputTokens: openai.Int(3)})
	if err != nil || len(plain.Output[0].Content[0].Logprobs) != 0 {
		t.Fatalf("logprobs not asked for: %v %s", err, plain.RawJSON())
	}

	many := `{`
	for i := range 17 {
		if i > 0 {
			many += ","
		}
		many += fmt.Sprintf(`"k%d":"v"`, i)
	}
	many += `}`
	for _, tc := range []struct{ body, param string }{
		{`{"model":"demo","input":"x","top_logprobs":21}`, "top_logprobs"},
		{`{"model":"demo","input":"x","metadata":` + many + `}`, "metadata"},
		{`{"model":"demo","input":"x","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, "metadata"},
	} {
		status, raw := do(t, d.tcp, "POST", d.base+"/v1/responses", []byte(tc.body))
		if status != 400 || !strings.Contains(string(raw), `"param":"`+tc.param+`"`) {
			t.Errorf("%.60s: %d %s", tc.body, status, raw)
		}
	}
}

// TestResponsesTruncation: a conversation past the model's context fails
// with context_length_exceeded by default ("disabled"); with truncation
// "auto" its oldest turns are dropped until it fits, the reply comes, and
// the response says "auto".
func TestResponsesTruncation(t *testing.T) {
	d := sharedDaemon(t)
	long := strings.Repeat("lorem ipsum ", 500) // the demo model's context is 8192 tokens
	var items []string
	for i := range 4 {
		items = append(items, fmt.Sprintf(`{"role":"user","content":"%d %s"}`, i, long), `{"role":"assistant","content":"ok"}`)
	}
	items = append(items, `{"role":"user","content":"And now?"}`)
	body := func(truncation string) []byte {
		return []byte(`{"model":"demo","max_output_tokens":4,"instructions":"Be brief.","truncation":"` + truncation +
			`","input":[` + strings.Join(items, ",") + `]}`)
	}
	status, raw := do(t, d.tcp, "POST", d.base+"/v1/responses", body("disabled"))
	if status != 400 || !strings.Contains(string(raw), "context_length_exceeded") {
		t.Fatalf("disabled: %d %s", status, raw)
	}
	status, raw = do(t, d.tcp, "POST", d.base+"/v1/responses", body("auto"))
	var r responses.Response
	if err := json.Unmarshal(raw, &r); err != nil || status != 200 {
		t.Fatalf("auto: %d %v %s", status, err, raw)
	}
	if r.Truncation != "auto" || r.Usage.InputTokens >= 8192 || r.Usage.InputTokens < 4000 || r.Usage.OutputTokens < 1 {
		t.Fatalf("auto: truncation %q, usage %+v", r.Truncation, r.Usage)
	}
	// Its last turn alone past the context still fails.
	status, raw = do(t, d.tcp, "POST", d.base+"/v1/responses",
		[]byte(`{"model":"demo","truncation":"auto","input":"`+strings.Repeat(long, 2)+`"}`))
	if status != 400 || !strings.Contains(string(raw), "context_length_exceeded") {
		t.Fatalf("a last turn past the context: %d %.200s", status, raw)
	}
	if status, raw := do(t, d.tcp, "POST", d.base+"/v1/responses", []byte(`{"model":"demo","input":"x","truncation":"middle"}`)); status != 400 ||
		!strings.Contains(string(raw), `"param":"truncation"`) {
		t.Fatalf("truncation middle: %d %s", status, raw)
	}
}
