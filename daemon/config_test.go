package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/cache"
	"github.com/pocketllm/pocketllm/client/apitype"
)

const goodConfig = `
version = 1

[server]
socket = "/run/pocketd/pocketd.sock"
listen = "127.0.0.1:8000"
state_dir = "/var/lib/pocketd"
api_keys_file = "/etc/pocketllm/api_keys"
log_level = "debug"

[[model]]
name = "qwen"
path = "/models/qwen3-8b"
backend = "cuda"
devices = [0, 1]
tensor_parallel = 2

[[model]]
path = "/models/small"
threads = 4

[cache]
kv_blocks = 1024
block_size = 16
host_tier_bytes = 1073741824
snapshot_bytes = 536870912
host_snapshots = true
kv_dtype = "f16"
snapshot_intervals = { dense = 128, until = 2048, sparse = 1024 }

[limits]
queue = 64
max_body_bytes = 1048576
prefill_step_ms = 200
`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 || c.Models[0].ModelName() != "qwen" || c.Models[1].ModelName() != "small" ||
		c.Models[0].TensorParallel != 2 || len(c.Models[0].Devices) != 2 || c.Cache.HostTierBytes != 1<<30 ||
		c.Limits.Queue != 64 || c.Limits.PrefillStepMs != 200 || c.Server.LogLevel != "debug" {
		t.Fatalf("parsed %+v", c)
	}
	if c.Cache.SnapshotBytes != 512<<20 || !c.Cache.HostSnapshots || c.Cache.KVDType != "f16" || c.Cache.SnapshotIntervals.Intervals() != (cache.Intervals{Dense: 128, Until: 2048, Sparse: 1024}) {
		t.Fatalf("parsed cache %+v, intervals %+v", c.Cache, c.Cache.SnapshotIntervals)
	}
}

