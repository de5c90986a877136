package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
)

// NewLogger returns the daemon's logger. Under systemd (JOURNAL_STREAM set
// and pointing at w's file) lines carry no timestamp, since journald adds
// its own, and start with the sd-daemon priority prefix ("<3>" for errors,
// "<4>" warnings, "<6>" info, "<7>" debug) so that journalctl -p filters
// and colours them; elsewhere they are plain logfmt with a time.
func NewLogger(w io.Writer, level slog.Leveler, journal bool) *slog.Logger {
	if !journal {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
			return slog.Attr{}
		}
		return a
	}}
	h := &journalHandler{}
	for i, p := range []string{"<7>", "<6>", "<4>", "<3>"} {
		h.byLevel[i] = slog.NewTextHandler(&prefixWriter{w: w, prefix: []byte(p)}, opts)
	}
	h.level = level
	return slog.New(h)
}

// InJournal reports whether stderr is connected to journald.
func InJournal() bool {
	js := os.Getenv("JOURNAL_STREAM")
	if js == "" {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(os.Stderr.Fd()), &st); err != nil {
		return false
	}
	return js == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// journalHandler routes each record to a TextHandler whose writer adds
// the record's priority prefix.
type journalHandler struct {
	level   slog.Leveler
	byLevel [4]slog.Handler // debug, info, warn, error
}

func levelIndex(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 2
	case l >= slog.LevelInfo:
		return 1
	}
	return 0
}

func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.byLevel[levelIndex(r.Level)].Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &journalHandler{level: h.level}
	for i, x := range h.byLevel {
		n.byLevel[i] = x.WithAttrs(as)
	}
	return n
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	n := &journalHandler{level: h.level}
	for i, x := range h.byLevel {
		n.byLevel[i] = x.WithGroup(name)
	}
	return n
}

// prefixWriter prepends prefix to each write; slog handlers write one
// whole line per call.
type prefixWriter struct {
	w      io.Writer
	prefix []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	line := make([]byte, 0, len(p.prefix)+len(b))
	line = append(append(line, p.prefix...), b...)
	if _, err := p.w.Write(line); err != nil {
		return 0, err
	}
	return len(b), nil
}
