package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier speaks sd_notify to the service manager. Outside systemd
// (NOTIFY_SOCKET unset) every call is a no-op, so the daemon needs no
// special mode to run in a terminal.
type Notifier struct {
	log *slog.Logger
}

// NewNotifier returns a Notifier for the environment's NOTIFY_SOCKET.
func NewNotifier(log *slog.Logger) *Notifier { return &Notifier{log: log} }

func (n *Notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.log.Warn("sd_notify failed", "state", state, "err", err)
	}
}

// Status sets the one-line status systemctl status shows.
func (n *Notifier) Status(s string) { n.send("STATUS=" + s) }

// Ready tells systemd start-up is complete (with a status line).
func (n *Notifier) Ready(status string) { n.send("READY=1\nSTATUS=" + status) }

// Stopping tells systemd the daemon is shutting down.
func (n *Notifier) Stopping(status string) { n.send("STOPPING=1\nSTATUS=" + status) }

// Watchdog pings WATCHDOG=1 at half the interval systemd asks for
// (WatchdogSec=, passed as WATCHDOG_USEC) until ctx ends; it returns at
// once when no watchdog is configured. alive is checked before each ping,
// so a wedged daemon stops pinging and systemd restarts it.
func (n *Notifier) Watchdog(ctx context.Context, alive func() bool) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn("watchdog settings", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	n.log.Debug("watchdog enabled", "interval", interval)
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		if alive == nil || alive() {
			n.send("WATCHDOG=1")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
