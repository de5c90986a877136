package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/pocketllm/pocketllm/session"
	"github.com/valyala/fasthttp"
)

// Options configure a Server.
type Options struct {
	// Config is the merged configuration (file, then flags); zero fields
	// take defaults.
	Config Config
	Logger *slog.Logger
	// Engines load models by backend name (nil: DefaultEngines()).
	Engines map[string]Engine
	// DrainTimeout bounds how long shutdown waits for requests in flight
	// before cancelling them (0: 30s).
	DrainTimeout time.Duration
	// ReadyWait bounds how long a request waits for models to load before
	// it gets 503 (0: 5 minutes).
	ReadyWait time.Duration
}

// Server is a running pocketd: listeners, route table and session
// manager.
//
// Lock order: Server.mu is never held while calling the session manager.
type Server struct {
	cfg     Config
	log     *slog.Logger
	engines map[string]Engine
	drain   time.Duration
	wait    time.Duration
	mux     *Mux
	notify  *Notifier

	ready    chan struct{} // closed when every model is loaded
	stopping chan struct{} // closed when shutdown begins
	stopOnce sync.Once
	mgr      atomic.Pointer[session.Manager]

	// reqCtx is the parent of every session call; it is cancelled when
	// the drain time runs out, so that long generations end.
	reqCtx    context.Context
	reqCancel context.CancelFunc

	mu      sync.Mutex
	models  []apitype.Model
	workers []namedWorker
	closes  []func() error
	lns     *Listeners
}

// namedWorker is a model served by a worker process.
type namedWorker struct {
	name string
	w    WorkerStatus
}

// New builds a server; Run starts it. The /v0 and health routes are
// registered; add others (the OpenAI gateway) with Mux().Handle or
// AddRoutes before Run.
func New(opts Options) (*Server, error) {
	cfg := opts.Config.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, engines: opts.Engines, drain: opts.DrainTimeout, wait: opts.ReadyWait,
		mux: NewMux(), notify: NewNotifier(log), ready: make(chan struct{}), stopping: make(chan struct{})}
	if s.engines == nil {
		s.engines = DefaultEngines()
	}
	if s.drain <= 0 {
		s.drain = 30 * time.Second
	}
	if s.wait <= 0 {
		s.wait = 5 * time.Minute
	}
	for i, m := range cfg.Models {
		if _, ok := s.engines[m.Backend]; !ok {
			return nil, fmt.Errorf("model[%d].backend: no %q engine", i, m.Backend)
		}
	}
	s.reqCtx, s.reqCancel = context.WithCancel(context.Background())
	s.registerV0(s.mux)
	return s, nil
}

// Mux is the route table; register routes before Run.
func (s *Server) Mux() *Mux { return s.mux }

// AddRoutes mounts route sets (e.g. the OpenAI gateway) before Run.
func (s *Server) AddRoutes(rs ...RouteSet) {
	for _, r := range rs {
		r.Register(s.mux)
	}
}

// Logger is the server's logger.
func (s *Server) Logger() *slog.Logger { return s.log }

// Config is the effective configuration (defaults filled in).
func (s *Server) Config() Config { return s.cfg }

// Sessions is the session manager, nil until Ready is closed. Handlers
// without BeforeReady run only after that.
func (s *Server) Sessions() *session.Manager { return s.mgr.Load() }

// Ready is closed once every model is loaded and both listeners accept.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// RequestContext is the context session calls should use: it is cancelled
// when a shutdown's drain time runs out.
func (s *Server) RequestContext() context.Context { return s.reqCtx }

// ModelInfos describes the loaded models.
func (s *Server) ModelInfos() []apitype.Model {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]apitype.Model(nil), s.models...)
}

// Addrs returns the listeners' addresses once Run has opened them.
func (s *Server) Addrs() (unix, http net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lns == nil {
		return nil, nil
	}
	unix = s.lns.Unix.Addr()
	if s.lns.HTTP != nil {
		http = s.lns.HTTP.Addr()
	}
	return unix, http
}

// NoModelsMessage explains the "no_models" health status.
const NoModelsMessage = "no models configured: list [[model]] tables in the config file (or pass --model DIR, or --demo) and restart pocketd"

