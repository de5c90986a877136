package models

import (
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
)

// One-token steps on a backend with kernels.FusedOps: a residual block
// (norm, block, add) of the common builders runs as a few fused kernels
// instead of a dozen small ones (see kernels.FusedOps for why that
// matters). Where the backend declines an op (a weight format without a
// fused kernel), that op runs unfused, so the values are the same either
// way; blocks with no fused path (MoE, MLA) run as before.

// block is a residual block's function: a Mixer or an FFN.
type block interface {
	Forward(p *Pass, in, out kernels.Buf) error
}

// fusedBlock is a block with a fused one-token path.
type fusedBlock interface {
	// forwardFused computes y = f(rmsnorm(x; norm)) for the pass's one row
	// and adds it to x (add) or writes it to out. It reports false, having
	// done nothing, when this variant of the block has no fused path.
	forwardFused(p *Pass, fu kernels.FusedOps, x, out kernels.Buf, norm kernels.Tensor, eps float32, add bool) (bool, error)
}

// residual runs x += f(rmsnorm(x)) for one residual block, fused when fu
// is set (one-token steps on a backend that has it) and f allows.
func (d *Decoder) residual(p *Pass, f block, norm kernels.Tensor, eps float32, fu kernels.FusedOps, normed, delta kernels.Buf) error {
	x := p.Scratch.X
	if fb, ok := f.(fusedBlock); ok && fu != nil {
		if done, err := fb.forwardFused(p, fu, x, delta, norm, eps, true); done || err != nil {
			return err
		}
	}
	n := p.Rows * d.cfg.HiddenSize
	d.be.RMSNorm(normed, x, norm, p.Rows, d.cfg.HiddenSize, eps)
	if err := f.Forward(p, normed, delta); err != nil {
		return err
	}
	d.be.Add(x, x, delta, n)
	return nil
}

// project computes x += w·in (add), or out = w·in.
func project(be kernels.Backend, fu kernels.FusedOps, x, out, in kernels.Buf, w kernels.Tensor, width int, add bool) {
	if add && fu.MatMulAdd(x, in, w, 1) {
		return
	}
	be.MatMul(out, in, w, 1)
	if add {
		be.Add(x, x, out, width)
	}
}

// forwardFused implements fusedBlock: the q/k/v projections read the
// un-normed residual (the norm is applied inside the GEMV), q/k norms,
// RoPE, the KV store and the attention are one kernel (or the first three
// one and the attention another, where the backend has no
// kernels.FusedAttention for the shape), the output projection adds into
// the residual.
func (a *Attention) forwardFused(p *Pass, fu kernels.FusedOps, x, out kernels.Buf, norm kernels.Tensor, eps float32, add bool) (bool, error) {
	if p.Seq.Pool == nil {
		return true, fmt.Errorf("attention: no KV pool")
	}
	be, s := a.be, p.Scratch
	qw, kw := a.Heads*a.Dim, a.KVHeads*a.Dim
	q, k, v, att := s.Buf("q", qw), s.Buf("k", kw), s.Buf("v", kw), s.Buf("att", qw)
	dst, ws := []kernels.Buf{q, k, v}, []kernels.Tensor{a.Q, a.K, a.V}
	var gate kernels.Buf
	if a.gate != nil { // the output gates' rows of q_proj, split at load
		gate = s.Buf("q.gate", qw)
		dst, ws = append(dst, gate), append(ws, a.QGate)
	}
	if !fu.NormMatMul(dst, x, norm, eps, ws, 1) {
		normed := s.Buf("normed", a.hidden)
		be.RMSNorm(normed, x, norm, 1, a.hidden, eps)
		for i := range dst {
			be.MatMul(dst[i], normed, ws[i], 1)
		}
	}
	a.addBiases(1, q, gate, k, v)
	// Full-width q/k norms (MiniMax-M2) go to RoPEAttention too, which may
	// take them; RoPEStoreKV's are per head only.
	if fa, ok := fu.(kernels.FusedAttention); !ok || !fa.RoPEAttention(att, q, k, v, a.QNorm,
		a.KNorm, a.Eps, p.Seq.Pool, a.KVLayer, p.Pos, p.Slots, p.Attn, a.Heads, a.KVHeads, a.Dim, &a.Rope, a.Scale) {
		if a.fullWidthQKNorm || !fu.RoPEStoreKV(q, k, v, a.QNorm, a.KNorm, a.Eps, p.Seq.Pool, a.KVLayer, p.Pos, p.Slots,
			a.Heads, a.KVHeads, a.Dim, &a.Rope) {
			a.normRopeStore(p, q, k, v)
		}
		be.Attention(att, q, p.Seq.Pool, a.KVLayer, p.Attn, 1, a.Heads, a.Scale)
	}
	if a.gate != nil {
		a.gate.SigmoidMul(att, gate, qw)
	}
	project(be, fu, x, out, att, a.O, a.hidden, add)
	return true, nil
}

// forwardFused implements fusedBlock: gate, up and the activation are one
// kernel that norms its input; the down projection adds into the residual.
func (m *MLP) forwardFused(p *Pass, fu kernels.FusedOps, x, out kernels.Buf, norm kernels.Tensor, eps float32, add bool) (bool, error) {
	be, s := m.be, p.Scratch
	act := s.Buf("mlp.gate", m.inter)
	m.normActivation(s, fu, act, x, norm, eps, func() kernels.Buf {
		normed := s.Buf("normed", m.hidden)
		be.RMSNorm(normed, x, norm, 1, m.hidden, eps)
		return normed
	})
	project(be, fu, x, out, act, m.Down, m.hidden, add)
	return true, nil
}

// normActivation writes act = silu(gate·n)·(up·n) for the one row n =
// rmsnorm(x): one NormSwiGLU, or where it declines the three ops over
// normed() (the caller's normed row, made when first asked for).
func (m *MLP) normActivation(s *Scratch, fu kernels.FusedOps, act, x kernels.Buf, norm kernels.Tensor, eps float32,
	normed func() kernels.Buf) {
	if fu.NormSwiGLU(act, x, norm, eps, m.Gate, m.Up, 1) {
		return
	}
	n, u := normed(), s.Buf("mlp.up", m.inter)
	m.be.MatMul(act, n, m.Gate, 1)
	m.be.MatMul(u, n, m.Up, 1)
	m.be.SwiGLU(act, act, u, m.inter)
}

// forwardFused implements fusedBlock for a tensor-parallel block: the
// inner block writes its partial sum, the group sums it, and the sum is
// added to the residual.
func (r *allReduce) forwardFused(p *Pass, fu kernels.FusedOps, x, out kernels.Buf, norm kernels.Tensor, eps float32, add bool) (bool, error) {
	fb, ok := r.inner.(fusedBlock)
	if !ok || !add {
		return false, nil
	}
	if done, err := fb.forwardFused(p, fu, x, out, norm, eps, false); !done || err != nil {
		return done, err
	}
	n := p.Rows * r.width
	if ad, ok := r.comm.(kernels.AllReduceAdder); ok {
		// The transport adds the sums into the residual itself.
		if done, err := ad.AllReduceSumAdd(x, out, n); done || err != nil {
			if err != nil {
				return true, fmt.Errorf("tp all-reduce: %w", err)
			}
			return true, nil
		}
	}
	if err := r.comm.AllReduceSum(out, n); err != nil {
		return true, fmt.Errorf("tp all-reduce: %w", err)
	}
	p.Scratch.be.Add(x, x, out, n)
	return true, nil
}
