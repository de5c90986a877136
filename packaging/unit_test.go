package packaging_test

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/cache"
	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/packaging"
)

// unit is a parsed systemd unit file: section → key → values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, b []byte) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("bad unit line %q", line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func readUnit(t *testing.T, name string) unit {
	t.Helper()
	b, err := fs.ReadFile(packaging.FS(), "systemd/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return parseUnit(t, b)
}

// TestUnitContracts pins what the daemon and the default config rely on, so
// that a unit edit cannot silently break socket activation.
func TestUnitContracts(t *testing.T) {
	cfg, err := daemon.ParseConfig(packaging.DefaultConfig())
	if err != nil {
		t.Fatalf("default config: %v", err)
	}
	svc := readUnit(t, "pocketd.service")
	unix := readUnit(t, "pocketd.socket")
	http := readUnit(t, "pocketd-http.socket")

	for _, c := range []struct {
		u            unit
		section, key string
		want         string
	}{
		{svc, "Service", "Type", "notify"},
		{svc, "Service", "User", "pocket"},
		{svc, "Service", "StateDirectory", "pocketd"},
		{svc, "Service", "RuntimeDirectory", "pocketd"},
		{svc, "Service", "ConfigurationDirectory", "pocketllm"},
		{svc, "Service", "ProtectSystem", "strict"},
		{svc, "Service", "Restart", "on-failure"},
		{unix, "Socket", "FileDescriptorName", "unix"},
		{unix, "Socket", "ListenStream", cfg.Server.Socket},
		{unix, "Socket", "SocketGroup", "pocket"},
		{unix, "Socket", "SocketMode", "0660"},
		{unix, "Socket", "Service", "pocketd.service"},
		{http, "Socket", "FileDescriptorName", "http"},
		{http, "Socket", "ListenStream", cfg.Server.Listen},
		{http, "Socket", "Service", "pocketd.service"},
	} {
		if got := c.u.get(c.section, c.key); got != c.want {
			t.Errorf("[%s] %s = %q, want %q", c.section, c.key, got, c.want)
		}
	}
	if w := svc.get("Service", "WatchdogSec"); w == "" {
		t.Error("pocketd.service has no WatchdogSec")
	}
	exec := strings.Fields(svc.get("Service", "ExecStart"))
	if len(exec) < 2 || exec[0] != "/usr/bin/pocketd" || exec[1] != "serve" ||
		!strings.Contains(svc.get("Service", "ExecStart"), "--config "+packaging.ConfigPath) {
		t.Errorf("ExecStart = %q, want /usr/bin/pocketd serve --config %s", exec, packaging.ConfigPath)
	}
	if cfg.Server.StateDir != "/var/lib/"+svc.get("Service", "StateDirectory") {
		t.Errorf("config state_dir %q is not the unit's StateDirectory", cfg.Server.StateDir)
	}
	if filepath.Dir(cfg.Server.Socket) != "/run/"+svc.get("Service", "RuntimeDirectory") {
		t.Errorf("config socket %q is not in the unit's RuntimeDirectory", cfg.Server.Socket)
	}
}

// TestDefaultConfig checks that the shipped config is one the daemon accepts
// and that it defines no model (a fresh install has none downloaded).
func TestDefaultConfig(t *testing.T) {
	cfg, err := daemon.ParseConfig(packaging.DefaultConfig())
	if err != nil {
		t.Fatalf("daemon rejects the default config: %v", err)
	}
	if len(cfg.Models) != 0 {
		t.Errorf("default config lists %d models, want none", len(cfg.Models))
	}
}

// TestDefaultConfigExamples checks that the commented-out examples of the
// [cache] table are accepted once uncommented.
func TestDefaultConfigExamples(t *testing.T) {
	cfg := string(packaging.DefaultConfig())
	const ex = "# snapshot_intervals = "
	if !strings.Contains(cfg, ex) {
		t.Fatalf("the default config has no %q example", ex)
	}
	c, err := daemon.ParseConfig([]byte(strings.Replace(cfg, ex, ex[2:], 1)))
	if err != nil {
		t.Fatalf("uncommented snapshot_intervals: %v", err)
	}
	if c.Cache.SnapshotIntervals.Intervals() != cache.DefaultIntervals {
		t.Errorf("the documented snapshot_intervals %+v are not the default %+v", c.Cache.SnapshotIntervals, cache.DefaultIntervals)
	}
}

func TestFilesEmbedded(t *testing.T) {
	for _, f := range packaging.Files() {
		if _, err := fs.Stat(packaging.FS(), f.Src); err != nil {
			t.Errorf("%s: %v", f.Dst, err)
		}
	}
}

// TestScriptsParse runs each maintainer script through sh -n (dash on
// Debian, the shell dpkg runs them with).
func TestScriptsParse(t *testing.T) {
	for _, s := range []string{packaging.PostInst, packaging.PreRm, packaging.PostRm} {
		b, err := fs.ReadFile(packaging.FS(), s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("#!/bin/sh\n")) {
			t.Errorf("%s: want #!/bin/sh", s)
		}
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = bytes.NewReader(b)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v\n%s", s, err, out)
		}
	}
}

// TestUnitsVerify runs systemd-analyze verify on the units in a scratch root
// that has the host's systemd units (for sysinit.target and friends) and an
// executable /usr/bin/pocketd. Any output, warnings included, fails the test.
// Man pages are checked against the real package in TestDeb.
func TestUnitsVerify(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/pocketd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range packaging.Files() {
		b, err := fs.ReadFile(packaging.FS(), f.Src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, f.Dst)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	verifyUnits(t, root, false)
}

// verifyUnits runs systemd-analyze verify --root=root on the package's units;
// man also checks that every Documentation= man page is under root.
func verifyUnits(t *testing.T, root string, man bool) {
	t.Helper()
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd); cannot verify the units")
	}
	// The host's generic units, which ours order against.
	if err := os.CopyFS(filepath.Join(root, "usr/lib/systemd/system"), hostUnits(t)); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	args := []string{"verify", "--root=" + root}
	if !man {
		args = append(args, "--man=no")
	}
	args = append(args, packaging.Units...)
	cmd := exec.Command(tool, args...)
	cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(root, "usr/share/man"), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// hostUnits is the host's /usr/lib/systemd/system without our own units, in
// case the package is installed on this machine.
func hostUnits(t *testing.T) fs.FS {
	t.Helper()
	dir := t.TempDir()
	src := "/usr/lib/systemd/system"
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("host units: %v", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".target") {
			continue // targets are all the ordering needs
		}
		if b, err := os.ReadFile(filepath.Join(src, e.Name())); err == nil {
			if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return os.DirFS(dir)
}
