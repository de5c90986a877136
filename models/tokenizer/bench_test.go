package tokenizer

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchText is ~1 MiB of mixed text: the reference cases (code, CJK, emoji,
// many scripts) plus pseudo-random words, so the word cache does not
// answer everything.
func benchText(tb testing.TB) string {
	r := loadReference(tb)
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < 1<<20 {
		for _, s := range r.Cases.Texts {
			b.WriteString(s)
			b.WriteByte(' ')
		}
		for range 2000 {
			n := 1 + rng.IntN(10)
			for range n {
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
			switch rng.IntN(12) {
			case 0:
				b.WriteString(". ")
			case 1:
				b.WriteString(", ")
			case 2:
				b.WriteString("\n")
			case 3:
				b.WriteString(" 42 ")
			default:
				b.WriteByte(' ')
			}
		}
	}
	return b.String()
}

func BenchmarkEncode(b *testing.B) {
	text := benchText(b)
	for _, name := range fixtureNames {
		b.Run(name, func(b *testing.B) {
			tk := loadFixture(b, name)
			b.SetBytes(int64(len(text)))
			c0 := cpuTime()
			for b.Loop() {
				tk.Encode(text)
			}
			reportCPU(b, c0, len(text))
		})
	}
}

func BenchmarkPreTokenize(b *testing.B) {
	text := benchText(b)
	for _, name := range fixtureNames {
		b.Run(name, func(b *testing.B) {
			tk := loadFixture(b, name)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tk.preTokenize(text, 0, func(string) {})
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	text := benchText(b)
	tk := loadFixture(b, "qwen3")
	ids := tk.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tk.Decode(ids)
	}
}

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load("testdata/qwen3"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeGoSource encodes ~1 MiB of real text (Go's net/http
// sources), where the word cache works as it does on natural text.
func BenchmarkEncodeGoSource(b *testing.B) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skip("no go command to find GOROOT")
	}
	files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(goroot)), "src", "net", "http", "*.go"))
	var sb strings.Builder
	for _, f := range files {
		if sb.Len() >= 1<<20 {
			break
		}
		data, err := os.ReadFile(f)
		if err == nil {
			sb.Write(data)
		}
	}
	if sb.Len() == 0 {
		b.Skip("no Go sources under GOROOT")
	}
	text := sb.String()
	for _, name := range fixtureNames {
		b.Run(name, func(b *testing.B) {
			tk := loadFixture(b, name)
			b.SetBytes(int64(len(text)))
			c0 := cpuTime()
			for b.Loop() {
				tk.Encode(text)
			}
			reportCPU(b, c0, len(text))
		})
	}
}

// cpuTime is this process's user+system CPU time: on a shared machine
// wall-clock ns/op swings with the load, CPU time much less.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds CPU-time MB/s (including GC work) as a metric.
func reportCPU(b *testing.B, start time.Duration, n int) {
	d := cpuTime() - start
	if d > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/d.Seconds()/1e6, "cpu-MB/s")
	}
}
