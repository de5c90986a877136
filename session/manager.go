// Package session owns conversations with a model: durable token
// histories with a handle on their KV state, append/generate/fork/
// truncate/close, sampling and stopping, and the per-model scheduler that
// runs forward passes one at a time with a fair queue across sessions.
//
// Sessions belong to an Owner (the peer uid of the caller); another owner
// sees ErrNotFound. Token histories and metadata are durable in
// StateDir/sessions.db (bbolt): once a call has answered its effect
// survives kill -9. KV memory lives in package cache and is rebuilt lazily
// from the tokens (after a restart, after eviction), reusing any cached
// prefix blocks.
package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pocketllm/pocketllm/cache"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// Owner identifies who a session belongs to: the peer uid.
type Owner = uint32

// Sentinel errors; returned errors wrap them with context.
var (
	ErrNotFound      = errors.New("session not found")
	ErrUnknownModel  = errors.New("unknown model")
	ErrQueueFull     = errors.New("queue full")
	ErrContextLength = errors.New("context length exceeded")
	ErrBadRequest    = errors.New("bad request")
	ErrClosed        = errors.New("closed")
)

// ModelConfig adds a model to a Manager.
type ModelConfig struct {
	Name  string
	Model Runner
	// Tokenizer may be nil: then text and message input and stop strings
	// are ErrBadRequest, and generated text is empty.
	Tokenizer *tokenizer.Tokenizer
	// EOS ids end generation (joined with the model config's and the
	// tokenizer's).
	EOS []int32
	// KVBlocks is the size of the KV pool in blocks of BlockSize tokens
	// (defaults: enough for 8 full contexts, at most 1 GiB; BlockSize 16).
	KVBlocks, BlockSize int
	// HostTierBytes bounds the host memory that evicted KV blocks fall to
	// (0: no host tier).
	HostTierBytes int64
	// KVHalf asks for the KV pool in float16 where the backend offers it
	// (kernels.KVSpec.Half: the in-process CPU backend's attention pools),
	// for half the memory and the bytes a long context's decode reads.
	// Logits then differ from a float32 pool's by the rounding of K and V.
	KVHalf bool
	// QueueLimit bounds the requests in flight for the model (default 256).
	QueueLimit int
	// SnapshotBytes bounds the memory for snapshots of a hybrid model's
	// recurrent state (the daemon's, or the worker's device memory for the
	// ones it holds), which make prefix reuse, fork and truncate
	// cheap for it (default: two 4K contexts' snapshots, 1–8 GiB, see
	// defaultSnapshotBytes; negative: none, such sequences then recompute
	// from the start). Unused by attention-only models.
	SnapshotBytes int64
	// SnapshotIntervals says where hybrid sequences are snapshotted
	// (default cache.DefaultIntervals), rounded to whole blocks.
	SnapshotIntervals cache.Intervals
	// HostSnapshots keeps every snapshot's state in the daemon's memory,
	// even where the runner could hold it (models.HoldingState: a worker's
	// copy on its device, restored by a device copy; the default).
	HostSnapshots bool
	// IdleStepTime is how long a prefill step may run while nothing else
	// waits (default idleStepTime; see stepTokens).
	IdleStepTime time.Duration
	// Pooling is how Embed reduces a prompt's final hidden states to one
	// vector by default: PoolLast (the default) or PoolMean.
	Pooling Pooling
}

// defaultSnapshotBytes is ModelConfig.SnapshotBytes's default for a
// model whose snapshots hold state bytes each under the policy iv: room
// for the dense snapshots of two contexts up to iv.Until (32 with the
// default intervals), so that a fork or truncation anywhere in the first
// 4K of a session restores a snapshot instead of recomputing; at least
// 1 GiB, at most 8 GiB. (A fixed 1 GiB held six of a Qwen3.5-27B's 151 MB
// snapshots: a 4096-token session's middle had been evicted by its end,
// and a fork there recomputed 2048 tokens, 1.26 s on four H200s.)
func defaultSnapshotBytes(state int64, iv cache.Intervals) int64 {
	const least, most = 1 << 30, 8 << 30
	n := int64(2)
	if iv.Dense > 0 {
		n = 2 * int64(max(iv.Until/iv.Dense, 1))
	}
	switch {
	case state <= 0:
		return least
	case state > most/n:
		return most
	}
	return max(least, state*n)
}

