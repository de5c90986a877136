// Package simdtest runs a package's tests again with the CPU's vector
// extensions hidden, so that the AVX2 and portable fallbacks of the
// kernels are tested on a machine that would otherwise take only its
// widest loops.
//
// golang.org/x/sys/cpu, which every kernel package reads its features
// from, honours GODEBUG=cpu.<feature>=off at start-up; a fresh process of
// the same test binary with that setting takes the fallbacks exactly as a
// CPU without the feature would. (A fallback that forgot to reset its
// vector loop's count once left most of a row unwritten on CPUs without
// AVX2, and no test saw it because every test machine had AVX2.)
package simdtest

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// childEnv marks a re-run, which must not re-run itself.
const childEnv = "POCKET_SIMDTEST_CHILD"

// Paths are the narrower vector paths of amd64, each as the GODEBUG
// settings that leave a CPU with only that path.
var Paths = []struct{ Name, GODEBUG string }{
	{"avx2", "cpu.avx512f=off"},
	{"portable", "cpu.avx512f=off,cpu.avx2=off,cpu.fma=off,cpu.f16c=off"},
}

// Rerun runs the calling test binary's tests once per narrower path (a
// subtest each) and fails with the child's output where a run fails. It
// skips on other architectures (their builds have only the portable
// loops), in -short mode, and inside a re-run.
func Rerun(t *testing.T) {
	t.Helper()
	switch {
	case os.Getenv(childEnv) != "":
		t.Skip("a re-run under narrower vector paths")
	case runtime.GOARCH != "amd64":
		t.Skip("only amd64 builds have more than one vector path")
	case testing.Short():
		t.Skip("-short")
	}
	for _, p := range Paths {
		t.Run(p.Name, func(t *testing.T) {
			godebug := p.GODEBUG
			if old := os.Getenv("GODEBUG"); old != "" {
				godebug = old + "," + godebug
			}
			cmd := exec.Command(os.Args[0], "-test.count=1", "-test.timeout=15m")
			cmd.Env = append(os.Environ(), "GODEBUG="+godebug, childEnv+"=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("GODEBUG=%s: %v\n%s", godebug, err, tail(string(out), 60))
			}
		})
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
