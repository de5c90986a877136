package worker

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// TestSharedMemoryOverWorker: with the shared-memory region (the
// default), KV blocks through the host tier and logits travel through it
// and the tokens stay exactly the in-process model's; without one
// (SharedBytes < 0), or with one too small for a block, they travel in
// frames, just as exactly.
func TestSharedMemoryOverWorker(t *testing.T) {
	for _, world := range worlds() {
		for _, size := range []int64{0, -1, 4096} {
			t.Run(fmt.Sprintf("tp%d/shared%d", world, size), func(t *testing.T) {
				px := startWith(t, "qwen3", Options{World: world, Timeout: time.Minute, SharedBytes: size})
				for _, pr := range px.cur.ranks {
					if want := px.sharedBytes(); pr.shmSize != want {
						t.Fatalf("rank %d: %d bytes of shared memory, want %d", pr.rank, pr.shmSize, want)
					}
				}
				m := inProcess(t, "qwen3")
				cfg := func(r session.Runner) session.ModelConfig {
					return session.ModelConfig{Name: "qwen3", Model: r, KVBlocks: 8, BlockSize: 16, HostTierBytes: 64 << 20}
				}
				p := &pair{t: t, local: newManager(t, cfg(m)), remote: newManager(t, cfg(px)), model: "qwen3", ids: map[string][2]string{}, inproc: m}
				for i := range 4 {
					name := fmt.Sprint("s", i)
					p.open(name)
					p.append(name, prompt(50, int32(i%2)))
					p.generate(name, session.GenerateParams{MaxTokens: 3, Logprobs: true})
				}
				p.fork("s0", "f", 20)
				p.generate("f", session.GenerateParams{MaxTokens: 4})
				p.generate("s1", session.GenerateParams{MaxTokens: 4, Logprobs: true})
				if info := p.remote.Models()[0]; info.HostTierBytes == 0 {
					t.Fatalf("no block went through the host tier: %+v", info)
				}
				// A new session with s1's prompt takes its blocks back
				// from the host tier.
				p.open("b")
				if r := p.append("b", prompt(50, 1)); r.Reused == 0 {
					t.Fatalf("no prefix reuse: %+v", r)
				}
				p.generate("b", session.GenerateParams{MaxTokens: 4})
				// Every block round-trips exactly: read, overwrite with a
				// pattern, read that back, restore; the sessions then go on
				// with the in-process tokens.
				n := int(px.pool.spec.BytesPerBlock() / 4)
				for blk := range px.pool.spec.Blocks {
					orig, got := make([]float32, n), make([]float32, n)
					px.ReadKVBlock(px.pool, blk, orig)
					pat := make([]float32, n)
					for i := range pat {
						pat[i] = float32(i%977) - float32(blk)/3
					}
					px.WriteKVBlock(px.pool, blk, pat)
					px.ReadKVBlock(px.pool, blk, got)
					if fmt.Sprint(got) != fmt.Sprint(pat) {
						t.Fatalf("block %d: the pattern did not come back", blk)
					}
					px.WriteKVBlock(px.pool, blk, orig)
				}
				if err := px.Health(); err != nil {
					t.Fatal(err)
				}
				p.generate("b", session.GenerateParams{MaxTokens: 3})
				p.generate("s3", session.GenerateParams{MaxTokens: 3})
				reads, writes, logits := px.shared.reads.Load(), px.shared.writes.Load(), px.shared.logits.Load()
				perRank := px.KVSpec(1, 16).BytesPerBlock() / int64(world)
				blocksFit := perRank <= px.sharedBytes()
				logitsFit := int64(px.cfg.VocabSize)*4 <= px.sharedBytes()
				t.Logf("shared memory: %d block reads, %d block writes, %d logits (block %d bytes a rank, region %d)", reads, writes, logits, perRank, px.sharedBytes())
				if (reads > 0) != blocksFit || (writes > 0) != blocksFit || (logits > 0) != logitsFit {
					t.Fatalf("shared transfers: %d reads, %d writes, %d logits; blocks fit %v, logits fit %v", reads, writes, logits, blocksFit, logitsFit)
				}
			})
		}
	}
}

