package daemon

import (
	"io"
	"log/slog"
	"testing"

	"github.com/pocketllm/pocketllm/session"
)

// roomRunner is a runner whose device holds room KV blocks (known: it
// said so); it records the element type it was asked about.
type roomRunner struct {
	session.Runner
	room  int
	known bool
	half  *bool
}

func (r roomRunner) PoolRoom(blockSize int, half bool, reserve int64) (int, bool) {
	*r.half = half
	return r.room, r.known
}

// TestKVBlocksFor: without cache.kv_blocks a pool is DefaultKVBlocks, or
// what a GPU worker's free memory holds where that is fewer (never under
// minKVBlocks), asked for in the configured element type.
func TestKVBlocksFor(t *testing.T) {
	var half bool
	for _, c := range []struct {
		name  string
		r     session.Runner
		dtype string
		want  int
	}{
		{"cpu", nil, "", DefaultKVBlocks},
		{"unknown room", roomRunner{known: false, half: &half}, "", DefaultKVBlocks},
		{"room to spare", roomRunner{room: 100000, known: true, half: &half}, "", DefaultKVBlocks},
		{"a 24 GB card", roomRunner{room: 1500, known: true, half: &half}, "f16", 1500},
		{"full", roomRunner{room: 3, known: true, half: &half}, "f32", minKVBlocks},
	} {
		half = false
		s := &Server{cfg: Config{Cache: CacheConfig{KVDType: c.dtype}}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if got := s.kvBlocksFor("m", c.r); got != c.want {
			t.Errorf("%s: %d blocks, want %d", c.name, got, c.want)
		}
		if _, ok := c.r.(roomRunner); ok && half != (c.dtype == "f16") {
			t.Errorf("%s: asked for half=%v with kv_dtype %q", c.name, half, c.dtype)
		}
	}
}
