package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestP2PGrid(t *testing.T) {
	for _, c := range []struct{ n, blocks int }{
		{0, 1}, {3, 1}, {4096, 4}, {4097, 4}, {128256, 126}, {1 << 18, 128}, {1 << 20, 128},
	} {
		b, th := p2pGrid(c.n)
		if b != c.blocks || th != p2pThreads {
			t.Errorf("p2pGrid(%d) = %d×%d, want %d×%d", c.n, b, th, c.blocks, p2pThreads)
		}
	}
	if s := p2pSlotFloats(P2PMaxFloats); s != P2PMaxFloats || p2pSlotFloats(100) != 128 || p2pSlotFloats(1) != 64 {
		t.Errorf("slot rounding: %d %d %d", s, p2pSlotFloats(100), p2pSlotFloats(1))
	}
	if got := p2pRegionBytes(2, 64); got != p2pFlagBytes+2*2*64*4+2*2*p2pLLFloats*8 {
		t.Errorf("region bytes %d", got)
	}
	if got := p2pLLOffset(2, 64); got != p2pFlagBytes+2*2*64*4 || got%16 != 0 {
		t.Errorf("low-latency slots at %d", got)
	}
	for _, c := range []struct {
		n      int
		ll     bool
		blocks int
	}{{4096, true, 8}, {5120, true, 10}, {8192, true, 16}, {512, true, 1}, {896, false, 0}, {4099, false, 0}, {8704, false, 0}, {0, false, 0}} {
		if p2pLL(c.n) != c.ll {
			t.Errorf("p2pLL(%d) = %v", c.n, !c.ll)
		} else if b, th := p2pLLGrid(c.n); c.ll && (b != c.blocks || th != p2pLLThreads || p2pLLEpoch+b > 64) {
			t.Errorf("p2pLLGrid(%d) = %d×%d", c.n, b, th)
		}
	}
}

// TestP2PRendezvous runs the two rounds of the join for three ranks as
// goroutines sharing a directory, including one rank that declines.
func TestP2PRendezvous(t *testing.T) {
	for _, decline := range []bool{false, true} {
		dir := t.TempDir()
		const world = 3
		var wg sync.WaitGroup
		whys := make([]string, world)
		for r := range world {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(r) * 15 * time.Millisecond)
				rec := p2pRecord{Rank: r, OK: true, Bus: fmt.Sprintf("0000:%02x:00.0", r), Slot: 64, Handle: make([]byte, p2pHandleSize)}
				if decline && r == 1 {
					rec = p2pRecord{Rank: r, Why: "disabled by POCKET_P2P=0"}
				}
				if err := p2pPublish(dir, "p2p-handle", r, rec); err != nil {
					whys[r] = err.Error()
					return
				}
				recs, err := p2pGather[p2pRecord](dir, "p2p-handle", world, 5*time.Second)
				if err != nil {
					whys[r] = err.Error()
					return
				}
				if why := p2pCheckRecords(recs); why != "" {
					whys[r] = why
					return
				}
				if err := p2pPublish(dir, "p2p-verdict", r, p2pVerdict{Rank: r, OK: true}); err != nil {
					whys[r] = err.Error()
					return
				}
				vs, err := p2pGather[p2pVerdict](dir, "p2p-verdict", world, 5*time.Second)
				if err != nil {
					whys[r] = err.Error()
					return
				}
				whys[r] = p2pCheckVerdicts(vs)
			}()
		}
		wg.Wait()
		for r, why := range whys {
			if decline != (why != "") || decline && !strings.Contains(why, "rank 1: disabled") {
				t.Errorf("decline=%v: rank %d: %q", decline, r, why)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "p2p-handle-0.json.tmp")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temporary file left: %v", err)
		}
	}
	// A rank that never publishes: the wait ends with an error naming it.
	dir := t.TempDir()
	p2pPublish(dir, "p2p-handle", 0, p2pRecord{Rank: 0, OK: true, Slot: 64, Handle: make([]byte, p2pHandleSize)})
	if _, err := p2pGather[p2pRecord](dir, "p2p-handle", 2, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("missing rank: %v", err)
	}
	// Records that disagree.
	recs := []p2pRecord{{Rank: 0, OK: true, Slot: 64, Handle: make([]byte, 64)}, {Rank: 1, OK: true, Slot: 128, Handle: make([]byte, 64)}}
	if why := p2pCheckRecords(recs); !strings.Contains(why, "floats per slot") {
		t.Errorf("slot mismatch: %q", why)
	}
	recs[1].Slot, recs[1].LL = 64, true
	if why := p2pCheckRecords(recs); !strings.Contains(why, "low-latency") {
		t.Errorf("low-latency kernel on one rank only: %q", why)
	}
}

