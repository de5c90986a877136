//go:build cuda

package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/pocketllm/pocketllm/kernels/cuda"
)

// runMemBW measures how fast N SMs read DRAM by each way a decode kernel
// can move weights (kernels/cuda/membw.cu says why): plain loads, the
// decode rings' cp.async copies, the tensor-memory engine's bulk copies,
// over a list of SM counts. It prints GB/s in all and per SM.
func runMemBW(args []string) error {
	fs := flag.NewFlagSet("membw", flag.ContinueOnError)
	dev := deviceFlag(fs)
	sms := fs.String("sms", "8,16,32,48,64,80,96,107,120,132", "SM counts (one block each), comma-separated")
	modes := fs.String("modes", "ldg:24,ring:24x4,ring:17x6,ring:8x8,bulk:8x4x2048,bulk:8x3x8192,bulk:4x3x16384",
		"cases, comma-separated: ldg:WARPS, ring:WARPSxSTAGES, bulk:WARPSxSTAGESxCHUNK")
	perMB := fs.Int("per-mb", 4, "MiB each block reads a rep")
	reps := fs.Int("reps", 8, "reps timed together per case")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var counts []int
	for _, s := range strings.Split(*sms, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("membw: -sms %q: %q is not an SM count", *sms, s)
		}
		counts = append(counts, n)
	}
	var kinds []cuda.StreamCase
	for _, m := range strings.Split(*modes, ",") {
		c, err := parseStreamCase(strings.TrimSpace(m))
		if err != nil {
			return err
		}
		kinds = append(kinds, c)
	}
	g, err := openDevice(*dev)
	if err != nil {
		return err
	}
	var cases []cuda.StreamCase
	for _, k := range kinds {
		for _, n := range counts {
			k.SMs = n
			cases = append(cases, k)
		}
	}
	rates, err := g.StreamRead(cases, int64(*perMB)<<20, *reps)
	if err != nil {
		return err
	}
	fmt.Printf("%-22s %5s %9s %9s\n", "case", "SMs", "GB/s", "GB/s/SM")
	for i, c := range cases {
		fmt.Printf("%-22s %5d %9.1f %9.2f\n", c, c.SMs, rates[i], rates[i]/float64(c.SMs))
	}
	return nil
}

// parseStreamCase reads one -modes entry.
func parseStreamCase(s string) (cuda.StreamCase, error) {
	mode, geom, ok := strings.Cut(s, ":")
	parts := strings.Split(geom, "x")
	var v []int
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			ok = false
			break
		}
		v = append(v, n)
	}
	want := map[string]int{"ldg": 1, "ring": 2, "bulk": 3}[mode]
	if !ok || want == 0 || len(v) != want {
		return cuda.StreamCase{}, fmt.Errorf("membw: case %q: want ldg:WARPS, ring:WARPSxSTAGES or bulk:WARPSxSTAGESxCHUNK", s)
	}
	c := cuda.StreamCase{Mode: mode, Warps: v[0]}
	if want > 1 {
		c.Stages = v[1]
	}
	if want > 2 {
		c.Chunk = v[2]
	}
	return c, nil
}
