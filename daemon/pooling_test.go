package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pocketllm/pocketllm/session"
)

func TestEmbedPooling(t *testing.T) {
	for cfg, want := range map[string]session.Pooling{
		`{"word_embedding_dimension": 1024, "pooling_mode_lasttoken": true}`:  session.PoolLast,
		`{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": false}`: session.PoolMean,
		`{"pooling_mode_cls_token": true}`:                                    "",
		`not json`:                                                            "",
	} {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, "1_Pooling"), 0o755)
		os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(cfg), 0o644)
		if got := embedPooling(dir); got != want {
			t.Errorf("%s: %q, want %q", cfg, got, want)
		}
	}
	if got := embedPooling(t.TempDir()); got != "" {
		t.Errorf("no pooling config: %q", got)
	}
}
