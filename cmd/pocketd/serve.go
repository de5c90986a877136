package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/daemon/gateway"
	"github.com/spf13/cobra"
)

// serveFlags are the flags of `pocketd serve`; each overrides the config
// file's value when given.
type serveFlags struct {
	config   string
	models   []string
	backend  string
	devices  string
	tp       int
	socket   string
	listen   string
	stateDir string
	logLevel string
	demo     bool
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: load models and serve the Unix socket and the HTTP gateway",
		Long: `Run the daemon: load models and serve the /v0 API and the OpenAI routes on a
Unix socket, and the OpenAI gateway on TCP.

Flags override the TOML config file (--config). Under systemd, readiness,
status and the watchdog go through sd_notify, and sockets passed by socket
activation (LISTEN_FDNAMES "unix" and "http") are used instead of opening
new ones. SIGTERM drains requests in flight before exiting.

--demo serves a built-in tiny random-weight model (named "demo") so the
daemon, pocketctl and the gateway can be tried with nothing downloaded; it
produces nonsense text.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "TOML config `FILE` (see packaging/pocketd.toml)")
	fl.StringArrayVar(&f.models, "model", nil, "serve the checkpoint `DIR` (or .gguf file); repeatable; replaces the config's models")
	fl.StringVar(&f.backend, "backend", "", "backend of every model: cpu (in process), cuda (a pocket-worker process per GPU) or cpu-worker")
	fl.StringVar(&f.devices, "devices", "", "GPU ordinals of every model, one per rank, e.g. 0,1 (backend cuda)")
	fl.IntVar(&f.tp, "tp", 0, "tensor-parallel ranks of every model (backend cuda: one GPU each; cpu-worker: CPU rank processes)")
	fl.StringVar(&f.socket, "socket", "", "Unix socket `PATH` (default $XDG_RUNTIME_DIR/pocketd.sock, else /run/pocketd/pocketd.sock)")
	fl.StringVar(&f.listen, "listen", "", `HTTP gateway HOST:PORT (default 127.0.0.1:8000; "off" disables it)`)
	fl.StringVar(&f.stateDir, "state-dir", "", "session state `DIR` (default $STATE_DIRECTORY, else $XDG_STATE_HOME/pocketd)")
	fl.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error")
	fl.BoolVar(&f.demo, "demo", false, "also serve the built-in demo model (tiny, random weights, nonsense output)")
	return cmd
}

// serveConfig merges the config file and the flags.
func serveConfig(cmd *cobra.Command, f *serveFlags) (*daemon.Config, error) {
	cfg := &daemon.Config{Version: daemon.ConfigVersion}
	if f.config != "" {
		c, err := daemon.LoadConfig(f.config)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	set := cmd.Flags().Changed
	if set("model") {
		cfg.Models = nil
		for _, p := range f.models {
			cfg.Models = append(cfg.Models, daemon.ModelConfig{Path: p})
		}
	}
	var devices []int
	if set("devices") {
		for _, d := range strings.Split(f.devices, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(d))
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--devices: %q is not a list of GPU ordinals", f.devices)
			}
			devices = append(devices, n)
		}
	}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if set("backend") {
			m.Backend = f.backend
		}
		if set("devices") {
			m.Devices = devices
		}
		if set("tp") {
			m.TensorParallel = f.tp
		}
	}
	if f.demo {
		cfg.Models = append(cfg.Models, daemon.DemoModel())
	}
	if set("socket") {
		cfg.Server.Socket = f.socket
	}
	if set("listen") {
		cfg.Server.Listen = f.listen
	}
	if set("state-dir") {
		cfg.Server.StateDir = f.stateDir
	}
	if set("log-level") {
		cfg.Server.LogLevel = f.logLevel
	}
	if cfg.Server.Socket == "" {
		cfg.Server.Socket = daemon.DefaultSocket()
	}
	if cfg.Server.StateDir == "" {
		d, err := daemon.DefaultStateDir()
		if err != nil {
			return nil, err
		}
		cfg.Server.StateDir = d
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	return cfg, nil
}

func runServe(cmd *cobra.Command, f *serveFlags) error {
	cfg, err := serveConfig(cmd, f)
	if err != nil {
		return err
	}
	level, err := daemon.ParseLevel(cmp(cfg.Server.LogLevel, "info"))
	if err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := daemon.NewLogger(os.Stderr, level, daemon.InJournal())
	if err := os.MkdirAll(cfg.Server.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	srv, err := daemon.New(daemon.Options{Config: *cfg, Logger: log})
	if err != nil {
		return err
	}
	gw, err := gateway.New(srv)
	if err != nil {
		return err
	}
	srv.AddRoutes(gw)

	// SIGTERM or SIGINT cancels the root context and starts the drain; a
	// second signal kills the process the default way.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	log.Info("starting pocketd", "pid", os.Getpid(), "models", len(cfg.Models), "state_dir", cfg.Server.StateDir)
	return srv.Run(ctx)
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
