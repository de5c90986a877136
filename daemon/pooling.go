package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/pocketllm/pocketllm/session"
)

// embedPooling is the pooling /v1/embeddings uses by default for the
// checkpoint at path: what its sentence-transformers pooling config
// (1_Pooling/config.json, shipped with embedding checkpoints such as
// Qwen3-Embedding) names, else the session's default (the last token).
func embedPooling(path string) session.Pooling {
	b, err := os.ReadFile(filepath.Join(path, "1_Pooling", "config.json"))
	if err != nil {
		return ""
	}
	var c struct {
		Mean bool `json:"pooling_mode_mean_tokens"`
		Last bool `json:"pooling_mode_lasttoken"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	switch {
	case c.Last:
		return session.PoolLast
	case c.Mean:
		return session.PoolMean
	}
	return ""
}
