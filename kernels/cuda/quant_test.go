//go:build cuda

package cuda

import (
	"errors"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// TestLoadWeightMatchesCapabilities checks that the capability table that
// `pocketd inspect` reports (kernels.Executes) and this backend's
// LoadWeight agree on every DType: the table is the only place pocketd
// learns what CUDA runs. Needs a GPU (the cu package exits without one).
func TestLoadWeightMatchesCapabilities(t *testing.T) {
	for d := kernels.DType(0); d.Valid(); d++ {
		if got, want := loadable(d), kernels.Executes("cuda", d); got != want {
			t.Errorf("%s: LoadWeight accepts %v, capability table says %v", d, got, want)
		}
	}
	b, err := New(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for d := kernels.DType(0); d.Valid(); d++ {
		const rows, cols = 2, 256
		rb, err := d.RowBytes(cols)
		if err != nil {
			t.Fatal(err)
		}
		w := &kernels.Weight{Name: d.String(), DType: d, Shape: []int{rows, cols}, Data: make([]byte, rows*rb)}
		if d == kernels.F8E4M3 {
			w.ScaleBlock = [2]int{128, 128}
			w.Scale = []float32{1, 1}
		}
		_, err = b.LoadWeight(w)
		want := kernels.Executes("cuda", d)
		switch {
		case want && err != nil:
			t.Errorf("%s: capability table says CUDA executes it, LoadWeight: %v", d, err)
		case !want && !errors.Is(err, kernels.ErrUnsupported):
			t.Errorf("%s: capability table says unsupported, LoadWeight returned %v", d, err)
		}
	}
}