// status is the health status word and, when not "ok", why.
func (s *Server) status() (string, string) {
	select {
	case <-s.stopping:
		return "stopping", ""
	default:
	}
	select {
	case <-s.ready:
	default:
		return "loading", ""
	}
	if len(s.cfg.Models) == 0 {
		return "no_models", NoModelsMessage
	}
	var down []string
	for _, w := range s.workerHealth() {
		if w.Error != "" {
			down = append(down, fmt.Sprintf("model %s: %s", w.Model, w.Error))
		}
	}
	if len(down) > 0 {
		return "degraded", strings.Join(down, "; ")
	}
	return "ok", ""
}

// workerHealth describes the models served by worker processes.
func (s *Server) workerHealth() []apitype.WorkerHealth {
	s.mu.Lock()
	ws := append([]namedWorker(nil), s.workers...)
	s.mu.Unlock()
	out := make([]apitype.WorkerHealth, 0, len(ws))
	for _, w := range ws {
		h := apitype.WorkerHealth{Model: w.name, PID: w.w.PID(), Restarts: w.w.Restarts()}
		if err := w.w.Health(); err != nil {
			h.Error = err.Error()
		}
		for _, r := range w.w.Ranks() {
			rh := apitype.RankHealth{Rank: r.Rank, PID: r.PID, Device: r.Device, Restarts: r.Restarts}
			if r.GPU >= 0 {
				rh.GPU = &r.GPU
			}
			h.Ranks = append(h.Ranks, rh)
		}
		out = append(out, h)
	}
	return out
}

// watchWorkers reports worker losses and recoveries to systemd (STATUS=)
// and the log until ctx ends.
func (s *Server) watchWorkers(ctx context.Context, readyMsg string) {
	last := ""
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, msg := s.status()
		if st != "ok" && st != "degraded" || msg == last {
			continue
		}
		last = msg
		if st == "ok" {
			s.log.Info("workers serving again")
			s.notify.Status(readyMsg)
		} else {
			s.log.Warn("degraded", "reason", msg)
			s.notify.Status("degraded: " + msg)
		}
	}
}

// Run opens the listeners, serves, loads the models, signals readiness
// and serves until ctx ends; then it drains and returns. Cancelling ctx is
// the normal way to stop and is not an error.
func (s *Server) Run(ctx context.Context) error {
	s.notify.Status("opening listeners")
	lns, err := OpenListeners(s.cfg.Server.Socket, s.cfg.Server.Listen, s.log)
	if err != nil {
		return err
	}
	defer lns.Close()
	s.mu.Lock()
	s.lns = lns
	s.mu.Unlock()

	servers := []*fasthttp.Server{s.newHTTPServer(OnSocket, "unix")}
	listeners := []net.Listener{lns.Unix}
	if lns.HTTP != nil {
		servers = append(servers, s.newHTTPServer(OnTCP, "http"))
		listeners = append(listeners, lns.HTTP)
	}
	serveErr := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { serveErr <- srv.Serve(listeners[i]) }()
	}
	attrs := []any{"socket", lns.Unix.Addr().String(), "socket_activated", lns.UnixActivated}
	if lns.HTTP != nil {
		attrs = append(attrs, "http", lns.HTTP.Addr().String(), "http_activated", lns.HTTPActivated)
	}
	s.log.Info("listening", attrs...)

	loadErr := make(chan error, 1)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		loadErr <- s.load(ctx)
	}()

	var runErr error
	select {
	case err := <-loadErr:
		if err == nil {
			err = s.checkAccept(lns)
		}
		if err != nil {
			runErr = err
			break
		}
		close(s.ready)
		msg := fmt.Sprintf("ready: %d model(s) on %s", len(s.ModelInfos()), lns.Unix.Addr())
		if lns.HTTP != nil {
			msg += " and http://" + lns.HTTP.Addr().String()
		}
		if len(s.cfg.Models) == 0 {
			msg += "; " + NoModelsMessage
			s.log.Warn(NoModelsMessage)
		}
		s.log.Info("ready", "models", len(s.ModelInfos()))
		s.notify.Ready(msg)
		wdCtx, wdStop := context.WithCancel(ctx)
		go s.notify.Watchdog(wdCtx, s.alive)
		s.mu.Lock()
		workers := len(s.workers) > 0
		s.mu.Unlock()
		if workers {
			// In-process models have no worker to lose: a daemon of CPU
			// models does not wake four times a second for nothing.
			go s.watchWorkers(wdCtx, msg)
		}
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			runErr = fmt.Errorf("listener failed: %w", err)
		}
		wdStop()
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("listener failed: %w", err)
	}
	return errors.Join(runErr, s.shutdown(servers, loadDone))
}

