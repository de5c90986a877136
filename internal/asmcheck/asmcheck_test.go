package asmcheck

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// vecReg matches an SSE/AVX/AVX-512 register operand.
var vecReg = regexp.MustCompile(`(^|[^A-Za-z0-9_])[XYZ]([0-9]|[12][0-9]|3[01])([^0-9]|$)`)

// TestNoLegacySSEInVEXCode: a function that uses VEX or EVEX instructions
// (V…) must not also use a legacy SSE instruction on a vector register
// (MOVQ AX, X6; MULSS X6, X7; MOVSS X0, ret(FP) …). With the upper halves
// of the YMM registers in use, such an instruction costs a state
// transition or a merge with the upper bits on many x86 cores: on a Zen 3
// host the K-quant row dots, each with three legacy MOVQ a block, ran 5 to
// 50 times slower than with VMOVQ (Q4_K 2355 → 457 ns a 4096-element row,
// Q4_1 30266 → 575; Qwen3-0.6B Q4_K_M CPU decode 4.5-4.7 → 17.5-18.1
// tok/s), while the Zen 5 host they were written on showed nothing.
//
// It also holds every function that uses YMM/ZMM registers to a
// VZEROUPPER before each RET (dirtyReturns), since the Go code the
// function returns to does its float math in legacy SSE.
//
// The check reads the Go assembler's listing (go tool asm -S), which has
// every macro expanded, so a legacy instruction hidden in a macro is found
// at its call.
func TestNoLegacySSEInVEXCode(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	include := filepath.Join(strings.TrimSpace(string(goroot)), "pkg", "include")
	var files []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_amd64.s") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no amd64 assembly found under " + root)
	}
	out := filepath.Join(t.TempDir(), "x.o")
	for _, f := range files {
		dir := filepath.Dir(f)
		cmd := exec.Command("go", "tool", "asm", "-I", include, "-I", dir, "-p", filepath.Base(dir), "-S", "-o", out, f)
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64")
		listing, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: go tool asm: %v\n%s", f, err, listing)
		}
		rel, _ := filepath.Rel(root, f)
		for fn, bad := range legacyInVEX(listing) {
			for _, l := range bad {
				t.Errorf("%s: %s uses VEX instructions and the legacy SSE %s", rel, fn, l)
			}
		}
		for _, r := range dirtyReturns(listing) {
			t.Errorf("%s: %s", rel, r)
		}
	}
	t.Logf("%d assembly files checked", len(files))
}

// asmFunc is one function of an asm -S listing, its instructions in
// listing order.
type asmFunc struct {
	name  string
	insts []asmInst
}

type asmInst struct {
	op, args, pos string // pos: "file:line"
}

// parseListing splits an asm -S listing into its functions: a line
// "pkg.name STEXT …" opens one, and each "\t0xoffset pc (file:line)\tOP\targs"
// line is an instruction of the open one.
func parseListing(listing []byte) []asmFunc {
	var fns []asmFunc
	sc := bufio.NewScanner(bytes.NewReader(listing))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") {
			if f := strings.Fields(line); len(f) > 1 && f[1] == "STEXT" {
				fns = append(fns, asmFunc{name: f[0]})
			}
			continue
		}
		parts := strings.Split(line, "\t")
		if len(fns) == 0 || len(parts) < 3 {
			continue
		}
		in := asmInst{op: parts[2], pos: parts[1]}
		if len(parts) > 3 {
			in.args = parts[3]
		}
		if i := strings.Index(in.pos, "("); i >= 0 {
			in.pos = strings.Trim(in.pos[i:], "()")
		}
		fns[len(fns)-1].insts = append(fns[len(fns)-1].insts, in)
	}
	return fns
}

// legacyInVEX returns, by function, the legacy SSE instructions on vector
// registers (with their source lines) of the functions of an asm -S
// listing that also use V-prefixed instructions.
func legacyInVEX(listing []byte) map[string][]string {
	bad := map[string][]string{}
	for _, f := range parseListing(listing) {
		vex := false
		var legacy []string
		for _, in := range f.insts {
			switch {
			case strings.HasPrefix(in.op, "V"):
				vex = true
			case vecReg.MatchString(in.args):
				legacy = append(legacy, in.op+" "+in.args+" ("+filepath.Base(in.pos)+")")
			}
		}
		if vex && len(legacy) > 0 {
			bad[f.name] = legacy
		}
	}
	return bad
}

// wideReg matches a YMM or ZMM register operand.
var wideReg = regexp.MustCompile(`(^|[^A-Za-z0-9_])[YZ]([0-9]|[12][0-9]|3[01])([^0-9]|$)`)

// dirtyReturns lists the RETs of an asm -S listing reached, in listing
// order, after a YMM/ZMM operand without a VZEROUPPER between: the Go code
// after the call (whose float math is legacy SSE) would then run with the
// upper halves in use, the cost TestNoLegacySSEInVEXCode is about. Every
// epilogue here is straight-line, so listing order is execution order.
func dirtyReturns(listing []byte) []string {
	var out []string
	for _, f := range parseListing(listing) {
		dirty := false
		for _, in := range f.insts {
			switch {
			case in.op == "VZEROUPPER":
				dirty = false
			case in.op == "RET" && dirty:
				out = append(out, f.name+": RET without VZEROUPPER after YMM/ZMM use ("+in.pos+")")
			case wideReg.MatchString(in.args):
				dirty = true
			}
		}
	}
	return out
}

// TestLegacyInVEXFinds: the check catches the form that was slow, in a
// macro, and leaves SSE-only functions alone.
func TestLegacyInVEXFinds(t *testing.T) {
	listing := []byte("q.slow STEXT nosplit size=10\n" +
		"\t0x0000 00000 (k.s:3)\tVXORPS\tY0, Y0, Y0\n" +
		"\t0x0004 00004 (k.s:9)\tMOVQ\tAX, X6\n" +
		"\t0x0009 00009 (k.s:10)\tMOVQ\tAX, BX\n" +
		"q.sse STEXT nosplit size=10\n" +
		"\t0x0000 00000 (k.s:20)\tMOVQ\tAX, X6\n" +
		"\t0x0005 00005 (k.s:21)\tMULSS\tX6, X7\n")
	bad := legacyInVEX(listing)
	if len(bad) != 1 || len(bad["q.slow"]) != 1 || !strings.Contains(bad["q.slow"][0], "MOVQ AX, X6 (k.s:9)") {
		t.Fatalf("found %v", bad)
	}
	rets := []byte("q.clean STEXT\n\t0x0 0 (k.s:1)\tVADDPS\tY1, Y0, Y0\n\t0x4 4 (k.s:2)\tVZEROUPPER\t\n" +
		"\t0x7 7 (k.s:3)\tVMOVSS\tX0, ret+24(FP)\n\t0xc 12 (k.s:4)\tRET\t\n" +
		"q.dirty STEXT\n\t0x0 0 (k.s:9)\tVADDPS\tY1, Y0, Y0\n\t0x4 4 (k.s:10)\tRET\t\n")
	if r := dirtyReturns(rets); len(r) != 1 || !strings.HasPrefix(r[0], "q.dirty:") {
		t.Fatalf("dirty returns %v", r)
	}
}
