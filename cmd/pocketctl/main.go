// Command pocketctl is the command-line client of pocketd. It talks to the
// daemon only through package client.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "pocketctl: not built yet")
	os.Exit(1)
}
