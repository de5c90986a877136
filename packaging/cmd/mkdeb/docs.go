package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// doc is one generated file and where the package installs it.
type doc struct{ src, dst string }

// completionDst maps each shell to where Debian's shells look for vendor
// completions of command NAME.
var completionDst = map[string]string{
	"bash": "/usr/share/bash-completion/completions/%s",
	"zsh":  "/usr/share/zsh/vendor-completions/_%s",
	"fish": "/usr/share/fish/vendor_completions.d/%s.fish",
}

// generateDocs runs each binary to produce its shell completions (cobra's
// `completion SHELL`) and man pages (the hidden `gen-man DIR` of
// packaging/manpage, or, for a binary without it, pages made from its --help
// output) under dir. A binary that can do neither is an error unless
// allowMissing, when it is reported on stderr and its docs are left out.
func generateDocs(bins map[string]string, dir string, allowMissing bool) ([]doc, error) {
	var docs []doc
	for _, name := range binaries {
		bin := bins[name]
		var problems []string

		for shell, dst := range completionDst {
			src := filepath.Join(dir, "completion", shell, name)
			out, err := runBin(bin, "completion", shell)
			if err == nil && !looksLikeCompletion(out, name) {
				err = fmt.Errorf("output is not a %s completion script", shell)
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s completion %s: %v", name, shell, err))
				continue
			}
			if err := writeFile(src, out); err != nil {
				return nil, err
			}
			docs = append(docs, doc{src, fmt.Sprintf(dst, name)})
		}

		man := filepath.Join(dir, "man", name)
		pages, err := manPages(bin, man)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s man pages: %v", name, err))
		}
		for _, p := range pages {
			gz, err := gzipFile(p)
			if err != nil {
				return nil, err
			}
			docs = append(docs, doc{gz, "/usr/share/man/man1/" + filepath.Base(gz)})
		}

		if len(problems) > 0 {
			msg := strings.Join(problems, "\n  ")
			if !allowMissing {
				return nil, fmt.Errorf("docs:\n  %s\n(pass --allow-missing-docs to build without them)", msg)
			}
			fmt.Fprintf(os.Stderr, "mkdeb: warning: leaving out docs:\n  %s\n", msg)
		}
	}
	return docs, nil
}

func looksLikeCompletion(script []byte, name string) bool {
	return len(script) > 0 && bytes.Contains(script, []byte(name)) &&
		!bytes.HasPrefix(bytes.TrimSpace(script), []byte("Usage:"))
}

// manPages writes the man pages of bin into dir and returns their paths.
func manPages(bin, dir string) ([]string, error) {
	if _, err := runBin(bin, "gen-man", dir); err != nil {
		// No gen-man hook: fall back to pages made from --help.
		if err := helpPages(bin, dir); err != nil {
			return nil, err
		}
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err == nil && len(pages) == 0 {
		err = fmt.Errorf("no pages written")
	}
	return pages, err
}

// runBin runs a packaged binary with a time limit and returns its stdout. It
// never gets a terminal, a config or a daemon: only generation commands run.
func runBin(bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "HOME="+os.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, msg)
	}
	return out, nil
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// gzipFile writes path.gz (no name or time in the header, so that builds
// are reproducible) and returns its path.
func gzipFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return path + ".gz", os.WriteFile(path+".gz", buf.Bytes(), 0o644)
}