func TestSnapshotConfig(t *testing.T) {
	// Left out: the session defaults (the zero values).
	c, err := ParseConfig([]byte("version = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cache.SnapshotBytes != 0 || c.Cache.SnapshotIntervals != nil || c.Cache.SnapshotIntervals.Intervals() != (cache.Intervals{}) {
		t.Fatalf("defaults: %+v", c.Cache)
	}
	// Intervals are checked against the configured block size, and the
	// accepted ones are already aligned (cache.Intervals.Aligned keeps them).
	c, err = ParseConfig([]byte("version = 1\n[cache]\nblock_size = 32\nsnapshot_intervals = { dense = 64, until = 512, sparse = 256 }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if iv := c.Cache.SnapshotIntervals.Intervals(); iv.Aligned(32) != iv || iv != (cache.Intervals{Dense: 64, Until: 512, Sparse: 256}) {
		t.Fatalf("intervals %+v", iv)
	}
	// The standard table form works as well as the inline one.
	if _, err := ParseConfig([]byte("version = 1\n[cache.snapshot_intervals]\ndense = 256\nuntil = 4096\nsparse = 4096\n")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, cache, want string }{
		{"negative bytes", "snapshot_bytes = -1", "cache.snapshot_bytes"},
		{"bytes wrong type", `snapshot_bytes = "1G"`, "cache.snapshot_bytes"},
		{"intervals wrong type", "snapshot_intervals = 256", "cache.snapshot_intervals"},
		{"unknown interval key", "snapshot_intervals = { dense = 256, until = 4096, sparse = 4096, every = 1 }", "cache.snapshot_intervals.every"},
		{"missing sparse", "snapshot_intervals = { dense = 256, until = 4096 }", "cache.snapshot_intervals.sparse: must be a positive"},
		{"empty table", "snapshot_intervals = {}", "cache.snapshot_intervals.dense: must be a positive"},
		{"zero dense", "snapshot_intervals = { dense = 0, until = 4096, sparse = 4096 }", "cache.snapshot_intervals.dense"},
		{"negative until", "snapshot_intervals = { dense = 256, until = -16, sparse = 4096 }", "cache.snapshot_intervals.until"},
		{"dense off the blocks", "snapshot_intervals = { dense = 100, until = 4000, sparse = 4096 }", "cache.snapshot_intervals.dense: 100 is not a multiple of cache.block_size (16)"},
		{"sparse off the blocks", "snapshot_intervals = { dense = 256, until = 4096, sparse = 1000 }", "cache.snapshot_intervals.sparse"},
		{"off a configured block size", "block_size = 64\nsnapshot_intervals = { dense = 32, until = 4096, sparse = 4096 }", "cache.snapshot_intervals.dense: 32 is not a multiple of cache.block_size (64)"},
		{"until off dense", "snapshot_intervals = { dense = 256, until = 4000, sparse = 4096 }", "cache.snapshot_intervals.until: 4000 is not a multiple of dense (256)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte("version = 1\n[cache]\n" + tc.cache + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ name, edit, want string }{
		{"unknown top-level key", "version = 1\nbogus = 3\n", "bogus"},
		{"unknown nested key", "version = 1\n[server]\nsockett = \"/x\"\n", "server.sockett"},
		{"unknown model key", "version = 1\n[[model]]\npath = \"/m\"\ngpu = 1\n", "model.gpu"},
		{"wrong type", "version = 1\n[limits]\nqueue = \"many\"\n", "limits.queue"},
		{"bad backend", "version = 1\n[[model]]\npath = \"/m\"\nbackend = \"tpu\"\n", "model[0].backend"},
		{"bad log level", "version = 1\n[server]\nlog_level = \"loud\"\n", "server.log_level"},
		{"bad listen", "version = 1\n[server]\nlisten = \"8000\"\n", "server.listen"},
		{"relative socket", "version = 1\n[server]\nsocket = \"pocketd.sock\"\n", "server.socket"},
		{"negative", "version = 1\n[cache]\nkv_blocks = -1\n", "cache.kv_blocks"},
		{"bad kv_dtype", "version = 1\n[cache]\nkv_dtype = \"bf16\"\n", "cache.kv_dtype"},
		{"missing path", "version = 1\n[[model]]\nname = \"x\"\n", "model[0].path"},
		{"duplicate name", "version = 1\n[[model]]\npath = \"/a/m\"\n[[model]]\npath = \"/b/m\"\n", "model[1].name"},
		{"missing version", "[server]\nlisten = \"127.0.0.1:1\"\n", "version"},
		{"future version", "version = 2\n", "version"},
		{"syntax", "version = 1\n[server\n", "line 3"},
		{"tp in process", "version = 1\n[[model]]\npath = \"/m\"\ntensor_parallel = 2\n", "model[0].tensor_parallel"},
		{"tp over too few GPUs", "version = 1\n[[model]]\npath = \"/m\"\nbackend = \"cuda\"\ndevices = [0]\ntensor_parallel = 2\n", "model[0].tensor_parallel"},
		{"tp over the same GPU", "version = 1\n[[model]]\npath = \"/m\"\nbackend = \"cuda\"\ndevices = [1, 1]\n", "model[0].devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigMissingVsInvalid(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadConfig(filepath.Join(dir, "nope.toml"))
	if !errors.Is(err, ErrConfigMissing) {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("version = 1\nwhat = 1\n"), 0o644)
	_, err = LoadConfig(bad)
	if err == nil || errors.Is(err, ErrConfigMissing) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("invalid file: %v", err)
	}
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte(goodConfig), 0o644)
	if _, err := LoadConfig(good); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotConfigReachesSessions serves a hybrid model with snapshot
// intervals far denser than the default (which takes none in 100 tokens):
// the snapshots held after a prompt show that the [cache] keys reach the
// session manager.
func TestSnapshotConfigReachesSessions(t *testing.T) {
	m := fixtureModel("qwen3_next")
	m.Name = "hybrid"
	cfg := Config{Version: 1, Models: []ModelConfig{m}}
	cfg.Cache.SnapshotBytes = 64 << 20
	cfg.Cache.SnapshotIntervals = &SnapshotIntervals{Dense: 16, Until: 32, Sparse: 32}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ts := startServerConfig(t, cfg)
	c := ts.client()
	ctx := context.Background()
	s, err := c.NewSession(ctx, "hybrid")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendTokens(ctx, s.ID, tpToks(100, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: intp(1), Temperature: f64(0)}, nil); err != nil {
		t.Fatal(err)
	}
	infos := ts.srv.Sessions().Models()
	// At 16, 32, 64 and 96 tokens (dense alone would give 6, the default 0).
	if len(infos) != 1 || infos[0].Snapshots != 4 || infos[0].SnapshotBytes > cfg.Cache.SnapshotBytes {
		t.Fatalf("model info %+v: want 4 snapshots (every 16 tokens up to 32, then every 32), at most %d bytes", infos, cfg.Cache.SnapshotBytes)
	}
}
