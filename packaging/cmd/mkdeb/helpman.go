package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// helpPages writes man pages made from the --help output of bin and of each
// subcommand cobra lists under "Available Commands:", for binaries that lack
// the gen-man hook. The help text goes in verbatim as the DESCRIPTION.
func helpPages(bin, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return helpPage(bin, []string{filepath.Base(bin)}, dir)
}

func helpPage(bin string, path []string, dir string) error {
	out, err := runBin(bin, append(path[1:], "--help")...)
	if err != nil {
		return err
	}
	name := strings.Join(path, "-")
	help := strings.TrimRight(string(out), "\n")
	short, _, _ := strings.Cut(help, "\n")

	var b bytes.Buffer
	fmt.Fprintf(&b, ".TH %q 1 \"\" %q %q\n", strings.ToUpper(name), path[0], path[0]+" manual")
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", roffDash(name), roffEscape(short))
	b.WriteString(".SH DESCRIPTION\n.nf\n")
	for _, l := range strings.Split(roffEscape(help), "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = "\\&" + l
		}
		b.WriteString(l + "\n")
	}
	b.WriteString(".fi\n")
	if err := os.WriteFile(filepath.Join(dir, name+".1"), b.Bytes(), 0o644); err != nil {
		return err
	}
	for _, sub := range subcommands(help, path) {
		if err := helpPage(bin, append(path[:len(path):len(path)], sub), dir); err != nil {
			return err
		}
	}
	return nil
}

// subcommands returns the names cobra's help lists under "Available
// Commands:", without help and, at the top (len(path) == 1), completion.
func subcommands(help string, path []string) []string {
	var subs []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasSuffix(line, "Commands:") && !strings.HasPrefix(line, " "):
			in = true
		case strings.TrimSpace(line) == "" || !strings.HasPrefix(line, " "):
			in = false
		case in:
			if f := strings.Fields(line); f[0] != "help" && !(f[0] == "completion" && len(path) == 1) {
				subs = append(subs, f[0])
			}
		}
	}
	return subs
}

func roffEscape(s string) string { return strings.ReplaceAll(s, "\\", "\\e") }
func roffDash(s string) string   { return strings.ReplaceAll(roffEscape(s), "-", "\\-") }
