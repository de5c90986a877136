package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDocuments: documents are stored, replaced, deleted, bounded by count
// and bytes (oldest first, the newest always kept), and found again after
// the manager is reopened on the same state directory; without one
// nothing is kept.
func TestDocuments(t *testing.T) {
	dir := t.TempDir()
	m, err := NewManager(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	get := func(m *Manager, id string) (string, bool) {
		t.Helper()
		b, ok, err := m.Document("r", id)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), ok
	}
	for i := range 5 {
		if err := m.PutDocument("r", fmt.Sprint(i), []byte(fmt.Sprint("doc", i)), 3, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok := get(m, fmt.Sprint(i)); ok != want {
			t.Fatalf("document %d kept %v, want %v (the latest 3)", i, ok, want)
		}
	}
	if err := m.PutDocument("r", "3", []byte("doc3 again"), 3, 1<<20); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(m, "3"); v != "doc3 again" {
		t.Fatalf("replaced document: %q", v)
	}
	if _, ok := get(m, "2"); !ok {
		t.Fatal("replacing a document dropped another")
	}
	if found, err := m.DeleteDocument("r", "4"); !found || err != nil {
		t.Fatalf("delete: %v %v", found, err)
	}
	if found, _ := m.DeleteDocument("r", "4"); found {
		t.Fatal("deleted twice")
	}
	// The byte budget: two of 60 bytes do not fit in 100; the newest
	// alone is kept even when it is larger than the budget.
	big := strings.Repeat("x", 60)
	for _, id := range []string{"a", "b"} {
		if err := m.PutDocument("big", id, []byte(big), 10, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, _ := m.Document("big", "a"); ok {
		t.Fatal("the byte budget kept both")
	}
	if err := m.PutDocument("big", "c", []byte(strings.Repeat("y", 500)), 10, 100); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.Document("big", "c"); !ok {
		t.Fatal("the newest document was dropped")
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2, err := NewManager(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Shutdown(context.Background())
	if v, ok := get(m2, "3"); !ok || v != "doc3 again" {
		t.Fatalf("after reopening: %q %v", v, ok)
	}
	if _, ok := get(m2, "4"); ok {
		t.Fatal("a deleted document came back")
	}
	// The count goes on from the stored documents ("2", "3").
	for _, id := range []string{"5", "6"} {
		if err := m2.PutDocument("r", id, []byte("doc"+id), 3, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := get(m2, "2"); ok {
		t.Fatal("the oldest was not dropped after reopening")
	}

	mem, err := NewManager(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.PutDocument("r", "x", []byte("y"), 3, 100); !errors.Is(err, ErrNoStore) {
		t.Fatalf("without a state dir: %v", err)
	}
	if _, ok, err := mem.Document("r", "x"); ok || err != nil {
		t.Fatalf("without a state dir: %v %v", ok, err)
	}
}