// Options configure a Manager.
type Options struct {
	// StateDir holds sessions.db; "" keeps sessions in memory only (tests).
	StateDir string
	Logger   *slog.Logger
}

// ModelInfo describes a loaded model.
type ModelInfo struct {
	Name          string
	Arch          string
	ContextLength int
	VocabSize     int
	HiddenSize    int // an embedding's width (Embed)
	BlockSize     int
	KVBlocksTotal int
	KVBlocksUsed  int // referenced by sequences
	KVBlocksCache int // unreferenced, kept for prefix reuse
	HostTierBytes int64
	HostTierLimit int64
	// Recurrent-state snapshots held for a hybrid model (0 for others).
	Snapshots     int
	SnapshotBytes int64
	HeldSnapshots int // of Snapshots, those whose state the worker keeps on its device
}

// Info describes a session.
type Info struct {
	ID, Model        string
	Tokens           int
	Created, Updated time.Time
}

// Stats are counters and gauges for /metrics.
type Stats struct {
	Sessions         int
	QueueDepth       int // scheduler steps waiting, all models
	InFlight         int // admitted requests, all models
	KVBlocksTotal    int
	KVBlocksUsed     int
	KVBlocksCached   int
	HostTierBytes    int64
	Steps            int64 // forward steps run
	PromptTokens     int64
	CachedTokens     int64
	CompletionTokens int64
	PrefilledTokens  int64
	// Seconds spent in forward passes (decode steps of one token, prefill
	// chunks) and in durable history writes, with the writes' count.
	DecodeSeconds, PrefillSeconds float64
	HistoryWrites                 int64
	HistoryWriteSeconds           float64
}

// Manager owns the sessions of every model. It is safe for concurrent use.
type Manager struct {
	log   *slog.Logger
	store *store

	mu       sync.Mutex
	engines  map[string]*engine
	sessions map[string]*session
	closed   bool
	calls    sync.WaitGroup

	prompt, cached, completion, prefilled atomic.Int64
}

// session is one conversation. tokens, updated and the record fields are
// read under Manager.mu and changed only by the holder of lock (and then
// under Manager.mu too). seq belongs to the engine (engine.kvMu).
type session struct {
	id, model string
	owner     Owner
	created   time.Time
	updated   time.Time
	tokens    []int32
	lock      chan struct{} // one call at a time
	closing   atomic.Bool
	seq       *seqState
}

func (s *session) acquire(ctx context.Context) error {
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) release() { <-s.lock }

func (s *session) info() Info {
	return Info{ID: s.id, Model: s.model, Tokens: len(s.tokens), Created: s.created, Updated: s.updated}
}

func (s *session) record() record {
	return record{ID: s.id, Model: s.model, Owner: s.owner, Created: s.created, Updated: s.updated}
}

