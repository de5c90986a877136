// Command pocketd is the PocketLLM daemon and its offline tools: serve,
// inspect, tokenize, generate, logits and bench. Every subcommand lives in
// its own file; this one only assembles them.
//
// cobra is used for the command tree because it gives consistent flag
// parsing, help, and shell completion generation for free.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/packaging/manpage"
)

func main() {
	root := &cobra.Command{
		Use:           "pocketd",
		Short:         "PocketLLM: a local LLM inference daemon",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// One line per subcommand; each constructor lives in its own file.
	root.AddCommand(
		newServeCmd(),
		newInspectCmd(),
		newTokenizeCmd(),
		newLogitsCmd(),
		newGenerateCmd(),
		newBenchCmd(),
		newSynthCmd(),
	)
	// The hidden gen-man writes the man pages the .deb installs.
	root.AddCommand(manpage.Command(root))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "pocketd:", err)
		os.Exit(1)
	}
}
