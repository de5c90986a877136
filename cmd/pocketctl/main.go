// Command pocketctl is the command-line client of pocketd. It talks to the
// daemon only through package client: status, models, sessions, append,
// generate (streamed to the terminal), fork, truncate, and chat, an
// interactive conversation on a session that survives daemon restarts.
//
// The socket comes from --socket, else $POCKETD_SOCKET, else
// $XDG_RUNTIME_DIR/pocketd.sock, else /run/pocketd/pocketd.sock.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/pocketllm/pocketllm/client"
)

func main() {
	root := newRootCmd()
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "pocketctl:", err)
		var ce *client.Error
		switch {
		case errors.Is(err, client.ErrNoDaemon):
			fmt.Fprintln(os.Stderr, "pocketctl: is pocketd running? Try `pocketd serve --demo`, or set --socket / POCKETD_SOCKET.")
		case errors.As(err, &ce) && ce.Status == 404:
			os.Exit(2)
		case errors.Is(err, context.Canceled):
			os.Exit(130)
		}
		os.Exit(1)
	}
}
