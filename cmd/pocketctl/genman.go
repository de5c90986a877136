package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newGenManCmd writes a man page per command (section 1) into DIR, for
// packaging. Shell completions come from cobra's `completion` command.
func newGenManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write man pages for pocketctl into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			return writeMan(cmd.Root(), args[0])
		},
	}
}

func writeMan(c *cobra.Command, dir string) error {
	if c.Hidden || c.Name() == "help" {
		return nil
	}
	name := strings.ReplaceAll(c.CommandPath(), " ", "-")
	var b bytes.Buffer
	fmt.Fprintf(&b, ".TH %s 1 \"\" \"PocketLLM\" \"User Commands\"\n", strings.ToUpper(roff(name)))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", roff(name), roff(c.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.B %s\n", roff(c.UseLine()))
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", roff(desc))
	writeFlags := func(title string, fs *pflag.FlagSet) {
		if !fs.HasAvailableFlags() {
			return
		}
		fmt.Fprintf(&b, ".SH %s\n", title)
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			head := "\\-\\-" + roff(f.Name)
			if f.Shorthand != "" {
				head = "\\-" + f.Shorthand + ", " + head
			}
			fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n%s\n", head, roff(f.Usage))
		})
	}
	writeFlags("OPTIONS", c.NonInheritedFlags())
	writeFlags("GLOBAL OPTIONS", c.InheritedFlags())
	var see []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			see = append(see, roff(strings.ReplaceAll(sub.CommandPath(), " ", "-"))+"(1)")
		}
	}
	if len(see) > 0 {
		fmt.Fprintf(&b, ".SH SEE ALSO\n%s\n", strings.Join(see, ", "))
	}
	if err := os.WriteFile(filepath.Join(dir, name+".1"), b.Bytes(), 0o644); err != nil {
		return err
	}
	for _, sub := range c.Commands() {
		if err := writeMan(sub, dir); err != nil {
			return err
		}
	}
	return nil
}

// roff escapes text for a man page.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, "-", `\-`)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
