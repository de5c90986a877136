package models_test

import (
	"testing"

	"github.com/pocketllm/pocketllm/internal/simdtest"
)

// TestNarrowerVectorPaths runs this package's tests again as a CPU without
// AVX-512, and as one without AVX2, would run them (internal/simdtest).
func TestNarrowerVectorPaths(t *testing.T) { simdtest.Rerun(t) }
