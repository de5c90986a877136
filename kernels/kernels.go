// Package kernels owns the Backend interface: the small set of device
// buffers and operations a transformer forward pass needs, and the weight
// formats those operations consume. Model code calls only these methods, so
// it never knows whether it runs on the CPU, on CUDA, or as one rank of a
// tensor-parallel group.
//
// The interface is deliberately narrow (in the spirit of ggml's backend
// table): activations are float32 buffers owned by the backend, weights are
// opaque Tensors made from host-side Weight views (usually memory-mapped
// checkpoint bytes), and KV state lives in a paged KVPool addressed through
// block tables that the cache package manages.
//
// Families that need more than this table extend it with optional
// interfaces that model construction asserts once (ErrUnsupported when a
// backend lacks one): HybridOps (deltanet.go) for Gated DeltaNet layers,
// MLAOps (mla.go) for DeepSeek's multi-head latent attention over a
// compressed cache and its sparse (top-k indexed) variant.
package kernels

import (
	"errors"
	"fmt"
)

// ErrUnsupported is returned when a backend cannot execute an op or a weight
// format. Callers branch on it to report capabilities instead of failing late.
var ErrUnsupported = errors.New("unsupported by backend")

// Buf is a backend-owned float32 activation buffer. Its contents are only
// reachable through Backend methods (Read/Write), so a device backend can
// keep it in device memory.
type Buf interface {
	// Len is the number of float32 elements.
	Len() int
}

// Tensor is a backend-resident weight made by Backend.LoadWeight.
type Tensor interface {
	// Weight is the host-side description the tensor was made from.
	Weight() *Weight
}

// RoPE describes rotary position embedding for one attention layer.
type RoPE struct {
	// InvFreq holds RotaryDim/2 inverse frequencies, scaling already applied
	// (llama3, yarn and linear scaling are resolved by the model code).
	InvFreq []float32
	// RotaryDim is the number of leading head dimensions rotated (partial
	// rotary when < head dim).
	RotaryDim int
	// NeoX selects the rotate-half layout (pairs i and i+RotaryDim/2, as
	// transformers does); false selects interleaved pairs (2i, 2i+1).
	NeoX bool
	// Scale multiplies cos and sin (yarn's attention factor); 0 means 1.
	Scale float32
}

// KVSpec fixes the shape of a paged KV pool.
type KVSpec struct {
	Layers    int // number of layers that keep KV
	Blocks    int // blocks in the pool
	BlockSize int // tokens per block
	KVHeads   int
	HeadDimK  int // per-head width of the K rows
	HeadDimV  int // per-head width of the V rows (0: the layer stores no V, e.g. MLA latents)
	// Half asks for K and V stored as float16 (half the memory and the
	// bytes a long context's decode reads), where the backend offers it:
	// the CPU backend, for pools whose K and V rows have one width
	// (attention, not MLA latents). Rows are rounded to float16 when
	// stored and widened exactly when read. BytesPerBlock still counts
	// float32, as blocks read out of the pool are.
	Half bool
}

// HalfRows reports whether a pool of this spec stores float16: asked for
// (Half) and K and V rows of one width (MLA latent pools stay float32).
// Every backend and the worker protocol decide by it.
func (s KVSpec) HalfRows() bool { return s.Half && s.HeadDimK == s.HeadDimV }

// BytesPerBlock is the memory one block takes across all layers (float32).
func (s KVSpec) BytesPerBlock() int64 {
	return int64(s.Layers) * int64(s.BlockSize) * int64(s.KVHeads) * int64(s.HeadDimK+s.HeadDimV) * 4
}

// KVPool is backend memory for paged KV: for every layer, Blocks ×
// BlockSize token slots, each holding KVHeads×HeadDimK keys and
// KVHeads×HeadDimV values. Slot s of a sequence position p is
// table[p/BlockSize]*BlockSize + p%BlockSize.
type KVPool interface {
	Spec() KVSpec
}

// AttnSeq locates the context of the queries of one attention call.
type AttnSeq struct {
	// Table lists the KV blocks of the sequence, in position order.
	Table []int32
	// Start is the position of the first query row; query row i sits at
	// position Start+i and attends causally to positions 0..Start+i.
	Start int
}

