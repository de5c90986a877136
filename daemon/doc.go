// Package daemon owns pocketd's lifecycle: the versioned TOML config,
// listeners (systemd socket activation or its own, with safe replacement
// of a stale Unix socket), sd_notify readiness, status, stopping and
// watchdog pings, structured logs for journald, graceful draining on
// SIGTERM, and the HTTP surface: one route table (Mux) served with
// fasthttp on both the Unix socket and the TCP gateway port.
//
// The /v0 API (api.go) is served on the Unix socket only; every session
// belongs to the uid of the peer that created it (SO_PEERCRED, see
// PeerConn), and other uids get 404 for it. The OpenAI gateway mounts its
// /v1 routes through a RouteSet.
//
// Lifecycle: listen first, then load models; requests that arrive while
// models load wait for readiness (health routes answer 503 at once), and
// READY=1 is sent only when every model is loaded and both listeners
// accept.
package daemon
