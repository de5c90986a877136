package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// BenchmarkJSONFullVocabCheck is JSON mode's fallback (every token of a
// real 151K vocabulary checked once) in the middle of an object value.
func BenchmarkJSONFullVocabCheck(b *testing.B) {
	dir := filepath.Join("..", "..", "shared", "fixtures", "tokenizers", "qwen3")
	if _, err := os.Stat(dir); err != nil {
		b.Skip("no ../shared fixtures")
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	c := newJSONConstraint(tok, map[int32]bool{}, nil)
	for _, id := range tok.Encode(`{"name": "Ada", "langs": [`) {
		if !c.allows(id) {
			b.Fatalf("token %d refused", id)
		}
		c.advance(id)
	}
	n := int32(tok.VocabSize())
	allowed := 0
	for b.Loop() {
		allowed = 0
		for id := range n {
			if c.allows(id) {
				allowed++
			}
		}
	}
	b.ReportMetric(float64(allowed), "allowed")
}
