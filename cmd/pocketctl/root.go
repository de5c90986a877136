package main

import (
	"encoding/json"
	"io"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/packaging/manpage"
	"github.com/spf13/cobra"
)

// app is what every subcommand shares: the client and output mode.
type app struct {
	socket string
	json   bool
	c      *client.Client
	out    io.Writer // the command's stdout
}

func (a *app) client() *client.Client {
	if a.c == nil {
		a.c = &client.Client{Socket: a.socket}
	}
	return a.c
}

// printJSON writes v as indented JSON on stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// newRootCmd builds the whole command tree (also used to generate man
// pages and shell completions).
func newRootCmd() *cobra.Command {
	a := &app{}
	root := &cobra.Command{
		Use:   "pocketctl",
		Short: "Talk to pocketd, the PocketLLM daemon",
		Long: `pocketctl talks to pocketd over its Unix socket.

The socket is --socket, else $POCKETD_SOCKET, else $XDG_RUNTIME_DIR/pocketd.sock,
else /run/pocketd/pocketd.sock. Sessions belong to your uid: other users
cannot see or touch them.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			a.out = cmd.OutOrStdout()
		},
	}
	root.PersistentFlags().StringVar(&a.socket, "socket", "", "pocketd socket `PATH`")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print replies as JSON")
	root.AddCommand(
		newStatusCmd(a),
		newModelsCmd(a),
		newSessionsCmd(a),
		newAppendCmd(a),
		newGenerateCmd(a),
		newForkCmd(a),
		newTruncateCmd(a),
		newChatCmd(a),
	)
	root.AddCommand(manpage.Command(root))
	return root
}
