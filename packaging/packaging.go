// Package packaging owns how PocketLLM is installed as a system service: the
// systemd units (pocketd.service, pocketd.socket, pocketd-http.socket), the
// sysusers.d and tmpfiles.d entries, the default /etc/pocketllm/pocketd.toml,
// and the Debian maintainer scripts. The files are embedded so that the .deb
// builder (packaging/cmd/mkdeb) and tests, including the daemon's, use exactly
// what ships.
package packaging

import (
	"embed"
	"io/fs"
)

//go:embed systemd sysusers tmpfiles scripts pocketd.toml
var files embed.FS

// Kind says how a packaged file is treated by the package manager.
type Kind int

const (
	// Plain files are replaced on upgrade and removed with the package.
	Plain Kind = iota
	// Conffile marks files the admin may edit: kept on upgrade when changed
	// (dpkg asks) and removed only on purge.
	Conffile
)

// File is one file of the package: its embedded source and where it goes.
type File struct {
	Src  string      // path in FS()
	Dst  string      // absolute path on the installed system
	Mode fs.FileMode // permission bits
	Kind Kind
}

// Files lists the data files every PocketLLM package installs, other than the
// binaries and the generated completions and man pages.
func Files() []File {
	return []File{
		{"systemd/pocketd.service", "/usr/lib/systemd/system/pocketd.service", 0o644, Plain},
		{"systemd/pocketd.socket", "/usr/lib/systemd/system/pocketd.socket", 0o644, Plain},
		{"systemd/pocketd-http.socket", "/usr/lib/systemd/system/pocketd-http.socket", 0o644, Plain},
		{"sysusers/pocketd.conf", "/usr/lib/sysusers.d/pocketd.conf", 0o644, Plain},
		{"tmpfiles/pocketd.conf", "/usr/lib/tmpfiles.d/pocketd.conf", 0o644, Plain},
		{"pocketd.toml", ConfigPath, 0o644, Conffile},
	}
}

// Units names the systemd units, in the order they are listed in Files.
var Units = []string{"pocketd.service", "pocketd.socket", "pocketd-http.socket"}

// ConfigPath is where the system service reads its configuration.
const ConfigPath = "/etc/pocketllm/pocketd.toml"

// Maintainer scripts, as paths in FS(): deb postinst, prerm and postrm.
const (
	PostInst = "scripts/postinst"
	PreRm    = "scripts/prerm"
	PostRm   = "scripts/postrm"
)

// FS returns the embedded packaging files.
func FS() fs.FS { return files }

// DefaultConfig returns the default /etc/pocketllm/pocketd.toml.
func DefaultConfig() []byte {
	b, err := files.ReadFile("pocketd.toml")
	if err != nil {
		panic("packaging: default config not embedded: " + err.Error()) // build-time invariant
	}
	return b
}