// sharedFake is fakeProxy whose worker has a shared region of 4096 bytes.
func sharedFake(t *testing.T) (*Proxy, *kvPool, func([]byte)) {
	p, kp, peer := fakeProxy(t)
	f, err := newShared("test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	pr := p.cur.ranks[0]
	pr.shm, pr.shmSize = f, 4096
	return p, kp, func(raw []byte) { go answer(peer, raw) }
}

// TestMalformedSharedReplies: references outside the region, unaligned
// or of the wrong size lose the worker (a block read is zeroed); good
// ones are read from the region.
func TestMalformedSharedReplies(t *testing.T) {
	refPayload := func(off uint64, n uint32) []byte {
		var e enc
		e.u64(off)
		e.u32(n)
		return e.b
	}
	for name, raw := range map[string][]byte{
		"past the end":     rawFrame(msgLogitsShared, 1, refPayload(4096, 8)),
		"straddles":        rawFrame(msgLogitsShared, 1, refPayload(4096-16, 8)),
		"huge offset":      rawFrame(msgLogitsShared, 1, refPayload(1<<62, 8)),
		"wrapping offset":  rawFrame(msgLogitsShared, 1, refPayload(^uint64(0)-3, 8)),
		"huge count":       rawFrame(msgLogitsShared, 1, refPayload(0, 1<<31)),
		"unaligned":        rawFrame(msgLogitsShared, 1, refPayload(2, 8)),
		"wrong count":      rawFrame(msgLogitsShared, 1, refPayload(0, 7)),
		"short":            rawFrame(msgLogitsShared, 1, refPayload(0, 8)[:10]),
		"trailing bytes":   rawFrame(msgLogitsShared, 1, append(refPayload(0, 8), 0)),
		"block for logits": rawFrame(msgBlockShared, 1, refPayload(0, 8)),
	} {
		t.Run(name, func(t *testing.T) {
			p, kp, reply := sharedFake(t)
			reply(raw)
			_, err := p.Forward(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1}, models.LastLogits)
			if !errors.Is(err, ErrWorkerLost) || !errors.Is(err, session.ErrKVLost) {
				t.Fatalf("want a lost worker, got %v", err)
			}
		})
	}
	// Without a region, any reference is bad.
	p, kp, peer := fakeProxy(t)
	go answer(peer, rawFrame(msgLogitsShared, 1, refPayload(0, 8)))
	if _, err := p.Forward(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1}, models.LastLogits); !errors.Is(err, ErrWorkerLost) {
		t.Fatalf("reference without a region: %v", err)
	}
	// Good replies: logits at an offset, a block.
	p, kp, reply := sharedFake(t)
	pr := p.cur.ranks[0]
	want := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	if _, err := pr.shm.WriteAt(f32Bytes(want), 64); err != nil {
		t.Fatal(err)
	}
	reply(rawFrame(msgLogitsShared, 1, refPayload(64, 8)))
	if l, err := p.Forward(models.Seq{Pool: kp, Table: []int32{0}}, []int32{1}, models.LastLogits); err != nil || fmt.Sprint(l) != fmt.Sprint(want) {
		t.Fatalf("good shared logits: %v %v", l, err)
	}
	n := int(kp.spec.BytesPerBlock() / 4)
	block := make([]float32, n)
	for i := range block {
		block[i] = float32(i) + 0.5
	}
	p, kp, reply = sharedFake(t)
	p.cur.ranks[0].shm.WriteAt(f32Bytes(block), 0)
	reply(rawFrame(msgBlockShared, 1, refPayload(0, uint32(n))))
	dst := make([]float32, n)
	p.ReadKVBlock(kp, 0, dst)
	if fmt.Sprint(dst) != fmt.Sprint(block) {
		t.Fatalf("good shared block: %v", dst)
	}
	// A bad block reference zeroes the block and loses the worker.
	p, kp, reply = sharedFake(t)
	reply(rawFrame(msgBlockShared, 1, refPayload(4096, uint32(n))))
	dst = append([]float32(nil), block...)
	p.ReadKVBlock(kp, 0, dst)
	for _, v := range dst {
		if v != 0 {
			t.Fatalf("bad shared block left %v", dst)
		}
	}
	if p.Health() == nil {
		t.Fatal("worker not lost after a bad shared block")
	}
}

// TestMappingBounds: the worker refuses references outside its mapping.
func TestMappingBounds(t *testing.T) {
	f, err := newShared("test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Truncate(8192) == nil || f.Truncate(0) == nil {
		t.Fatal("the region is not sealed")
	}
	if _, err := mapShared(f, 8192); err == nil {
		t.Fatal("mapped with the wrong size")
	}
	m, err := mapShared(f, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []shmRef{{off: 4096, count: 1}, {off: 2, count: 1}, {off: 0, count: 1025}, {off: -4, count: 1}, {off: 4092, count: 2}} {
		if _, err := m.floats(r, "x"); !errors.Is(err, errBadRequest) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	if v, err := m.floats(shmRef{off: 4092, count: 1}, "x"); err != nil || len(v) != 1 {
		t.Fatalf("last float: %v %v", v, err)
	}
	var none *mapping
	if _, err := none.floats(shmRef{count: 1}, "x"); !errors.Is(err, errBadRequest) || none.fits(1) {
		t.Fatalf("no mapping: %v", err)
	}
}

// TestLargeSharedCopies checks the chunked copies of large transfers
// (copyParallel: a hybrid's state snapshot) against the region's bytes,
// at sizes that split into uneven chunks and at a non-zero offset.
func TestLargeSharedCopies(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	const size = 64 << 20
	f, err := newShared("copies", size)
	if err != nil {
		t.Skip("no memfd:", err)
	}
	defer f.Close()
	for _, n := range []int{parallelCopyMin - 4, parallelCopyMin, 3*parallelCopyMin + 4100, size / 2} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + n)
		}
		if err := writeShared(f, src); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, n)
		if _, err := f.ReadAt(back, 0); err != nil || !bytes.Equal(back, src) {
			t.Fatalf("%d bytes written in chunks differ from the region's (err %v)", n, err)
		}
		const off = 4100
		if _, err := f.WriteAt(src, off); err != nil {
			t.Fatal(err)
		}
		clear(back)
		if err := readAtParallel(f, back, off, "test"); err != nil || !bytes.Equal(back, src) {
			t.Fatalf("%d bytes read in chunks at offset %d differ (err %v)", n, off, err)
		}
	}
}
