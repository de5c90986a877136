package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/pocketllm/pocketllm/cache"
)

// ConfigVersion is the only config file version this daemon reads.
const ConfigVersion = 1

// ErrConfigMissing is returned (wrapped) by LoadConfig when the file does
// not exist; any other failure means the file exists but is invalid.
var ErrConfigMissing = errors.New("config file missing")

// Config is pocketd's configuration: the TOML file (see
// packaging/pocketd.toml) with flags applied on top. Zero values mean
// "use the default" (Defaults fills them in).
type Config struct {
	Version int           `toml:"version"`
	Server  ServerConfig  `toml:"server"`
	Models  []ModelConfig `toml:"model"`
	Cache   CacheConfig   `toml:"cache"`
	Limits  LimitsConfig  `toml:"limits"`
}

// ServerConfig is the [server] table.
type ServerConfig struct {
	// Socket is the Unix socket path of the /v0 API.
	Socket string `toml:"socket"`
	// Listen is the TCP address of the OpenAI gateway ("" = default,
	// "off" = no TCP listener).
	Listen string `toml:"listen"`
	// StateDir holds durable session state.
	StateDir string `toml:"state_dir"`
	// APIKeysFile lists the gateway's accepted bearer keys, one per line.
	APIKeysFile string `toml:"api_keys_file"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
}

// ModelConfig is one [[model]] entry.
type ModelConfig struct {
	// Name is what clients call the model; default: the base name of Path.
	Name string `toml:"name"`
	// Path is a checkpoint directory or a .gguf file.
	Path string `toml:"path"`
	// Backend is "cpu" (default, in process), "cuda" (a pocket-worker
	// rank process per device) or "cpu-worker" (the CPU backend in a
	// pocket-worker process: the worker path without a GPU).
	Backend string `toml:"backend"`
	// Worker is the pocket-worker binary for the worker backends
	// (default: $POCKET_WORKER, else next to pocketd, else on $PATH).
	Worker string `toml:"worker"`
	// Devices are GPU ordinals for the cuda backend, one per rank
	// (default 0..tensor_parallel-1).
	Devices []int `toml:"devices"`
	// TensorParallel is the number of ranks (default: len(Devices) or 1):
	// rank processes of one tensor-parallel group, each holding 1/N of
	// the model, for the worker backends (cuda: one GPU per rank;
	// cpu-worker: CPU rank processes joined over Unix sockets).
	TensorParallel int `toml:"tensor_parallel"`
	// Threads bounds the CPU backend's goroutines (0: all cores; for
	// cpu-worker ranks of a group, each rank's share of them).
	Threads int `toml:"threads"`

	// demo marks the built-in demo model (set by --demo, not by the file).
	demo bool
	// logger is the server's, for the worker supervisors' logs.
	logger *slog.Logger
}

// CacheConfig is the [cache] table.
type CacheConfig struct {
	// KVBlocks is the KV pool's size in blocks of BlockSize tokens; 0
	// (the default): DefaultKVBlocks, or, on a GPU worker, as many as fit
	// its free memory if fewer (kvBlocksFor).
	KVBlocks      int   `toml:"kv_blocks"`
	BlockSize     int   `toml:"block_size"`
	HostTierBytes int64 `toml:"host_tier_bytes"`
	// KVDType is the KV cache's element type, on the CPU and in GPU
	// workers: "f32" (the default, also "") or "f16" (half the memory, so
	// twice the context or the sessions resident; the logits then differ
	// by the cached rows' rounding; session.ModelConfig.KVHalf). Latent
	// (MLA) caches stay f32.
	KVDType string `toml:"kv_dtype"`
	// SnapshotBytes bounds the memory for snapshots of a hybrid model's
	// recurrent state, per model (0: the default, two 4K contexts'
	// snapshots between 1 and 8 GiB; session.ModelConfig): the daemon's,
	// or the worker's device memory for the snapshots it holds.
	SnapshotBytes int64 `toml:"snapshot_bytes"`
	// HostSnapshots keeps every snapshot in the daemon's memory, not held
	// by the worker on its device (session.ModelConfig.HostSnapshots).
	HostSnapshots bool `toml:"host_snapshots"`
	// SnapshotIntervals says where hybrid sequences are snapshotted (nil:
	// cache.DefaultIntervals).
	SnapshotIntervals *SnapshotIntervals `toml:"snapshot_intervals"`
}

// SnapshotIntervals is cache.snapshot_intervals, an inline table
// { dense = 256, until = 4096, sparse = 4096 }: a snapshot every dense
// tokens up to until, then every sparse tokens. All three keys are
// required, positive and multiples of block_size, and until is a multiple
// of dense (the daemon does not silently round them as cache.Intervals
// would).
type SnapshotIntervals struct {
	Dense  int `toml:"dense"`
	Until  int `toml:"until"`
	Sparse int `toml:"sparse"`
}

// Intervals is the session policy the table configures (the zero
// Intervals, which means the default, when iv is nil).
func (iv *SnapshotIntervals) Intervals() cache.Intervals {
	if iv == nil {
		return cache.Intervals{}
	}
	return cache.Intervals{Dense: iv.Dense, Until: iv.Until, Sparse: iv.Sparse}
}

// validate checks the table against the block size bs.
func (iv *SnapshotIntervals) validate(bs int) error {
	if iv == nil {
		return nil
	}
	const key = "cache.snapshot_intervals"
	for _, f := range []struct {
		name string
		v    int
	}{{"dense", iv.Dense}, {"until", iv.Until}, {"sparse", iv.Sparse}} {
		switch {
		case f.v <= 0:
			return fmt.Errorf("%s.%s: must be a positive number of tokens, got %d", key, f.name, f.v)
		case f.v%bs != 0:
			return fmt.Errorf("%s.%s: %d is not a multiple of cache.block_size (%d)", key, f.name, f.v, bs)
		}
	}
	if iv.Until%iv.Dense != 0 {
		return fmt.Errorf("%s.until: %d is not a multiple of dense (%d)", key, iv.Until, iv.Dense)
	}
	return nil
}

// LimitsConfig is the [limits] table.
type LimitsConfig struct {
	// Queue bounds the requests waiting per model; more get 429.
	Queue int `toml:"queue"`
	// MaxBodyBytes bounds request bodies.
	MaxBodyBytes int `toml:"max_body_bytes"`
	// PrefillStepMs is how long one scheduler step may prefill a long
	// prompt while no other request of the model waits (default 200): a
	// request that arrives meanwhile waits for at most that step, and
	// longer steps reach more of a GPU's prefill throughput
	// (session.ModelConfig.IdleStepTime).
	PrefillStepMs int `toml:"prefill_step_ms"`
}

// Defaults used for zero fields.
const (
	DefaultListen       = "127.0.0.1:8000"
	DefaultKVBlocks     = 4096
	DefaultBlockSize    = 16
	DefaultQueue        = 256
	DefaultMaxBodyBytes = 8 << 20
)

// LoadConfig reads and validates a TOML config file. A file that does not
// exist gives an error wrapping ErrConfigMissing; unknown keys, wrong types
// and bad values give errors that name the key.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrConfigMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and validates config file contents.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			msg := fmt.Sprintf("line %d, column %d: %s", pe.Position.Line, pe.Position.Col, pe.Message)
			if pe.LastKey != "" {
				msg = fmt.Sprintf("%s (after key %s)", msg, pe.LastKey)
			}
			return nil, errors.New(msg)
		}
		return nil, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("unknown key %s", strings.Join(keys, ", "))
	}
	if !md.IsDefined("version") {
		return nil, fmt.Errorf("version: missing (this daemon reads version = %d)", ConfigVersion)
	}
	if c.Version != ConfigVersion {
		return nil, fmt.Errorf("version: %d is not supported (this daemon reads version = %d)", c.Version, ConfigVersion)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks values, naming the offending key.
func (c *Config) Validate() error {
	if c.Server.LogLevel != "" {
		if _, err := ParseLevel(c.Server.LogLevel); err != nil {
			return fmt.Errorf("server.log_level: %w", err)
		}
	}
	if l := c.Server.Listen; l != "" && l != "off" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			return fmt.Errorf("server.listen: %q is not HOST:PORT (or \"off\")", l)
		}
	}
	for key, v := range map[string]string{"server.socket": c.Server.Socket, "server.state_dir": c.Server.StateDir, "server.api_keys_file": c.Server.APIKeysFile} {
		if v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("%s: %q must be an absolute path", key, v)
		}
	}
	names := map[string]bool{}
	for i, m := range c.Models {
		key := fmt.Sprintf("model[%d]", i)
		if m.Path == "" && !m.demo {
			return fmt.Errorf("%s.path: missing", key)
		}
		switch m.Backend {
		case "", "cpu", "cuda", "cpu-worker":
		default:
			return fmt.Errorf("%s.backend: %q is not cpu, cuda or cpu-worker", key, m.Backend)
		}
		for _, d := range m.Devices {
			if d < 0 {
				return fmt.Errorf("%s.devices: negative device %d", key, d)
			}
		}
		if m.TensorParallel < 0 {
			return fmt.Errorf("%s.tensor_parallel: must not be negative", key)
		}
		if err := m.validateTP(key); err != nil {
			return err
		}
		if m.Threads < 0 {
			return fmt.Errorf("%s.threads: must not be negative", key)
		}
		name := m.ModelName()
		if names[name] {
			return fmt.Errorf("%s.name: model %q is listed twice", key, name)
		}
		names[name] = true
	}
	for key, v := range map[string]int64{"cache.kv_blocks": int64(c.Cache.KVBlocks), "cache.block_size": int64(c.Cache.BlockSize),
		"cache.host_tier_bytes": c.Cache.HostTierBytes, "cache.snapshot_bytes": c.Cache.SnapshotBytes, "limits.queue": int64(c.Limits.Queue), "limits.max_body_bytes": int64(c.Limits.MaxBodyBytes),
		"limits.prefill_step_ms": int64(c.Limits.PrefillStepMs)} {
		if v < 0 {
			return fmt.Errorf("%s: must not be negative, got %d", key, v)
		}
	}
	if err := ValidKVDType(c.Cache.KVDType); err != nil {
		return fmt.Errorf("cache.kv_dtype: %w", err)
	}
	bs := c.Cache.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	return c.Cache.SnapshotIntervals.validate(bs)
}

// ModelName is the name clients use: Name, else the base name of Path
// without a .gguf suffix.
func (m ModelConfig) ModelName() string {
	if m.Name != "" {
		return m.Name
	}
	return strings.TrimSuffix(filepath.Base(filepath.Clean(m.Path)), ".gguf")
}

// Ranks is the model's tensor-parallel ranks: tensor_parallel, else one
// per listed device, else 1.
func (m ModelConfig) Ranks() int {
	switch {
	case m.TensorParallel > 0:
		return m.TensorParallel
	case len(m.Devices) > 0:
		return len(m.Devices)
	}
	return 1
}

// validateTP checks the combination of backend, devices and
// tensor_parallel (what the model's shapes allow is checked when it
// loads).
func (m ModelConfig) validateTP(key string) error {
	n := m.Ranks()
	switch m.Backend {
	case "", "cpu":
		if n > 1 {
			return fmt.Errorf("%s.tensor_parallel: %d ranks need backend cpu-worker or cuda (the in-process cpu backend runs one)", key, n)
		}
		return nil
	case "cuda":
		if len(m.Devices) > 0 && len(m.Devices) != n {
			return fmt.Errorf("%s.tensor_parallel: %d ranks, but devices lists %d GPUs (one per rank)", key, n, len(m.Devices))
		}
		seen := map[int]bool{}
		for _, d := range m.Devices {
			if seen[d] {
				return fmt.Errorf("%s.devices: GPU %d listed twice (one rank per GPU)", key, d)
			}
			seen[d] = true
		}
	}
	return nil
}

// withDefaults returns a copy with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Server.Listen == "" {
		c.Server.Listen = DefaultListen
	}
	if c.Server.LogLevel == "" {
		c.Server.LogLevel = "info"
	}
	if c.Cache.BlockSize == 0 {
		c.Cache.BlockSize = DefaultBlockSize
	}
	if c.Limits.Queue == 0 {
		c.Limits.Queue = DefaultQueue
	}
	if c.Limits.MaxBodyBytes == 0 {
		c.Limits.MaxBodyBytes = DefaultMaxBodyBytes
	}
	c.Models = append([]ModelConfig(nil), c.Models...)
	for i := range c.Models {
		if c.Models[i].Backend == "" {
			c.Models[i].Backend = "cpu"
		}
	}
	return c
}

// ParseLevel parses a log level name.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}

// DefaultSocket is the socket path when none is configured:
// $XDG_RUNTIME_DIR/pocketd.sock, else /run/pocketd/pocketd.sock (the
// system service's). The client package uses the same rule.
func DefaultSocket() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "pocketd.sock")
	}
	return "/run/pocketd/pocketd.sock"
}

// DefaultStateDir is $STATE_DIRECTORY (set by systemd's StateDirectory=),
// else $XDG_STATE_HOME/pocketd, else ~/.local/state/pocketd.
func DefaultStateDir() (string, error) {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		// systemd may pass several, colon-separated; the first is ours.
		d, _, _ = strings.Cut(d, ":")
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "pocketd"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no state directory: set --state-dir, STATE_DIRECTORY or XDG_STATE_HOME: %w", err)
	}
	return filepath.Join(home, ".local", "state", "pocketd"), nil
}

// DemoModel is the config entry of the built-in demo model (models/demo).
func DemoModel() ModelConfig {
	return ModelConfig{Name: "demo", Path: "(built-in demo)", Backend: "cpu", demo: true}
}

// ValidKVDType reports whether d names a KV cache element type.
func ValidKVDType(d string) error {
	switch d {
	case "", "f32", "f16":
		return nil
	}
	return fmt.Errorf("%q is not \"f32\" or \"f16\"", d)
}
