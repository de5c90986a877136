package textutil

import "testing"

func TestHeldPrefix(t *testing.T) {
	for _, c := range []struct {
		s, tag string
		want   int
	}{
		{"abc<thi", "<think>", 4}, {"abc", "<think>", 0}, {"<think>", "<think>", 0}, {"x<", "<think>", 1},
		{"", "<think>", 0}, {"ab", "", 0}, {"aa", "aab", 2}, {"<t", "<think>", 2},
	} {
		if got := HeldPrefix(c.s, c.tag); got != c.want {
			t.Errorf("HeldPrefix(%q, %q) = %d, want %d", c.s, c.tag, got, c.want)
		}
	}
}
