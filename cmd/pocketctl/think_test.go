package main

import "testing"

// TestThinkStyler: the reasoning between the tags is dimmed, the tags
// dropped, whatever the pieces the reply streams in; text that only
// starts like a tag is printed; an unclosed block is reset at the end.
func TestThinkStyler(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"<think>\nhm\n</think>\n\nHello", dim + "\nhm\n" + reset + "\n\nHello"},
		{"a <thin b", "a <thin b"},
		{"<think>still", dim + "still" + reset},
		{"plain", "plain"},
	} {
		for size := 1; size <= len(c.in); size++ {
			var ts thinkStyler
			got := ""
			for i := 0; i < len(c.in); i += size {
				got += ts.write(c.in[i:min(i+size, len(c.in))])
			}
			got += ts.end()
			if got != c.want {
				t.Fatalf("%q in pieces of %d: %q, want %q", c.in, size, got, c.want)
			}
		}
	}
}
