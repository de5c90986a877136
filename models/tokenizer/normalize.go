package tokenizer

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization (HF "normalizer").
type normalizer func(string) string

func buildNormalizer(c *component) (normalizer, error) {
	switch c.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Prepend":
		p := c.Prepend
		return func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		}, nil
	case "Strip":
		left, right := c.Left, c.Right
		return func(s string) string {
			if left {
				s = strings.TrimLeftFunc(s, isWhitespace)
			}
			if right {
				s = strings.TrimRightFunc(s, isWhitespace)
			}
			return s
		}, nil
	case "Replace":
		if c.Pattern == nil {
			return nil, errors.New("replace normalizer without a pattern")
		}
		re, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, err
		}
		content := c.Content
		return func(s string) string {
			var b strings.Builder
			prev := 0
			re.find(s, func(a, e int) {
				b.WriteString(s[prev:a])
				b.WriteString(content)
				prev = e
			})
			b.WriteString(s[prev:])
			return b.String()
		}, nil
	case "Sequence":
		var steps []normalizer
		for i, raw := range c.Normalizers {
			sub, err := parseComponent(raw)
			if err != nil {
				return nil, fmt.Errorf("normalizer %d: %w", i, err)
			}
			n, err := buildNormalizer(sub)
			if err != nil {
				return nil, fmt.Errorf("normalizer %d: %w", i, err)
			}
			steps = append(steps, n)
		}
		if len(steps) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer %q", c.Type)
}
