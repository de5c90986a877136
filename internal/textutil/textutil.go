// Package textutil holds the text routines the streaming parsers share:
// the daemon's stop strings, the gateway's tool-call and reasoning tags,
// pocketctl's reasoning styling.
package textutil

import "strings"

// HeldPrefix is the length of the longest suffix of s that is a proper
// prefix of tag: the text a stream holds back because its next piece may
// complete tag.
func HeldPrefix(s, tag string) int {
	for k := min(len(tag)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, tag[:k]) {
			return k
		}
	}
	return 0
}
