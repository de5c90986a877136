// Command pocket-worker is the GPU rank process of PocketLLM: the only
// binary that links the CUDA backend (build with -tags cuda). pocketd runs
// it as serve-rank, one process a rank over a socketpair; the other
// commands are the backend's checks and measurements.
//
//	pocket-worker serve-rank --backend cuda --device N (started by pocketd)
//	pocket-worker rank-bench --model DIR          greedy decode through a rank process, as pocketd drives it
//	pocket-worker conformance [--device N]        every CUDA op against the CPU backend
//	pocket-worker parity DIR...                   fixture parity on CUDA (logits, greedy, graph replay)
//	pocket-worker synth --shape llama3-8b --out DIR
//	pocket-worker bench --model DIR [--prompt-tokens N] [--new-tokens N] [--json]
package main

import (
	"fmt"
	"os"
	"sort"
)

// commands maps a subcommand to its entry point; the CUDA ones are added
// by cuda.go when built with the tag.
var commands = map[string]func(args []string) error{
	"synth":      runSynth,
	"serve-rank": runServeRank,
	"rank-bench": runRankBench,
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	run, ok := commands[os.Args[1]]
	if !ok {
		if cudaOnly[os.Args[1]] {
			fmt.Fprintf(os.Stderr, "pocket-worker: %s needs a binary built with -tags cuda\n", os.Args[1])
			os.Exit(2)
		}
		usage()
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "pocket-worker:", err)
		os.Exit(1)
	}
}

var cudaOnly = map[string]bool{"conformance": true, "parity": true, "bench": true}

func usage() {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: pocket-worker COMMAND [flags]; commands: %v\n", names)
}
