package models_test

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

// TestExpectedTensorsMatchFixtures checks that the expected-tensor list of
// every fixture's architecture names exactly the fixture's tensors (less
// FP8 scales, rotary caches and unread multi-token-prediction layers) with
// their stored shapes.
func TestExpectedTensorsMatchFixtures(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "models", "*"))
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Skip(err)
			}
			defer ck.Close()
			want, err := models.ExpectedTensors(ck.Config, cpu.New(1))
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, s := range want {
				names[s.Name] = true
				w, err := ck.Source.Weight(s.Name)
				if err != nil {
					t.Errorf("expected %s: %v", s.Name, err)
					continue
				}
				if !slices.Equal(w.Shape, s.Shape) && w.Elems() != product(s.Shape) {
					t.Errorf("%s: fixture %v, expected %v", s.Name, w.Shape, s.Shape)
				}
			}
			v := models.Validate(ck.Config, ck.Source, cpu.New(1))
			for _, n := range ck.Source.Names() {
				if !names[n] && !strings.HasSuffix(n, "_scale_inv") && !slices.Contains(v.Unexpected, n) && !strings.HasSuffix(n, "inv_freq") {
					if !isMTP(n, ck.Config.NumLayers) {
						t.Errorf("fixture tensor %s is not expected", n)
					}
				}
			}
		})
	}
}

func product(s []int) int {
	p := 1
	for _, d := range s {
		p *= d
	}
	return p
}

// isMTP reports a tensor of a layer past the decoder's (the
// multi-token-prediction layers no architecture runs).
func isMTP(name string, layers int) bool {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return false
	}
	n, _, _ := strings.Cut(rest, ".")
	l, err := strconv.Atoi(n)
	return err == nil && l >= layers
}