// load builds the session manager and loads every model into it.
func (s *Server) load(ctx context.Context) error {
	mgr, err := session.NewManager(session.Options{StateDir: s.cfg.Server.StateDir, Logger: s.log.With("component", "session")})
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	for i, m := range s.cfg.Models {
		name := m.ModelName()
		s.notify.Status(fmt.Sprintf("loading model %s (%d/%d)", name, i+1, len(s.cfg.Models)))
		start := time.Now()
		m.logger = s.log.With("component", "worker")
		l, err := s.engines[m.Backend].Load(ctx, m)
		if err != nil {
			mgr.Shutdown(context.Background())
			return fmt.Errorf("load model %s: %w", name, err)
		}
		s.mu.Lock()
		s.closes = append(s.closes, l.Close)
		if l.Worker != nil {
			s.workers = append(s.workers, namedWorker{name, l.Worker})
		}
		s.mu.Unlock()
		blocks := s.cfg.Cache.KVBlocks
		if blocks == 0 {
			blocks = s.kvBlocksFor(name, l.Model)
		}
		err = mgr.AddModel(session.ModelConfig{Name: name, Model: l.Model, Tokenizer: l.Tokenizer, EOS: l.EOS,
			KVBlocks: blocks, BlockSize: s.cfg.Cache.BlockSize, HostTierBytes: s.cfg.Cache.HostTierBytes,
			KVHalf:     s.cfg.Cache.KVDType == "f16",
			QueueLimit: s.cfg.Limits.Queue, SnapshotBytes: s.cfg.Cache.SnapshotBytes,
			IdleStepTime:      time.Duration(s.cfg.Limits.PrefillStepMs) * time.Millisecond,
			SnapshotIntervals: s.cfg.Cache.SnapshotIntervals.Intervals(), HostSnapshots: s.cfg.Cache.HostSnapshots,
			Pooling: embedPooling(m.Path)})
		if err != nil {
			mgr.Shutdown(context.Background())
			return fmt.Errorf("load model %s: %w", name, err)
		}
		l.Info.Name = name
		s.mu.Lock()
		s.models = append(s.models, l.Info)
		s.mu.Unlock()
		s.log.Info("model loaded", "model", name, "arch", l.Info.Architecture, "backend", m.Backend,
			"tokenizer", l.Tokenizer != nil, "took", time.Since(start).Round(time.Millisecond))
		if ctx.Err() != nil {
			mgr.Shutdown(context.Background())
			return nil
		}
	}
	s.mgr.Store(mgr)
	return nil
}

// checkAccept dials both listeners: READY=1 promises that they accept.
func (s *Server) checkAccept(lns *Listeners) error {
	for _, ln := range []net.Listener{lns.Unix, lns.HTTP} {
		if ln == nil {
			continue
		}
		c, err := net.DialTimeout(ln.Addr().Network(), ln.Addr().String(), 5*time.Second)
		if err != nil {
			return fmt.Errorf("listener %s does not accept: %w", ln.Addr(), err)
		}
		c.Close()
	}
	return nil
}

// alive is the watchdog's liveness check: the session manager answers.
func (s *Server) alive() bool {
	mgr := s.mgr.Load()
	if mgr == nil {
		return true
	}
	done := make(chan struct{})
	go func() { mgr.Stats(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// shutdown drains: stop accepting, let requests in flight finish (up to
// the drain timeout, then cancel them), then close the sessions.
func (s *Server) shutdown(servers []*fasthttp.Server, loadDone <-chan struct{}) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.notify.Stopping("draining requests in flight")
	s.log.Info("shutting down", "drain_timeout", s.drain)
	dctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.ShutdownWithContext(dctx); err != nil {
				// Out of time: end the generations still running, then
				// give their handlers a moment to reply.
				s.reqCancel()
				c2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel2()
				if err := srv.ShutdownWithContext(c2); err != nil {
					s.log.Warn("connections still open at exit", "err", err)
				}
			}
		}()
	}
	wg.Wait()
	s.reqCancel()
	<-loadDone // a load in progress finishes (and cleans up) first
	var err error
	if mgr := s.mgr.Load(); mgr != nil {
		s.notify.Status("closing sessions")
		mctx, mcancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = mgr.Shutdown(mctx)
		mcancel()
	}
	s.mu.Lock()
	closes := s.closes
	s.closes = nil
	s.mu.Unlock()
	for _, c := range closes {
		if c != nil {
			c()
		}
	}
	s.log.Info("stopped")
	return err
}

