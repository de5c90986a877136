package procstat

import (
	"runtime"
	"testing"
)

func TestResidentBytes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if n := ResidentBytes(); n <= 0 {
		t.Fatalf("ResidentBytes() = %d, want > 0", n)
	}
}
