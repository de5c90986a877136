package worker

import (
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// TestPoolRoom: a pool sized to a device leaves the reserve (or an eighth
// of the free memory) free, counts a rank's share of the heads, holds
// twice the blocks in float16 (not for a latent cache), and is not sized
// where the ranks report no device memory; the free bytes cross the
// handshake.
func TestPoolRoom(t *testing.T) {
	kv := kernels.KVSpec{Layers: 32, KVHeads: 8, HeadDimK: 128, HeadDimV: 128} // Llama-3-8B: 4 MiB a float32 block of 16
	const gib = int64(1) << 30
	for _, c := range []struct {
		name      string
		world     int
		kv        kernels.KVSpec
		free      int64
		half      bool
		want      int
		wantKnown bool
	}{
		{"cpu", 1, kv, 0, false, 0, false},
		{"8 GiB free", 1, kv, 8 * gib, false, 1536, true},   // 8 - 2 GiB reserve = 6 GiB / 4 MiB
		{"f16", 1, kv, 8 * gib, true, 3072, true},           // 2 MiB blocks
		{"a big card", 1, kv, 64 * gib, false, 14336, true}, // an eighth kept: 56 GiB / 4 MiB
		{"tp2", 2, kv, 8 * gib, false, 3072, true},          // each rank holds half the heads
		{"nothing left", 1, kv, gib, false, 0, true},
		{"latent f16", 1, kernels.KVSpec{Layers: 4, KVHeads: 1, HeadDimK: 576}, 4 * gib, true, int(2 * gib / (4 * 16 * 576 * 4)), true}, // stays float32
	} {
		p := &Proxy{ready: Ready{KV: c.kv, FreeBytes: c.free}, opts: Options{World: c.world}}
		got, known := p.PoolRoom(16, c.half, 2*gib)
		if got != c.want || known != c.wantKnown {
			t.Errorf("%s: %d blocks (known %v), want %d (%v)", c.name, got, known, c.want, c.wantKnown)
		}
	}
	r := Ready{Version: Version, Backend: "cuda", KV: kv, FreeBytes: 77 * gib}
	back, err := decodeReady(r.encode())
	if err != nil || back.FreeBytes != r.FreeBytes {
		t.Fatalf("ready round trip: %+v, %v", back, err)
	}
}
