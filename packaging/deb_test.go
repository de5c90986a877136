package packaging_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/packaging"
)

// scratch holds what the tests of this package share: mkdeb, the .deb and
// its extracted tree. TestMain removes it.
var scratch string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pocketllm-packaging-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var built struct {
	sync.Once
	deb, root, log string
	err            error
}

// buildDeb builds the package the way a release does (go run
// ./packaging/cmd/mkdeb, which go-builds both binaries) once per test run,
// and returns the .deb and the tree dpkg-deb -x extracts from it.
func buildDeb(t *testing.T) (deb, root string) {
	t.Helper()
	built.Do(func() {
		mkdeb := filepath.Join(scratch, "mkdeb")
		if out, err := exec.Command("go", "build", "-o", mkdeb, "./cmd/mkdeb").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./cmd/mkdeb: %v\n%s", err, out)
			return
		}
		// Strict: a binary that cannot produce its completions and man pages
		// fails the build.
		cmd := exec.Command(mkdeb, "--out", filepath.Join(scratch, "out"), "--version", "1.2.3-test")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		built.log = stderr.String()
		if err != nil {
			built.err = fmt.Errorf("mkdeb: %v\n%s", err, stderr.Bytes())
			return
		}
		built.deb = strings.TrimSpace(string(out))
		built.root = filepath.Join(scratch, "root")
		if out, err := exec.Command("dpkg-deb", "-x", built.deb, built.root).CombinedOutput(); err != nil {
			built.err = fmt.Errorf("dpkg-deb -x: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	if built.log != "" {
		t.Logf("mkdeb said:\n%s", built.log)
	}
	return built.deb, built.root
}

func needTool(t *testing.T, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed (apt-get install %s)", name, pkg)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestDeb checks the built package: name, version, contents, conffiles,
// maintainer scripts, completions and man pages, and the units in
// the package's own tree with their Documentation= man pages.
func TestDeb(t *testing.T) {
	needTool(t, "dpkg-deb", "dpkg")
	deb, root := buildDeb(t)
	if got, want := filepath.Base(deb), "pocketllm_1.2.3~test_amd64.deb"; got != want {
		t.Errorf("package file %s, want %s", got, want)
	}
	fields := run(t, "dpkg-deb", "-f", deb, "Package", "Version", "Architecture")
	for _, want := range []string{"Package: pocketllm", "Version: 1.2.3~test", "Architecture: amd64"} {
		if !strings.Contains(fields, want) {
			t.Errorf("control lacks %q:\n%s", want, fields)
		}
	}

	want := []string{"/usr/bin/pocketd", "/usr/bin/pocketctl"}
	for _, f := range packaging.Files() {
		want = append(want, f.Dst)
	}
	for _, bin := range []string{"pocketd", "pocketctl"} {
		want = append(want,
			"/usr/share/bash-completion/completions/"+bin,
			"/usr/share/zsh/vendor-completions/_"+bin,
			"/usr/share/fish/vendor_completions.d/"+bin+".fish",
			"/usr/share/man/man1/"+bin+".1.gz")
	}
	for _, f := range want {
		fi, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Errorf("package lacks %s", f)
			continue
		}
		if strings.HasPrefix(f, "/usr/bin/") && fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable", f)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, packaging.ConfigPath))
	if err == nil && !bytes.Equal(b, packaging.DefaultConfig()) {
		t.Errorf("%s differs from the embedded default config", packaging.ConfigPath)
	}

	ctrl := filepath.Join(scratch, "control")
	run(t, "dpkg-deb", "-e", deb, ctrl)
	conffiles, _ := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	if strings.TrimSpace(string(conffiles)) != packaging.ConfigPath {
		t.Errorf("conffiles = %q, want %s", conffiles, packaging.ConfigPath)
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		if fi, err := os.Stat(filepath.Join(ctrl, s)); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("maintainer script %s missing or not executable", s)
		}
	}

	_, manErr := exec.LookPath("man")
	if manErr != nil {
		t.Log("man is not installed (apt-get install man-db): Documentation= pages not checked")
	}
	verifyUnits(t, root, manErr == nil)
}

// TestDebInstall installs the package on this machine with dpkg -i, then
// removes and purges it, checking what appears and disappears. It changes
// the system (a pocket user, files under /usr, /etc and /var/lib), so it runs
// only as root with POCKET_DEB_TEST=1, as CI sets. systemd need not be PID 1:
// the maintainer scripts must cope with that, as in a container or chroot.
func TestDebInstall(t *testing.T) {
	if os.Getenv("POCKET_DEB_TEST") != "1" {
		t.Skip("installs the .deb on this machine: set POCKET_DEB_TEST=1 (as root) to run")
	}
	if os.Geteuid() != 0 {
		t.Fatal("POCKET_DEB_TEST=1 needs root")
	}
	needTool(t, "dpkg", "dpkg")
	if installed() {
		t.Fatal("pocketllm is already installed here; remove it (dpkg --purge pocketllm) to run this test")
	}
	deb, _ := buildDeb(t)
	t.Cleanup(func() {
		if installed() {
			dpkg(t, "--purge", "pocketllm")
		}
	})

	dpkg(t, "-i", deb)
	if !installed() {
		t.Fatal("dpkg -i succeeded but pocketllm is not installed")
	}
	for _, f := range []string{"/usr/bin/pocketd", "/usr/bin/pocketctl", packaging.ConfigPath,
		"/usr/lib/systemd/system/pocketd.service", "/usr/lib/systemd/system/pocketd.socket",
		"/usr/lib/systemd/system/pocketd-http.socket", "/usr/lib/sysusers.d/pocketd.conf",
		"/usr/lib/tmpfiles.d/pocketd.conf"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	if out, err := exec.Command("getent", "passwd", "pocket").Output(); err != nil {
		t.Error("after install: no pocket user")
	} else if !strings.Contains(string(out), "/var/lib/pocketd") {
		t.Errorf("pocket user: %s", out)
	}
	if out, err := exec.Command("stat", "-c", "%U:%G %a", "/var/lib/pocketd").Output(); err != nil {
		t.Errorf("after install: /var/lib/pocketd: %v", err)
	} else if got := strings.TrimSpace(string(out)); got != "pocket:pocket 750" {
		t.Errorf("/var/lib/pocketd is %s, want pocket:pocket 750", got)
	}
	enabled := []string{"/etc/systemd/system/sockets.target.wants/pocketd.socket",
		"/etc/systemd/system/sockets.target.wants/pocketd-http.socket"}
	for _, l := range enabled {
		if _, err := os.Lstat(l); err != nil {
			t.Errorf("after install, sockets not enabled: %v", err)
		}
	}

	// Reinstall (postinst configure with the old version: the upgrade path)
	// keeps an edited conffile and the admin's enablement state.
	edited := append(packaging.DefaultConfig(), "# edited by the admin\n"...)
	if err := os.WriteFile(packaging.ConfigPath, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg(t, "--force-confold", "-i", deb)
	if b, err := os.ReadFile(packaging.ConfigPath); err != nil || !bytes.Equal(b, edited) {
		t.Errorf("after reinstall, the edited %s was not kept (%v)", packaging.ConfigPath, err)
	}
	for _, l := range enabled {
		if _, err := os.Lstat(l); err != nil {
			t.Errorf("after reinstall: %v", err)
		}
	}

	dpkg(t, "-r", "pocketllm")
	for _, f := range []string{"/usr/bin/pocketd", "/usr/bin/pocketctl", "/usr/lib/systemd/system/pocketd.service"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("after remove: %s still there", f)
		}
	}
	if _, err := os.Stat(packaging.ConfigPath); err != nil {
		t.Errorf("after remove, the conffile should stay until purge: %v", err)
	}

	dpkg(t, "--purge", "pocketllm")
	if installed() {
		t.Error("after purge: still known to dpkg")
	}
	for _, f := range append([]string{packaging.ConfigPath, "/etc/pocketllm", "/var/lib/pocketd",
		"/run/pocketd", "/usr/lib/sysusers.d/pocketd.conf"}, enabled...) {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("after purge: %s still there", f)
		}
	}
	left, _ := filepath.Glob("/etc/systemd/system/*/pocketd*")
	more, _ := filepath.Glob("/etc/systemd/system/pocketd*")
	if left = append(left, more...); len(left) > 0 {
		t.Errorf("after purge, unit links left: %v", left)
	}
}

func installed() bool {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "pocketllm").Output()
	return err == nil && strings.HasPrefix(string(out), "i")
}

// dpkg runs dpkg, waiting while another dpkg or apt holds the lock.
func dpkg(t *testing.T, args ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err == nil {
			t.Logf("dpkg %s:\n%s", strings.Join(args, " "), out)
			return
		}
		if !bytes.Contains(out, []byte("lock")) || time.Now().After(deadline) {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		time.Sleep(2 * time.Second)
	}
}
