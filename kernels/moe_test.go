package kernels

import (
	"math"
	"slices"
	"testing"
)

// TestExpertRows checks the grouping by expert of a routing result: rows
// in row order with their weights, ids out of range or NaN skipped, the
// most rows of one expert.
func TestExpertRows(t *testing.T) {
	nan := float32(math.NaN())
	// Three rows, top-2 of 4 experts: ids then weights per row.
	route := []float32{
		2, 0, 0.7, 0.3,
		2, 3, 0.6, 0.4,
		nan, 5, 0.5, 0.5, // a failed step's NaN and an id past the experts
	}
	perRow, perW, most := ExpertRows(route, 3, 2, 4)
	wantRows := [][]int32{{0}, nil, {0, 1}, {1}}
	wantW := [][]float32{{0.3}, nil, {0.7, 0.6}, {0.4}}
	for id := range 4 {
		if !slices.Equal(perRow[id], wantRows[id]) || !slices.Equal(perW[id], wantW[id]) {
			t.Errorf("expert %d: rows %v weights %v, want %v %v", id, perRow[id], perW[id], wantRows[id], wantW[id])
		}
	}
	if most != 2 {
		t.Errorf("most = %d, want 2", most)
	}
}
