package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestJournalLogger(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelInfo, true).With("component", "x")
	log.Debug("hidden")
	log.Info("model loaded", "model", "demo")
	log.Warn("careful")
	log.Error("broken", "err", "boom")
	want := []string{
		`<6>msg="model loaded" component=x model=demo`,
		`<4>msg=careful component=x`,
		`<3>msg=broken component=x err=boom`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), strings.Join(want, "\n"))
	}
}
