package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/models/tokenizer"
	"github.com/pocketllm/pocketllm/session"
)

// TestResponseStoreBounds: the store keeps the latest responses up to its
// count and its bytes, per owner, and forgets removed ones (in memory: no
// state directory).
func TestResponseStoreBounds(t *testing.T) {
	var s responseStore
	put := func(id string, owner uint32, size int) {
		s.put(nil, &storedResponse{id: id, Owner: session.Owner(owner),
			Messages: []tokenizer.Message{{Role: "user", Content: strings.Repeat("x", size)}}})
	}
	for i := range maxStoredResponses + 10 {
		put(fmt.Sprint(i), 1, 10)
	}
	if _, ok := s.get(nil, 1, "9"); ok {
		t.Fatal("the oldest responses past the count were kept")
	}
	if _, ok := s.get(nil, 1, "10"); !ok {
		t.Fatal("a response within the count was dropped")
	}
	if _, ok := s.get(nil, 2, "10"); ok {
		t.Fatal("another owner's response was found")
	}
	if found, _ := s.remove(nil, 2, "10"); found {
		t.Fatal("remove: another owner's succeeded")
	}
	if found, _ := s.remove(nil, 1, "10"); !found {
		t.Fatal("remove: the owner's failed")
	}
	if _, ok := s.get(nil, 1, "10"); ok {
		t.Fatal("a removed response was found")
	}
	put("big1", 1, maxStoredBytes/2+1)
	put("big2", 1, maxStoredBytes/2+1)
	if _, ok := s.get(nil, 1, "big1"); ok {
		t.Fatal("the store holds more than its bytes")
	}
	if _, ok := s.get(nil, 1, "big2"); !ok || s.bytes > maxStoredBytes {
		t.Fatalf("the latest response was dropped, or %d bytes kept", s.bytes)
	}
	put("huge", 1, 2*maxStoredBytes) // kept alone: the latest is never dropped
	if _, ok := s.get(nil, 1, "huge"); !ok || s.order.Len() != 1 {
		t.Fatalf("the latest response alone: %d kept", s.order.Len())
	}
}