// NewManager opens StateDir/sessions.db (when StateDir is set) and loads
// the sessions it holds; their KV is rebuilt on first use.
func NewManager(opts Options) (*Manager, error) {
	m := &Manager{log: opts.Logger, engines: map[string]*engine{}, sessions: map[string]*session{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if opts.StateDir == "" {
		return m, nil
	}
	st, err := openStore(opts.StateDir)
	if err != nil {
		return nil, err
	}
	recs, toks, err := st.load()
	if err != nil && recs == nil {
		st.close()
		return nil, err
	}
	if err != nil {
		m.log.Warn("some sessions could not be loaded", "err", err)
	}
	m.store = st
	for _, r := range recs {
		m.sessions[r.ID] = &session{id: r.ID, model: r.Model, owner: r.Owner, created: r.Created,
			updated: r.Updated, tokens: toks[r.ID], lock: make(chan struct{}, 1)}
	}
	m.log.Info("sessions loaded", "count", len(recs), "dir", opts.StateDir)
	return m, nil
}

// AddModel makes a model available to sessions.
func (m *Manager) AddModel(cfg ModelConfig) error {
	if cfg.Name == "" || cfg.Model == nil {
		return fmt.Errorf("add model: %w: name and model are required", ErrBadRequest)
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 256
	}
	spec := cfg.Model.KVSpec(1, cfg.BlockSize)
	spec.Half = cfg.KVHalf
	if cfg.KVBlocks <= 0 {
		ctx := cfg.Model.ModelConfig().MaxPositions
		if ctx <= 0 {
			ctx = 4096
		}
		perCtx := (ctx + cfg.BlockSize - 1) / cfg.BlockSize
		cfg.KVBlocks = min(8*perCtx, max(64, int((1<<30)/spec.BytesPerBlock())))
	}
	spec.Blocks = cfg.KVBlocks
	eos := map[int32]bool{}
	for _, id := range cfg.EOS {
		eos[id] = true
	}
	for _, id := range cfg.Model.ModelConfig().EOS() {
		eos[id] = true
	}
	if cfg.Tokenizer != nil {
		for _, id := range cfg.Tokenizer.EOS() {
			eos[id] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if _, ok := m.engines[cfg.Name]; ok {
		return fmt.Errorf("add model %s: %w: already added", cfg.Name, ErrBadRequest)
	}
	snapBytes := int64(0)
	if st := cfg.Model.NewState(); st != nil {
		if cfg.SnapshotIntervals == (cache.Intervals{}) {
			cfg.SnapshotIntervals = cache.DefaultIntervals
		}
		snapBytes = cfg.SnapshotBytes
		if snapBytes == 0 {
			var size int64
			if rs, ok := st.(models.RecurrentState); ok {
				size = rs.SizeBytes()
			}
			snapBytes = defaultSnapshotBytes(size, cfg.SnapshotIntervals.Aligned(cfg.BlockSize))
		}
	}
	pool, err := cache.New(cache.Config{Backend: cfg.Model.KVOps(), Spec: spec,
		HostTierBytes: cfg.HostTierBytes, SnapshotBytes: max(snapBytes, 0)})
	if err != nil {
		return fmt.Errorf("add model %s: %w", cfg.Name, err)
	}
	m.engines[cfg.Name] = newEngine(cfg, pool, eos, m.log)
	m.log.Info("model added", "model", cfg.Name, "kv_blocks", cfg.KVBlocks, "block_size", cfg.BlockSize,
		"kv_bytes", spec.BytesPerBlock()*int64(cfg.KVBlocks), "host_tier_bytes", cfg.HostTierBytes,
		"snapshot_bytes", snapBytes)
	return nil
}

// Models describes the loaded models, by name.
func (m *Manager) Models() []ModelInfo {
	m.mu.Lock()
	engines := make([]*engine, 0, len(m.engines))
	for _, e := range m.engines {
		engines = append(engines, e)
	}
	m.mu.Unlock()
	out := make([]ModelInfo, 0, len(engines))
	for _, e := range engines {
		ps, ss := e.pool.Stats(), e.pool.SnapshotStats()
		out = append(out, ModelInfo{
			Name: e.name, Arch: e.model.ModelConfig().Arch(), ContextLength: e.ctxLen,
			VocabSize: e.model.ModelConfig().VocabSize, HiddenSize: e.model.ModelConfig().HiddenSize, BlockSize: e.bs,
			KVBlocksTotal: ps.Blocks, KVBlocksUsed: ps.Referenced, KVBlocksCache: ps.Cached,
			HostTierBytes: ps.HostBytes, HostTierLimit: ps.HostLimit,
			Snapshots: ss.Count, SnapshotBytes: ss.Bytes, HeldSnapshots: ss.Held,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Tokenizer returns a model's tokenizer (nil when it has none).
func (m *Manager) Tokenizer(model string) (*tokenizer.Tokenizer, error) {
	e, err := m.engine(model)
	if err != nil {
		return nil, err
	}
	return e.tok, nil
}

func (m *Manager) engine(model string) (*engine, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.engines[model]
	if !ok {
		return nil, fmt.Errorf("model %q: %w", model, ErrUnknownModel)
	}
	return e, nil
}

// begin registers a call so Shutdown can wait for it.
func (m *Manager) begin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("session manager: %w", ErrClosed)
	}
	m.calls.Add(1)
	return nil
}

func (m *Manager) end() { m.calls.Done() }

// lookup finds owner's session id.
func (m *Manager) lookup(owner Owner, id string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || s.owner != owner {
		return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return s, nil
}

// locked finds owner's session id, waits for its lock and checks that it
// is still open; release with s.release().
func (m *Manager) locked(ctx context.Context, owner Owner, id string) (*session, error) {
	s, err := m.lookup(owner, id)
	if err != nil {
		return nil, err
	}
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	gone := m.sessions[id] != s
	m.mu.Unlock()
	if gone {
		s.release()
		return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return s, nil
}

func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// Open starts an empty session on model.
func (m *Manager) Open(owner Owner, model string) (Info, error) {
	if err := m.begin(); err != nil {
		return Info{}, err
	}
	defer m.end()
	if _, err := m.engine(model); err != nil {
		return Info{}, err
	}
	now := time.Now().UTC()
	s := &session{id: newID(), model: model, owner: owner, created: now, updated: now, lock: make(chan struct{}, 1)}
	if err := m.store.put(s.record(), nil); err != nil {
		return Info{}, err
	}
	m.mu.Lock()
	m.sessions[s.id] = s
	m.mu.Unlock()
	return s.info(), nil
}

// List returns owner's sessions, oldest first.
func (m *Manager) List(owner Owner) []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Info
	for _, s := range m.sessions {
		if s.owner == owner {
			out = append(out, s.info())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Get describes owner's session id.
func (m *Manager) Get(owner Owner, id string) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || s.owner != owner {
		return Info{}, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return s.info(), nil
}

// Tokens returns a copy of a session's token history.
func (m *Manager) Tokens(owner Owner, id string) ([]int32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || s.owner != owner {
		return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return slices.Clone(s.tokens), nil
}

// commit makes toks the session's history, durably (lock held).
func (m *Manager) commit(s *session, toks []int32) error {
	r := s.record()
	r.Updated = time.Now().UTC()
	if err := m.store.put(r, toks); err != nil {
		return err
	}
	m.setHistory(s, toks, r.Updated)
	return nil
}

// setHistory makes toks s's history in memory, once it is stored.
func (m *Manager) setHistory(s *session, toks []int32, updated time.Time) {
	m.mu.Lock()
	s.tokens, s.updated = toks, updated
	m.mu.Unlock()
}

// seqOf returns s's KV state, made on first use (kvMu held).
func (e *engine) seqOf(s *session) *seqState {
	if s.seq == nil {
		s.seq = e.newSeq(s.owner)
	}
	return s.seq
}

// Fork makes a new session holding the first at tokens of id (at = -1:
// all of them). The fork shares the KV blocks of that prefix
// copy-on-write.
func (m *Manager) Fork(owner Owner, id string, at int) (Info, error) {
	if err := m.begin(); err != nil {
		return Info{}, err
	}
	defer m.end()
	s, err := m.locked(context.Background(), owner, id)
	if err != nil {
		return Info{}, err
	}
	defer s.release()
	if at < 0 {
		at = len(s.tokens)
	}
	if at > len(s.tokens) {
		return Info{}, fmt.Errorf("fork at %d of %d tokens: %w", at, len(s.tokens), ErrBadRequest)
	}
	now := time.Now().UTC()
	f := &session{id: newID(), model: s.model, owner: owner, created: now, updated: now,
		tokens: slices.Clone(s.tokens[:at]), lock: make(chan struct{}, 1)}
	if err := m.store.put(f.record(), f.tokens); err != nil {
		return Info{}, err
	}
	if e, err := m.engine(s.model); err == nil {
		e.kvMu.Lock()
		if s.seq != nil {
			f.seq = e.fork(s.seq, at)
		}
		e.kvMu.Unlock()
	}
	m.mu.Lock()
	m.sessions[f.id] = f
	m.mu.Unlock()
	return f.info(), nil
}

// Truncate rewinds a session to its first length tokens, keeping the KV
// of that prefix.
func (m *Manager) Truncate(owner Owner, id string, length int) (Info, error) {
	if err := m.begin(); err != nil {
		return Info{}, err
	}
	defer m.end()
	s, err := m.locked(context.Background(), owner, id)
	if err != nil {
		return Info{}, err
	}
	defer s.release()
	if length < 0 || length > len(s.tokens) {
		return Info{}, fmt.Errorf("truncate to %d of %d tokens: %w", length, len(s.tokens), ErrBadRequest)
	}
	if e, err := m.engine(s.model); err == nil {
		e.kvMu.Lock()
		if s.seq != nil {
			e.truncateKV(s.seq, length)
		}
		e.kvMu.Unlock()
	}
	if err := m.commit(s, slices.Clone(s.tokens[:length])); err != nil {
		return Info{}, err
	}
	return s.info(), nil
}

// Close ends a session: a generation in progress on it stops at its next
// token, its KV is released and its record deleted.
func (m *Manager) Close(owner Owner, id string) error {
	if err := m.begin(); err != nil {
		return err
	}
	defer m.end()
	s, err := m.lookup(owner, id)
	if err != nil {
		return err
	}
	s.closing.Store(true)
	s, err = m.locked(context.Background(), owner, id)
	if err != nil {
		return err
	}
	defer s.release()
	if err := m.store.delete(id); err != nil {
		s.closing.Store(false)
		return err
	}
	m.mu.Lock()
	delete(m.sessions, id)
	m.mu.Unlock()
	if e, err := m.engine(s.model); err == nil {
		e.kvMu.Lock()
		if s.seq != nil {
			e.dropSeq(s.seq)
			s.seq = nil
		}
		e.kvMu.Unlock()
	}
	return nil
}

// Shutdown refuses new calls, waits for the calls in flight (or ctx),
// stops the schedulers and closes the store.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	drained := make(chan struct{})
	go func() { m.calls.Wait(); close(drained) }()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = fmt.Errorf("shutdown: calls still in flight: %w", ctx.Err())
	}
	m.mu.Lock()
	engines := m.engines
	m.mu.Unlock()
	for _, e := range engines {
		e.stop()
		e.pool.Close()
	}
	if cerr := m.store.close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// Stats reports counters and gauges.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	st := Stats{Sessions: len(m.sessions)}
	engines := make([]*engine, 0, len(m.engines))
	for _, e := range m.engines {
		engines = append(engines, e)
	}
	m.mu.Unlock()
	for _, e := range engines {
		q, a := e.queueDepth()
		st.QueueDepth += q
		st.InFlight += a
		ps := e.pool.Stats()
		st.KVBlocksTotal += ps.Blocks
		st.KVBlocksUsed += ps.Referenced
		st.KVBlocksCached += ps.Cached
		st.HostTierBytes += ps.HostBytes
		st.Steps += e.steps.Load()
		st.DecodeSeconds += time.Duration(e.decodeNs.Load()).Seconds()
		st.PrefillSeconds += time.Duration(e.prefillNs.Load()).Seconds()
	}
	st.HistoryWrites, st.HistoryWriteSeconds = m.store.timing()
	st.PromptTokens = m.prompt.Load()
	st.CachedTokens = m.cached.Load()
	st.CompletionTokens = m.completion.Load()
	st.PrefilledTokens = m.prefilled.Load()
	return st
}