func (s *Server) newHTTPServer(on Scope, name string) *fasthttp.Server {
	log := s.log.With("listener", name)
	return &fasthttp.Server{
		Handler:                       s.handler(on, log),
		Name:                          "pocketd",
		MaxRequestBodySize:            s.cfg.Limits.MaxBodyBytes,
		ReadTimeout:                   5 * time.Minute,
		IdleTimeout:                   2 * time.Minute,
		ReadBufferSize:                16 << 10,
		CloseOnShutdown:               true,
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: false,
		Logger:                        fasthttpLogger{log},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			status := fasthttp.StatusBadRequest
			if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				status = fasthttp.StatusRequestEntityTooLarge
			}
			WriteError(ctx, status, "malformed request: "+err.Error())
		},
	}
}

// handler routes a request served on listener kind on.
func (s *Server) handler(on Scope, log *slog.Logger) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		path := string(ctx.Path())
		defer func() {
			if p := recover(); p != nil {
				log.Error("handler panic", "path", path, "panic", p, "stack", string(debug.Stack()))
				WriteError(ctx, fasthttp.StatusInternalServerError, "internal error")
			}
			if log.Enabled(context.Background(), slog.LevelDebug) {
				attrs := []any{"method", string(ctx.Method()), "path", path, "status", ctx.Response.StatusCode(),
					"took", time.Since(start).Round(time.Microsecond)}
				if uid, ok := PeerUID(ctx); ok {
					attrs = append(attrs, "uid", uid)
				}
				log.Debug("request", attrs...)
			}
		}()
		r, ok := s.mux.lookup(path, on)
		if !ok {
			WriteError(ctx, fasthttp.StatusNotFound, "no route "+path)
			return
		}
		if r.scope&BeforeReady == 0 && !s.waitReady() {
			st, _ := s.status()
			WriteError(ctx, fasthttp.StatusServiceUnavailable, "pocketd is "+st)
			return
		}
		r.h(ctx)
	}
}

// waitReady blocks until the models are loaded; false if the server stops
// or loading takes longer than the wait bound.
func (s *Server) waitReady() bool {
	select {
	case <-s.stopping:
		return false
	case <-s.ready:
		return true
	default:
	}
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-s.ready:
		return true
	case <-s.stopping:
	case <-t.C:
	}
	return false
}

// PeerUID is the uid of the process at the other end of a Unix-socket
// request; ok is false for TCP requests.
func PeerUID(ctx *fasthttp.RequestCtx) (uid uint32, ok bool) {
	if pc, isPeer := ctx.Conn().(*PeerConn); isPeer {
		return pc.UID, true
	}
	return 0, false
}

type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// poolRoomer is a runner on a device of its own (a GPU worker group:
// worker.Proxy) that says how many KV blocks its free memory holds.
type poolRoomer interface {
	PoolRoom(blockSize int, half bool, reserve int64) (blocks int, ok bool)
}

// kvPoolReserve is device memory a sized KV pool leaves free (at least;
// PoolRoom keeps an eighth of what is free if that is more): the decode
// passes' activations and recordings, the sampling scratch.
const kvPoolReserve = 2 << 30

// minKVBlocks is the smallest pool sized to a device: 1024 tokens of 16.
const minKVBlocks = 64

// kvBlocksFor sizes the KV pool of a model whose config gives none:
// DefaultKVBlocks, or fewer on a GPU where those would not fit beside the
// weights (an 8B model's 65536 float32 positions are 17 GB: a 24 GB card
// could not load it). float16 (cache.kv_dtype) fits twice the blocks.
func (s *Server) kvBlocksFor(name string, r session.Runner) int {
	pr, ok := r.(poolRoomer)
	if !ok {
		return DefaultKVBlocks
	}
	bs := s.cfg.Cache.BlockSize
	if bs <= 0 {
		bs = DefaultBlockSize
	}
	room, ok := pr.PoolRoom(bs, s.cfg.Cache.KVDType == "f16", kvPoolReserve)
	if !ok || room >= DefaultKVBlocks {
		return DefaultKVBlocks
	}
	blocks := max(room, minKVBlocks)
	s.log.Warn("KV pool sized to the device's free memory", "model", name, "blocks", blocks, "tokens", blocks*bs,
		"default_blocks", DefaultKVBlocks, "hint", "cache.kv_dtype = \"f16\" holds twice as many; cache.kv_blocks sets the size")
	return blocks
}
