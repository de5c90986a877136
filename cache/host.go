package cache

import (
	"encoding/binary"
	"fmt"

	"github.com/dgraph-io/ristretto/v2"
)

// hostTier keeps evicted blocks' KV bytes in host memory, bounded by bytes
// (ristretto's cost). It is a cache, not a store: a block it dropped (or
// declined to admit) is recomputed from the tokens when it is needed.
type hostTier struct {
	c     *ristretto.Cache[string, []float32]
	limit int64
}

func newHostTier(limit, blockBytes int64) (*hostTier, error) {
	items := max(limit/max(blockBytes, 1), 1)
	c, err := ristretto.NewCache(&ristretto.Config[string, []float32]{
		NumCounters:        max(items*10, 100),
		MaxCost:            limit,
		BufferItems:        64,
		Metrics:            true, // RemainingCost needs the policy's accounting
		IgnoreInternalCost: true, // cost is exactly the block's bytes
		KeyToHash: func(k string) (uint64, uint64) {
			return binary.LittleEndian.Uint64([]byte(k[:8])), binary.LittleEndian.Uint64([]byte(k[8:16]))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("host tier: %w", err)
	}
	return &hostTier{c: c, limit: limit}, nil
}

func (h *hostTier) put(k Key, data []float32) bool {
	ok := h.c.Set(string(k[:]), data, int64(len(data))*4)
	h.c.Wait() // make the block visible to the next get
	_, ok2 := h.c.Get(string(k[:]))
	return ok && ok2
}

func (h *hostTier) get(k Key) ([]float32, bool) { return h.c.Get(string(k[:])) }

func (h *hostTier) has(k Key) bool {
	_, ok := h.c.Get(string(k[:]))
	return ok
}

func (h *hostTier) del(k Key) {
	h.c.Del(string(k[:]))
	h.c.Wait() // keep used() exact
}

func (h *hostTier) used() int64 { return h.c.MaxCost() - h.c.RemainingCost() }

func (h *hostTier) close() { h.c.Close() }
