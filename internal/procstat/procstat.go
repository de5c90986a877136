// Package procstat reads this process's own statistics from /proc.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// ResidentBytes is the process's resident set size (VmRSS in
// /proc/self/status), or 0 where that cannot be read.
func ResidentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