// TestP2PProtocol is a model of p2p.cu's protocol in Go: ranks are
// goroutines, each call a "kernel" whose blocks are goroutines (in any
// order, all resident), every shared word an atomic (so this checks the
// epoch, parity and flag logic, not the GPU's memory ordering). Ranks run
// the same sequence of calls of varying sizes (so of varying grids) with
// random delays; every result must be the rank-order sum, identical on
// every rank, and no wait may time out. The sizes p2pLL takes run the
// low-latency kernel (p2p_allreduce_ll: a word is its value and the epoch,
// an epoch per block), the others the flag kernel, interleaved as a step
// interleaves them.
func TestP2PProtocol(t *testing.T) {
	const world, slot, calls = 3, 1 << 14, 300
	type region struct {
		flags [p2pMaxBlocks * p2pMaxWorld]atomic.Uint32
		data  []atomic.Uint32 // [2][world][slot] float bits
		ll    []atomic.Uint64 // [2][world][p2pLLFloats] epoch<<32 | float bits
	}
	type rankState struct {
		epoch, done, err atomic.Uint32
		ll               [p2pLLFloats / (4 * p2pLLThreads)]atomic.Uint32 // the low-latency kernel's epochs by block
	}
	regs := make([]*region, world)
	st := make([]*rankState, world)
	for r := range regs {
		regs[r] = &region{data: make([]atomic.Uint32, 2*world*slot), ll: make([]atomic.Uint64, 2*world*p2pLLFloats)}
		st[r] = &rankState{}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, calls)
	for i := range sizes {
		sizes[i] = []int{4096, 5, slot, 1027, 64, 3000, p2pLLFloats, p2pLLFloats + 512, 512, 1536}[rng.IntN(10)]
	}
	// wait waits for ok, or records a timeout on rank (after which the
	// rank's waits give up at once, as the kernels' do).
	wait := func(rank int, ok func() bool) {
		t0 := time.Now()
		for !ok() && st[rank].err.Load() == 0 {
			if time.Since(t0) > 5*time.Second {
				st[rank].err.Store(1)
				return
			}
			runtime.Gosched()
		}
	}
	// advance is the end of a flag-kernel block: the last one stores the
	// epoch.
	advance := func(rank int, e uint32, G int) {
		if st[rank].done.Add(1) == uint32(G) {
			st[rank].done.Store(0)
			st[rank].epoch.Store(e)
		}
	}
	// grid runs G "blocks" as goroutines in a random order, each after a
	// random delay, and waits for them.
	grid := func(G int, delay func(), block func(b int)) {
		var wg sync.WaitGroup
		for _, b := range rand.Perm(G) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				delay()
				block(b)
			}()
		}
		wg.Wait()
	}
	// rankSum is element i's sum over the ranks in rank order: rank's own
	// value from buf, the others' from peer(s).
	rankSum := func(rank int, buf []uint32, i int, peer func(s int) uint32) uint32 {
		var acc float32
		for s := range world {
			v := buf[i]
			if s != rank {
				v = peer(s)
			}
			if s == 0 {
				acc = math.Float32frombits(v)
			} else {
				acc += math.Float32frombits(v)
			}
		}
		return math.Float32bits(acc)
	}
	// kernelLL is one low-latency call of rank on buf: block b pushes its
	// float4s to every peer, then reads them back from each, under its own
	// epoch.
	kernelLL := func(rank int, buf []uint32, delay func()) {
		G, T := p2pLLGrid(len(buf))
		grid(G, delay, func(b int) {
			e := st[rank].ll[b].Load() + 1
			par := int(e & 1)
			for i := 4 * b * T; i < 4*(b+1)*T; i++ {
				for q := range world {
					if q != rank {
						regs[q].ll[(par*world+rank)*p2pLLFloats+i].Store(uint64(e)<<32 | uint64(buf[i]))
					}
				}
			}
			for i := 4 * b * T; i < 4*(b+1)*T; i++ {
				buf[i] = rankSum(rank, buf, i, func(s int) uint32 {
					w := &regs[rank].ll[(par*world+s)*p2pLLFloats+i]
					wait(rank, func() bool { return uint32(w.Load()>>32) == e })
					return uint32(w.Load())
				})
			}
			st[rank].ll[b].Store(e)
		})
	}
	kernel := func(rank int, buf []uint32, delay func()) {
		n := len(buf)
		if p2pLL(n) {
			kernelLL(rank, buf, delay)
			return
		}
		G, T := p2pGrid(n)
		T = min(T, 8) // fewer "threads" per block: same logic, more blocks per element range
		G = min(G, max(1, (n/4+T-1)/T))
		n4 := n / 4
		units := func(b int, f func(i int)) { // the elements of block b
			for tid := range T {
				for i := b*T + tid; i < n4; i += G * T {
					for j := range 4 {
						f(4*i + j)
					}
				}
			}
			if b == 0 {
				for i := 4 * n4; i < n; i++ {
					f(i)
				}
			}
		}
		grid(G, delay, func(b int) {
			e := st[rank].epoch.Load() + 1
			par := int(e & 1)
			for q := range world {
				if q == rank {
					continue
				}
				units(b, func(i int) { regs[q].data[(par*world+rank)*slot+i].Store(buf[i]) })
			}
			for q := range world {
				if q != rank {
					regs[q].flags[b*p2pMaxWorld+rank].Store(e)
				}
			}
			for q := range world {
				if q == rank {
					continue
				}
				f := &regs[rank].flags[b*p2pMaxWorld+q]
				wait(rank, func() bool { return int32(f.Load()-e) >= 0 })
			}
			units(b, func(i int) {
				buf[i] = rankSum(rank, buf, i, func(s int) uint32 { return regs[rank].data[(par*world+s)*slot+i].Load() })
			})
			advance(rank, e, G)
		})
	}
	results := make([][][]uint32, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(r), 9))
			var mu sync.Mutex
			delay := func() {
				mu.Lock()
				d, us := rr.IntN(4), rr.IntN(50)
				mu.Unlock()
				if d == 0 {
					time.Sleep(time.Duration(us) * time.Microsecond)
				}
				runtime.Gosched()
			}
			for c, n := range sizes {
				buf := make([]uint32, n)
				for i := range buf {
					buf[i] = math.Float32bits(float32(r+1)*0.1 + float32(c) + float32(i%97)*0.01)
				}
				kernel(r, buf, delay)
				results[r] = append(results[r], buf)
			}
		}()
	}
	wg.Wait()
	for r := range world {
		if st[r].err.Load() != 0 {
			t.Fatalf("rank %d: a wait timed out", r)
		}
	}
	for c, n := range sizes {
		for i := range n {
			var want float32
			for s := range world {
				v := float32(s+1)*0.1 + float32(c) + float32(i%97)*0.01
				if s == 0 {
					want = v
				} else {
					want += v
				}
			}
			for r := range world {
				if got := math.Float32frombits(results[r][c][i]); got != want {
					t.Fatalf("call %d (n=%d) rank %d [%d] = %g, want %g", c, n, r, i, got, want)
				}
			}
		}
	}
}
