package cuda

// The GPU-independent half of the peer-memory all-reduce (p2p.go): the
// launch shape, and the exchange of IPC handles through files in the
// group's rendezvous directory. No build tag, so it is tested without a
// GPU (p2p_rendezvous_test.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrP2PUnsupported means the group cannot (or, by POCKET_P2P=0, should
// not) use the peer-memory all-reduce; every rank of the group gets it
// alike, and the caller keeps NCCL for every all-reduce.
var ErrP2PUnsupported = errors.New("p2p all-reduce unsupported")

// Limits shared with p2p.cu (P2P_MAXW, P2P_MAXB, P2P_FLAG_BYTES).
const (
	p2pMaxWorld   = 8
	p2pMaxBlocks  = 128
	p2pFlagBytes  = p2pMaxBlocks * p2pMaxWorld * 4
	p2pThreads    = 256 // threads per block: one float4 per thread for up to 128 KiB
	p2pHandleSize = 64  // CUipcMemHandle
)

// P2PMaxFloats is the largest all-reduce (float32 elements per rank) that
// takes the peer-memory kernel; larger ones (prefill) go to NCCL. The
// default covers a decode step's block outputs (hidden size) and the
// vocabulary-parallel logits (128256 floats for Llama 3). Each rank holds
// 2·world slots of this size. All ranks must agree (the join checks).
var P2PMaxFloats = 1 << 18

// p2pGrid is the launch shape for n floats: a function of n alone, so
// every rank uses the same block→element mapping (a block waits only for
// the same block of its peers).
func p2pGrid(n int) (blocks, threads int) {
	n4 := n / 4
	blocks = min(p2pMaxBlocks, max(1, (n4+p2pThreads-1)/p2pThreads))
	return blocks, p2pThreads
}

// p2pSlotFloats rounds a slot's capacity up to 64 floats (256 bytes), so
// every slot stays 16-byte aligned for the float4 accesses.
func p2pSlotFloats(maxFloats int) int { return (max(maxFloats, 64) + 63) &^ 63 }

// p2pLLFloats is the size limit of the low-latency kernel
// (p2p_allreduce_ll, P2P_LL_FLOATS in p2p.cu), which takes sizes that are
// whole blocks of p2pLLThreads float4s: one row of the hidden sizes served
// (up to 8192).
const (
	p2pLLFloats  = 8192
	p2pLLThreads = 128
	p2pLLEpoch   = 16 // P2P_LL_EPOCH: the state word of block 0's epoch (of 64)
)

// p2pLL reports whether n floats take the low-latency kernel.
func p2pLL(n int) bool { return n > 0 && n <= p2pLLFloats && n%(4*p2pLLThreads) == 0 }

// p2pLLGrid is the low-latency kernel's launch shape for n floats (p2pLL):
// a thread per float4.
func p2pLLGrid(n int) (blocks, threads int) { return n / (4 * p2pLLThreads), p2pLLThreads }

// p2pRegionBytes is the size of one rank's exchange region: the flags, the
// flag kernel's slots, then the low-latency kernel's (p2pLLOffset).
func p2pRegionBytes(world, slot int) int64 {
	return p2pLLOffset(world, slot) + 2*int64(world)*p2pLLFloats*8
}

// p2pLLOffset is where the low-latency kernel's slots start in a region.
func p2pLLOffset(world, slot int) int64 { return p2pFlagBytes + 2*int64(world)*int64(slot)*4 }

// p2pRecord is what a rank publishes in round one: whether it can take
// part, and how its exchange region is reached.
type p2pRecord struct {
	Rank   int    `json:"rank"`
	OK     bool   `json:"ok"`
	Why    string `json:"why,omitempty"`
	Bus    string `json:"bus,omitempty"`    // PCI bus id of the rank's GPU
	Slot   int    `json:"slot,omitempty"`   // floats per slot (must agree)
	LL     bool   `json:"ll,omitempty"`     // the low-latency kernel is loaded and on (must agree)
	Handle []byte `json:"handle,omitempty"` // CUipcMemHandle of the region
}

// p2pVerdict is round two: whether the rank could map every peer's region.
type p2pVerdict struct {
	Rank int    `json:"rank"`
	OK   bool   `json:"ok"`
	Why  string `json:"why,omitempty"`
}

// publishFile writes data to path atomically (tmp, then rename).
func publishFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// p2pPublish writes rank's round (name "p2p-handle" or "p2p-verdict").
func p2pPublish(dir, name string, rank int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return publishFile(filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, rank)), b)
}

// p2pGather waits (up to timeout) for every rank's file of a round and
// decodes them, by rank.
func p2pGather[T any](dir, name string, world int, timeout time.Duration) ([]T, error) {
	out := make([]T, world)
	have := make([]bool, world)
	deadline := time.Now().Add(timeout)
	for left := world; ; {
		for r := range world {
			if have[r] {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, r)))
			if err != nil {
				continue
			}
			if err := json.Unmarshal(b, &out[r]); err != nil {
				return nil, fmt.Errorf("p2p: %s of rank %d: %w", name, r, err)
			}
			have[r] = true
			left--
		}
		if left == 0 {
			return out, nil
		}
		if time.Now().After(deadline) {
			var miss []string
			for r, ok := range have {
				if !ok {
					miss = append(miss, fmt.Sprint(r))
				}
			}
			return nil, fmt.Errorf("p2p: no %s from rank %s in %s after %v", name, strings.Join(miss, ","), dir, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// p2pCheckRecords says why the group cannot use peer memory ("" if it
// can): a rank that declined, a bad record, or slots or kernels that
// disagree (every rank must run the same kernel for a size).
func p2pCheckRecords(recs []p2pRecord) string {
	var why []string
	for r, x := range recs {
		switch {
		case x.Rank != r:
			why = append(why, fmt.Sprintf("rank %d: record names rank %d", r, x.Rank))
		case !x.OK:
			why = append(why, fmt.Sprintf("rank %d: %s", r, x.Why))
		case len(x.Handle) != p2pHandleSize:
			why = append(why, fmt.Sprintf("rank %d: IPC handle of %d bytes", r, len(x.Handle)))
		case x.Slot != recs[0].Slot:
			why = append(why, fmt.Sprintf("rank %d: %d floats per slot, rank 0 %d", r, x.Slot, recs[0].Slot))
		case x.LL != recs[0].LL:
			why = append(why, fmt.Sprintf("rank %d: low-latency kernel %v, rank 0 %v (POCKET_P2P_LL)", r, x.LL, recs[0].LL))
		}
	}
	return strings.Join(why, "; ")
}

// p2pCheckVerdicts is p2pCheckRecords for round two.
func p2pCheckVerdicts(vs []p2pVerdict) string {
	var why []string
	for r, v := range vs {
		if !v.OK {
			why = append(why, fmt.Sprintf("rank %d: %s", r, v.Why))
		}
	}
	return strings.Join(why, "; ")
}