// Backend executes the operations of a forward pass. All row-major shapes
// are written as [rows, cols]. Methods that can fail on valid-looking input
// (unsupported formats) return errors; the rest are pure compute whose
// shapes the model code guarantees.
type Backend interface {
	Name() string

	// LoadWeight makes a weight usable by MatMul/Embed/RMSNorm. The CPU
	// backend reads w.Data in place (no float32 copy); a device backend
	// uploads it.
	LoadWeight(w *Weight) (Tensor, error)
	// NewBuf allocates a zeroed activation buffer of n float32 elements.
	NewBuf(n int) Buf
	// Write copies src into b starting at element off.
	Write(b Buf, off int, src []float32)
	// Read copies len(dst) elements of b starting at off into dst.
	Read(b Buf, off int, dst []float32)

	// Embed writes dst[i,:] = table[ids[i],:].
	Embed(dst Buf, table Tensor, ids []int32)
	// MatMul computes dst[r,:] = x[r,:] · wᵀ for r < rows, where w is
	// [out, in]; dst is [rows, out], x is [rows, in].
	MatMul(dst, x Buf, w Tensor, rows int)
	// RMSNorm normalises each of rows rows of width dim: dst = x/rms(x)*w.
	// w has dim elements; dst may be x.
	RMSNorm(dst, x Buf, w Tensor, rows, dim int, eps float32)
	// Add computes dst = a + b over n elements; dst may alias a or b.
	Add(dst, a, b Buf, n int)
	// AddBias adds the vector bias (len dim) to each of rows rows of x.
	AddBias(x Buf, bias Tensor, rows, dim int)
	// SwiGLU computes dst = silu(gate) * up over n elements.
	SwiGLU(dst, gate, up Buf, n int)
	// RoPE rotates x, [rows, heads*headDim], row r at position pos[r].
	RoPE(x Buf, pos []int32, heads, headDim int, r *RoPE)

	KVOps

	// StoreKV writes rows of k [rows, KVHeads*HeadDimK] and v [rows,
	// KVHeads*HeadDimV] of one layer into the given slots.
	StoreKV(p KVPool, layer int, k, v Buf, slots []int32)
	// Attention computes causal grouped-query attention of q [rows,
	// heads*HeadDimK] against the layer's cached keys and values, writing
	// dst [rows, heads*HeadDimV]. scale multiplies q·k.
	Attention(dst, q Buf, p KVPool, layer int, seq AttnSeq, rows, heads int, scale float32)

	// Gather copies rows idx[i] of src [*, dim] into dst row i.
	Gather(dst, src Buf, idx []int32, dim int)
	// ScatterAdd adds w[i]*src[i,:] into dst row idx[i] (MoE combine).
	ScatterAdd(dst, src Buf, idx []int32, w []float32, dim int)
}

// Check returns an error when a buffer is shorter than needed; model code
// uses it at build time so that shapes are validated once, not per op.
func Check(name string, b Buf, need int) error {
	if b.Len() < need {
		return fmt.Errorf("buffer %s: %d elements, need %d", name, b.Len(), need)
	}
	return nil
}

// KVOps are the operations on whole KV blocks that the cache package
// performs: allocation, copy-on-write copies and moves to and from the
// host tier. They are separate from Backend so that the cache can manage
// KV held by a worker process through a proxy that has no other ops.
type KVOps interface {
	// NewKVPool allocates a paged KV pool.
	NewKVPool(spec KVSpec) (KVPool, error)
	// CopyKVBlock copies block src to block dst in every layer (copy on write).
	CopyKVBlock(p KVPool, dst, src int)
	// ReadKVBlock copies block's keys and values in every layer into dst,
	// BytesPerBlock()/4 elements laid out per layer as the block's K slots
	// then its V slots (the host tier's format).
	ReadKVBlock(p KVPool, block int, dst []float32)
	// WriteKVBlock is the inverse of ReadKVBlock: it fills block from src.
	WriteKVBlock(p KVPool, block int, src []float32)
}
