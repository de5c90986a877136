// Package manpage renders a cobra command tree as section-1 man pages in roff,
// one page per command (pocketd.1, pocketd-serve.1, ...), and provides the
// hidden `gen-man DIR` subcommand that packaging/cmd/mkdeb calls to put them
// in the .deb.
//
// It exists instead of github.com/spf13/cobra/doc because that package pulls
// in a Markdown-to-roff converter for help texts that are plain text anyway;
// this one writes roff directly and needs nothing but cobra.
package manpage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Command returns the hidden `gen-man DIR` subcommand that writes the man
// pages of root's whole tree into DIR. Add it to root:
//
//	root.AddCommand(manpage.Command(root))
func Command(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write the man pages of " + root.Name() + " into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return Write(root, args[0])
		},
	}
}

// Write writes one page per available command of root's tree into dir, named
// after the command path with dashes (pocketd-serve.1).
func Write(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	for _, c := range tree(root) {
		path := filepath.Join(dir, pageName(c)+".1")
		if err := os.WriteFile(path, Render(c), 0o644); err != nil {
			return fmt.Errorf("man page %s: %w", path, err)
		}
	}
	return nil
}

// tree lists root and every command below it that a user can run.
func tree(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		if listed(c) {
			out = append(out, tree(c)...)
		}
	}
	return out
}

// listed reports whether c gets a page: cobra's generated `completion`
// command is left out (the package installs the scripts themselves).
func listed(c *cobra.Command) bool {
	return c.IsAvailableCommand() && !c.IsAdditionalHelpTopicCommand() &&
		!(c.Name() == "completion" && c.HasParent() && !c.Parent().HasParent())
}

func pageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-")
}

// Render returns the man page of one command.
func Render(c *cobra.Command) []byte {
	var b bytes.Buffer
	root := c.Root()
	fmt.Fprintf(&b, ".TH %q 1 \"\" %q %q\n", strings.ToUpper(pageName(c)), root.Name(), root.Name()+" manual")
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", dash(pageName(c)), escape(c.Short))

	b.WriteString(".SH SYNOPSIS\n")
	fmt.Fprintf(&b, ".B %s\n", dash(c.CommandPath()))
	if rest := strings.TrimSpace(strings.TrimPrefix(c.UseLine(), c.CommandPath())); rest != "" {
		b.WriteString(escape(rest) + "\n")
	}

	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	b.WriteString(".SH DESCRIPTION\n")
	paragraphs(&b, desc)

	flags(&b, "OPTIONS", c.NonInheritedFlags())
	flags(&b, "OPTIONS INHERITED FROM PARENT COMMANDS", c.InheritedFlags())

	if c.Example != "" {
		b.WriteString(".SH EXAMPLES\n.nf\n.RS 4\n")
		b.WriteString(escapeLines(c.Example))
		b.WriteString("\n.RE\n.fi\n")
	}

	var see []string
	if c.HasParent() {
		see = append(see, ref(c.Parent()))
	}
	for _, sub := range c.Commands() {
		if listed(sub) {
			see = append(see, ref(sub))
		}
	}
	if len(see) > 0 {
		b.WriteString(".SH SEE ALSO\n" + strings.Join(see, ",\n") + "\n")
	}
	return b.Bytes()
}

func flags(b *bytes.Buffer, title string, fs *pflag.FlagSet) {
	var items []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "\\fB\\-\\-" + dash(f.Name) + "\\fR"
		if f.Shorthand != "" && f.ShorthandDeprecated == "" {
			name = "\\fB\\-" + dash(f.Shorthand) + "\\fR, " + name
		}
		varname, usage := pflag.UnquoteUsage(f)
		if varname != "" {
			name += " \\fI" + escape(varname) + "\\fR"
		}
		if d := f.DefValue; d != "" && d != "false" && d != "[]" && d != "0" {
			usage += " (default " + d + ")"
		}
		items = append(items, ".TP\n"+name+"\n"+escapeLines(usage)+"\n")
	})
	if len(items) == 0 {
		return
	}
	b.WriteString(".SH " + title + "\n")
	b.WriteString(strings.Join(items, ""))
}

// paragraphs writes text with blank lines as paragraph breaks and indented
// lines kept as they are (examples, lists).
func paragraphs(b *bytes.Buffer, text string) {
	for i, p := range strings.Split(strings.TrimSpace(text), "\n\n") {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		if strings.HasPrefix(p, " ") || strings.HasPrefix(p, "\t") || strings.Contains(p, "\n ") {
			b.WriteString(".nf\n" + escapeLines(p) + "\n.fi\n")
			continue
		}
		b.WriteString(escapeLines(p) + "\n")
	}
}

func ref(c *cobra.Command) string { return "\\fB" + dash(pageName(c)) + "\\fR(1)" }

func dash(s string) string { return strings.ReplaceAll(escape(s), "-", "\\-") }

func escape(s string) string { return strings.ReplaceAll(s, "\\", "\\e") }

// escapeLines escapes text and protects lines that roff would take as
// requests (a leading dot or apostrophe).
func escapeLines(s string) string {
	lines := strings.Split(escape(s), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = "\\&" + l
		}
	}
	return strings.Join(lines, "\n")
}
