package gateway

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// GET /v1/responses/{id}/input_items: a stored response's own input
// items (not those of the responses before it, nor its instructions), as
// the API lists them, a page at a time. They are kept with the response
// in the form they are listed in, each with the id the request gave it
// or one made when it was decoded, so that pages (after, before) name the
// same items across requests and restarts.

// listedItem is an input item as input_items lists it.
type listedItem struct {
	ID        string       `json:"id"`
	Type      string       `json:"type"`
	Status    string       `json:"status"`
	Role      string       `json:"role,omitempty"`
	Content   []listedText `json:"content,omitempty"`
	CallID    string       `json:"call_id,omitempty"`
	Name      string       `json:"name,omitempty"`
	Arguments *string      `json:"arguments,omitempty"`
	Output    *string      `json:"output,omitempty"`
}

type listedText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// listedMessage is a message item of role with text (an assistant's is
// output text, the others' input text).
func listedMessage(id, role, text string) listedItem {
	part := "input_text"
	if role == "assistant" {
		part = "output_text"
	}
	if id == "" {
		id = newID("msg")
	}
	return listedItem{ID: id, Type: "message", Status: "completed", Role: role, Content: []listedText{{Type: part, Text: text}}}
}

// listedCall is a function_call or function_call_output input item (one
// addCallItem accepted); output is the output's text.
func listedCall(it inputItem, output string) listedItem {
	l := listedItem{ID: it.ID, Type: it.Type, Status: "completed", CallID: it.CallID}
	if it.Type == "function_call_output" {
		l.Output = &output
		if l.ID == "" {
			l.ID = newID("fco")
		}
		return l
	}
	args := "{}"
	if it.Arguments != nil {
		args = *it.Arguments
	}
	l.Name, l.Arguments = it.Name, &args
	if l.ID == "" {
		l.ID = newID("fc")
	}
	return l
}

// itemsPage is the input_items list object.
type itemsPage struct {
	Object  string       `json:"object"`
	Data    []listedItem `json:"data"`
	FirstID *string      `json:"first_id"`
	LastID  *string      `json:"last_id"`
	HasMore bool         `json:"has_more"`
}

// pageItems is the page of items the query asks for: order "desc" (the
// default: the last item first) or "asc", limit 1–100 (20), after / before
// an item's id in that order.
func pageItems(items []listedItem, args *fasthttp.Args) (itemsPage, *apiError) {
	limit := 20
	if v := args.Peek("limit"); v != nil {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 100 {
			return itemsPage{}, badParam("limit", "limit: must be an integer from 1 to 100, got %q", v)
		}
		limit = n
	}
	items = slices.Clone(items)
	switch order := string(args.Peek("order")); order {
	case "", "desc":
		slices.Reverse(items)
	case "asc":
	default:
		return itemsPage{}, badParam("order", "order: must be asc or desc, got %q", order)
	}
	at := func(param string) (int, *apiError) {
		id := string(args.Peek(param))
		i := slices.IndexFunc(items, func(l listedItem) bool { return l.ID == id })
		if i < 0 {
			return 0, badParam(param, "%s: no input item %q in this response", param, id)
		}
		return i, nil
	}
	from, to := 0, len(items)
	if args.Has("after") {
		i, aerr := at("after")
		if aerr != nil {
			return itemsPage{}, aerr
		}
		from = i + 1
	}
	if args.Has("before") {
		i, aerr := at("before")
		if aerr != nil {
			return itemsPage{}, aerr
		}
		to = i
	}
	page := itemsPage{Object: "list", Data: []listedItem{}}
	if from < to {
		page.Data = items[from:min(to, from+limit)]
		page.HasMore = from+limit < to
		page.FirstID, page.LastID = &page.Data[0].ID, &page.Data[len(page.Data)-1].ID
	}
	return page, nil
}

// serveInputItems answers GET /v1/responses/{id}/input_items.
func (g *Gateway) serveInputItems(ctx *fasthttp.RequestCtx, owner session.Owner, id string) {
	if !ctx.IsGet() {
		ctx.Response.Header.Set("Allow", "GET")
		writeError(ctx, &apiError{status: fasthttp.StatusMethodNotAllowed, msg: "method " + string(ctx.Method()) + " not allowed; use GET"})
		return
	}
	r, ok := g.responses.get(g.docs(), owner, id)
	if !ok {
		writeError(ctx, &apiError{status: fasthttp.StatusNotFound, code: "not_found", param: "response_id",
			msg: fmt.Sprintf("no stored response %q", id)})
		return
	}
	page, aerr := pageItems(r.Input, ctx.QueryArgs())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	daemon.WriteJSON(ctx, fasthttp.StatusOK, page)
}
