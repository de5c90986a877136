package worker

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
)

// preparing is the CPU backend with kernels.DecodePreparer: it records
// when PrepareDecode runs (after the KV pool or before it) and may fail.
type preparing struct {
	*cpu.Backend
	pool      bool // NewKVPool has run
	calls     int
	afterPool bool
	err       error
}

func (p *preparing) NewKVPool(s kernels.KVSpec) (kernels.KVPool, error) {
	p.pool = true
	return p.Backend.NewKVPool(s)
}

func (p *preparing) PrepareDecode(need int64) (string, error) {
	p.calls++
	p.afterPool = p.pool
	return "nothing to prepare", p.err
}

func helloPreparing(t *testing.T, be *preparing, blocks int) (*rank, func(), error) {
	t.Helper()
	rk := &rank{opts: RankOptions{Backend: "cpu",
		NewBackend: func(_, _, _ int) (kernels.Backend, error) { return be, nil }},
		log: slog.New(slog.DiscardHandler), w: io.Discard}
	h := Hello{Version: Version, Backend: "cpu", Threads: 1, Name: "qwen3", Path: fixture("qwen3")}
	if blocks > 0 {
		h.Pool = inProcess(t, "qwen3").KVSpec(blocks, 4)
	}
	closeFn, err := rk.hello(frame{typ: msgHello, payload: h.encode()})
	return rk, closeFn, err
}

// TestRankPreparesDecode: a rank whose backend offers decode copies makes
// them once, after its first KV pool (the copies take what memory the
// pool leaves), whether the pool comes in the hello (a restarted worker)
// or after it (the daemon's first start); a failure to make them is the
// pool's error.
func TestRankPreparesDecode(t *testing.T) {
	be := &preparing{Backend: cpu.New(1)}
	_, closeFn, err := helloPreparing(t, be, 8)
	if err != nil {
		t.Fatal(err)
	}
	closeFn()
	if be.calls != 1 || !be.afterPool {
		t.Fatalf("pool in the hello: PrepareDecode ran %d times, after the pool: %v", be.calls, be.afterPool)
	}

	be = &preparing{Backend: cpu.New(1)}
	rk, closeFn, err := helloPreparing(t, be, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if be.calls != 0 {
		t.Fatalf("PrepareDecode ran before any pool")
	}
	spec := rk.model.KVSpec(8, 4)
	for range 2 {
		if err := rk.newPool(spec); err != nil {
			t.Fatal(err)
		}
	}
	if be.calls != 1 || !be.afterPool {
		t.Fatalf("pool after the hello: PrepareDecode ran %d times, after the pool: %v", be.calls, be.afterPool)
	}

	boom := errors.New("no room")
	if _, _, err := helloPreparing(t, &preparing{Backend: cpu.New(1), err: boom}, 8); !errors.Is(err, boom) {
		t.Fatalf("hello with a failing PrepareDecode: %v", err)
	}
}
