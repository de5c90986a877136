//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// The one-launch FP8 MLP (fp8ffn.cuh, in the fp8mma module): NormMLPAdd
// runs gate/up, the SwiGLU and the down projection with its residual add
// as one persistent grid of one block per SM, where the launch chain of
// pipeNormSwiGLU and pipeGemv would be two grids. POCKET_FP8_FFN=0 keeps
// the two launches.

// ffnFunc is the kernel and the dynamic shared memory it may take (0: not
// loaded).
type ffnFunc struct {
	fn     cFunc
	budget int
	bar    cu.DevicePtr // the grid barrier's count and generation, zeroed once
}

// loadFFN resolves the kernel of the loaded fp8mma module; a failure
// leaves it unset (the MLP stays on two launches).
func (b *Backend) loadFFN(mod cu.Module) {
	b.ffn = ffnFunc{}
	perSM, err := b.dev.Attribute(cu.MaxSharedMemoryPerMultiprocessor)
	if err != nil {
		return
	}
	budget := min(perSM-1024, 227*1024) - ffnStatic
	fn, err := mod.Function("f8ffn_4")
	if err != nil {
		return
	}
	f := cfunc(fn)
	probeName(f, "f8ffn_4")
	if setMaxShm(f, budget) != nil {
		return
	}
	// Every block of the grid must be resident at once: one an SM.
	if n, err := fn.MaxActiveBlocksPerMultiProcessor(32*ffnWarps, int64(budget)); err != nil || n < 1 {
		return
	}
	b.ffn = ffnFunc{fn: f, budget: budget}
}

// NormMLPAdd implements kernels.FusedMLP for FP8 weights with 128-column
// scale blocks whose shapes planFFN takes; it declines the rest (and
// everything under POCKET_FP8_FFN=0, POCKET_FUSED without mlp and add, or
// POCKET_FP8_PIPE=0).
func (b *Backend) NormMLPAdd(x, act kernels.Buf, norm kernels.Tensor, eps float32, gate, up, down kernels.Tensor) bool {
	if switches.noFP8FFN || switches.noFP8Pipe || !switches.fused["mlp"] || !switches.fused["add"] || b.ffn.fn == nil {
		return false
	}
	hid, inter := gate.Weight().Cols(), gate.Weight().Rows()
	nv := normVec(norm, hid)
	fu, okU := formOf(hid, gate, up)
	fd, okD := formOf(inter, down)
	if nv == 0 || !okU || !okD || !fu.fp8 || !fd.fp8 || x.Len() < hid || act.Len() < inter ||
		up.Weight().Rows() != inter || down.Weight().Rows() != hid || dptr(x) == dptr(act) {
		return false
	}
	g, u, d := gate.(*tensor), up.(*tensor), down.(*tensor)
	if _, ok := b.f8mmaVariant(f8SwiGLU, fu, g, u); !ok {
		return false
	}
	if _, ok := b.f8mmaVariant(f8Add, fd, d); !ok {
		return false
	}
	shm, ok := planFFN(b.sms, b.ffn.budget, hid, inter)
	if !ok {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if b.ffn.bar == 0 {
		// Every launch leaves the count at zero (the last block resets it);
		// like the attention's counters, zeroed once on the stream.
		b.ffn.bar = b.alloc(8)
		b.fail(cu.MemsetD32Async(b.ffn.bar, 0, 2, b.stream))
	}
	if ablatedAs("", "f8ffn") {
		return true
	}
	b.launchFnPDL(b.ffn.fn, b.sms, 1, 32*ffnWarps, shm, ptr(dptr(x)), ptr(dptr(act)), ptr(nv), f32(eps), ptr(g.data),
		ptr(g.scale), ptr(u.data), ptr(u.scale), ptr(d.data), ptr(d.scale), i32(inter), i32(hid), i32(fu.b0),
		i32(fu.nsc), i32(fd.b0), i32(fd.nsc), ptr(b.ffn.bar))
	return true
}
