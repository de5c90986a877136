package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

[limits]
queue = 64
max_body_bytes = 1048576
`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 || c.Models[0].ModelName() != "qwen" || c.Models[1].ModelName() != "small" ||
		c.Models[0].TensorParallel != 2 || len(c.Models[0].Devices) != 2 || c.Cache.HostTierBytes != 1<<30 ||
		c.Limits.Queue != 64 || c.Server.LogLevel != "debug" {
		t.Fatalf("parsed %+v", c)
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
