package gateway

import (
	"container/list"
	"encoding/json"
	"errors"
	"sync"

	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// The stored Responses: what previous_response_id continues and GET
// returns, per owner, in memory and in the state directory.

// maxStoredResponses and maxStoredBytes bound the responses kept for
// previous_response_id and GET: each holds its whole conversation, so a
// long chat's responses hold its early turns many times over.
const (
	maxStoredResponses = 1024
	maxStoredBytes     = 64 << 20
)

// storedResponse is a response kept for previous_response_id and GET:
// the conversation it ended (without its instructions, which a
// continuation does not inherit) and the object as it was served. It is
// also the JSON document kept in the state directory.
type storedResponse struct {
	Owner    session.Owner       `json:"owner"`
	Model    string              `json:"model"`
	Messages []tokenizer.Message `json:"messages"`
	Input    []listedItem        `json:"input,omitempty"` // its own input items (responses_items.go)
	Object   json.RawMessage     `json:"response"`
	id       string
	elem     *list.Element
	bytes    int // the conversation's text, counted against maxStoredBytes
}

// responseDocs is where stored responses are kept durably: the session
// manager's documents (session/documents.go), beside the sessions, so
// that previous_response_id outlives a restart as a /v0 session does.
type responseDocs interface {
	PutDocument(kind, id string, data []byte, keep int, maxBytes int64) error
	Document(kind, id string) ([]byte, bool, error)
	DeleteDocument(kind, id string) (bool, error)
}

// responseDocKind is the stored responses' kind of document.
const responseDocKind = "responses"

// responseStore holds the stored responses: the latest in memory, the
// oldest dropped first, and every one written through to docs (when the
// daemon has a state directory), where a response no longer in memory
// (or from before a restart) is found again.
type responseStore struct {
	mu    sync.Mutex
	byID  map[string]*storedResponse
	order list.List // of ids, oldest first
	bytes int
}

// get finds owner's response id, in memory or in docs.
func (s *responseStore) get(docs responseDocs, owner session.Owner, id string) (*storedResponse, bool) {
	s.mu.Lock()
	r, ok := s.byID[id]
	s.mu.Unlock()
	if !ok && docs != nil {
		if b, found, err := docs.Document(responseDocKind, id); err == nil && found {
			var d storedResponse
			if json.Unmarshal(b, &d) == nil {
				d.id = id
				r, ok = &d, true
				s.remember(r)
			}
		}
	}
	if !ok || r.Owner != owner {
		return nil, false
	}
	return r, true
}

// put keeps r, in memory and in docs; an error is docs' (r is kept in
// memory all the same).
func (s *responseStore) put(docs responseDocs, r *storedResponse) error {
	s.remember(r)
	if docs == nil {
		return nil
	}
	b, err := json.Marshal(r)
	if err == nil {
		err = docs.PutDocument(responseDocKind, r.id, b, maxStoredResponses, maxStoredBytes)
	}
	if errors.Is(err, session.ErrNoStore) {
		return nil
	}
	return err
}

// remember keeps r in memory, dropping the oldest beyond the bounds.
func (s *responseStore) remember(r *storedResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*storedResponse{}
	}
	if old, ok := s.byID[r.id]; ok {
		s.drop(old)
	}
	r.bytes = len(r.Object)
	for _, m := range r.Messages {
		if text, ok := m.Content.(string); ok {
			r.bytes += len(text)
		}
	}
	for _, it := range r.Input {
		for _, c := range it.Content {
			r.bytes += len(c.Text)
		}
		if it.Output != nil {
			r.bytes += len(*it.Output)
		}
		if it.Arguments != nil {
			r.bytes += len(*it.Arguments)
		}
	}
	r.elem = s.order.PushBack(r.id)
	s.byID[r.id] = r
	s.bytes += r.bytes
	for s.order.Len() > maxStoredResponses || (s.bytes > maxStoredBytes && s.order.Len() > 1) {
		s.drop(s.byID[s.order.Front().Value.(string)])
	}
}

// drop forgets r in memory (s.mu held).
func (s *responseStore) drop(r *storedResponse) {
	s.order.Remove(r.elem)
	delete(s.byID, r.id)
	s.bytes -= r.bytes
}

// remove forgets owner's response id, in memory and in docs.
func (s *responseStore) remove(docs responseDocs, owner session.Owner, id string) (bool, error) {
	r, ok := s.get(docs, owner, id)
	if !ok {
		return false, nil
	}
	s.mu.Lock()
	if cur, ok := s.byID[id]; ok && cur == r {
		s.drop(r)
	}
	s.mu.Unlock()
	if docs == nil {
		return true, nil
	}
	_, err := docs.DeleteDocument(responseDocKind, id)
	return true, err
}

// docs is where stored responses are kept durably (nil before the
// session manager exists).
func (g *Gateway) docs() responseDocs {
	if m := g.srv.Sessions(); m != nil {
		return m
	}
	return nil
}
