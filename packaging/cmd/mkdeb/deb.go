package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	// nfpm writes the .deb. A .deb looks simple (an ar archive of two
	// tarballs), but getting it right by hand means control-file syntax,
	// md5sums, conffiles, parent directory entries, owner and mode fields,
	// version mangling (1.2.3-rc1 is 1.2.3~rc1) and reproducible mtimes; nfpm
	// does all of it, is what goreleaser ships packages with, and is pure Go,
	// so no dpkg-deb is needed to build.
	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/pocketllm/pocketllm/packaging"
)

// errNoDebWriter is nil: this build has the .deb writer.
var errNoDebWriter error

// writeDeb stages the embedded packaging files under staging and writes the
// package into o.out, returning its path.
func writeDeb(o options, bins map[string]string, docs []doc, staging string) (string, error) {
	var contents files.Contents
	add := func(src, dst string, mode fs.FileMode, typ string) {
		contents = append(contents, &files.Content{
			Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode},
		})
	}

	for _, name := range binaries {
		add(bins[name], "/usr/bin/"+name, 0o755, "")
	}
	for _, f := range packaging.Files() {
		src, err := stage(f.Src, staging)
		if err != nil {
			return "", err
		}
		typ := ""
		if f.Kind == packaging.Conffile {
			typ = files.TypeConfig
		}
		add(src, f.Dst, f.Mode, typ)
	}
	for _, d := range docs {
		add(d.src, d.dst, 0o644, "")
	}

	var scripts [3]string
	for i, s := range []string{packaging.PostInst, packaging.PreRm, packaging.PostRm} {
		var err error
		if scripts[i], err = stage(s, staging); err != nil {
			return "", err
		}
	}

	info := nfpm.WithDefaults(&nfpm.Info{
		Name:       "pocketllm",
		Arch:       "amd64",
		Platform:   "linux",
		Version:    strings.TrimPrefix(o.version, "v"),
		Section:    "net",
		Priority:   "optional",
		Maintainer: "PocketLLM developers <pocketllm@users.noreply.github.com>",
		Homepage:   "https://github.com/pocketllm/pocketllm",
		License:    "MIT",
		Description: "local LLM inference daemon\n" +
			"pocketd keeps models loaded on the GPUs or the CPU and per-session KV\n" +
			"state alive between requests, and serves local clients over a Unix\n" +
			"socket (pocketctl, editors) and an OpenAI-compatible HTTP gateway.",
		MTime: mtime(),
		Overridables: nfpm.Overridables{
			Contents:   contents,
			Recommends: []string{"systemd"},
			Scripts: nfpm.Scripts{
				PostInstall: scripts[0],
				PreRemove:   scripts[1],
				PostRemove:  scripts[2],
			},
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("package contents: %w", err)
	}

	path := filepath.Join(o.out, deb.Default.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, f.Close()
}

// stage copies an embedded packaging file to dir (nfpm reads from disk) and
// returns its path, keeping its executable bit for the scripts.
func stage(name, dir string) (string, error) {
	b, err := fs.ReadFile(packaging.FS(), name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	mode := fs.FileMode(0o644)
	if strings.HasPrefix(name, "scripts/") {
		mode = 0o755
	}
	return path, os.WriteFile(path, b, mode)
}

// mtime is the time stamped on every file: SOURCE_DATE_EPOCH when set (for
// reproducible builds), otherwise now.
func mtime() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err == nil {
			return time.Unix(sec, 0).UTC()
		}
	}
	return time.Now().UTC().Truncate(time.Second)
}
