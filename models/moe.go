package models

import (
	"errors"
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// Router is the expert-selection rule of a mixture-of-experts layer
// (kernels.Router holds the reference implementation every backend's
// device routing reproduces).
type Router = kernels.Router

// MoE is a routed mixture of SwiGLU experts with optional shared experts.
type MoE struct {
	be         kernels.Backend
	Gate       kernels.Tensor // router [experts, hidden]
	Router     Router
	Experts    []*MLP
	Shared     *MLP
	SharedGate kernels.Tensor // optional sigmoid gate on the shared expert [1, hidden]
	hidden     int

	// dev is the backend's device-routed form of the layer (kernels.MoEOps),
	// bound on the first pass; nil (with bound set) keeps host routing.
	dev   kernels.ExpertSet
	ops   kernels.MoEOps
	bound bool
}

// bindMoE binds every MoE layer of net on its backend at build time, as
// kernels.MoEOps.NewExperts asks, rather than on the first pass: a backend
// may act on it before any pass runs (the CUDA backend keeps expert
// weights out of the decode copies PrepareDecode makes).
func bindMoE(net Network) error {
	d := decoderOf(net)
	if d == nil {
		return nil
	}
	for i, l := range d.Layers {
		ffn := l.FFN
		if r, ok := ffn.(*allReduce); ok {
			ffn, _ = r.inner.(FFN)
		}
		if m, ok := ffn.(*MoE); ok {
			if err := m.bind(); err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
		}
	}
	return nil
}

// bind asks the backend for device routing once. ErrUnsupported (no
// MoEOps, or expert weights in a format without indexed kernels) keeps the
// host path; any other error is the layer's.
func (m *MoE) bind() error {
	if m.bound {
		return nil
	}
	m.bound = true
	ops, ok := m.be.(kernels.MoEOps)
	if !ok {
		return nil
	}
	n := len(m.Experts)
	gate, up, down := make([]kernels.Tensor, n), make([]kernels.Tensor, n), make([]kernels.Tensor, n)
	for i, e := range m.Experts {
		gate[i], up[i], down[i] = e.Gate, e.Up, e.Down
	}
	set, err := ops.NewExperts(&m.Router, gate, up, down)
	switch {
	case errors.Is(err, kernels.ErrUnsupported):
		return nil
	case err != nil:
		return fmt.Errorf("moe: %w", err)
	}
	m.ops, m.dev = ops, set
	return nil
}

// Forward implements FFN: on the device when the backend routes (no host
// round trip, so a decode step can be captured), else on the host.
func (m *MoE) Forward(p *Pass, in, out kernels.Buf) error {
	if err := m.bind(); err != nil {
		return err
	}
	if m.dev == nil {
		return m.forwardHost(p, in, out)
	}
	be, s, rows, hid := m.be, p.Scratch, p.Rows, m.hidden
	lb := s.Buf("moe.logits", rows*m.Router.Experts)
	be.MatMul(lb, in, m.Gate, rows)
	sel := s.Buf("moe.sel", kernels.RouteLen(rows, m.Router.TopK))
	m.ops.MoERoute(m.dev, sel, lb, rows)
	m.ops.MoEExperts(m.dev, out, in, sel, rows)
	if m.Shared == nil {
		return nil
	}
	xout := s.Buf("moe.out", rows*hid)
	m.Shared.forwardRows(s, in, xout, rows)
	if m.SharedGate == nil {
		be.Add(out, out, xout, rows*hid)
		return nil
	}
	gb := s.Buf("moe.sgate", rows)
	be.MatMul(gb, in, m.SharedGate, rows)
	m.ops.MoEAddGated(out, xout, gb, rows, hid)
	return nil
}

// forwardFused implements fusedBlock for a layer the backend routes, on
// a backend whose experts take the norm and the residual add
// (kernels.MoEFusedOps): the router reads the residual through the norm
// (NormMatMul), the experts norm it themselves and add their routed sum
// into it (add) or write it to out (a tensor-parallel rank's partial sum),
// and a shared expert norms in its gate/up GEMV and adds in its down
// (behind its sigmoid gate, Qwen3-Next's, whose logit the router's
// NormMatMul computes too). MiniMax-M2's layer is four launches instead of
// six. With add the residual gets the experts' sum and the shared
// expert's one after the other, where the unfused path adds their sum:
// the same values up to that rounding; without, out is the unfused path's
// to the bit.
func (m *MoE) forwardFused(p *Pass, fu kernels.FusedOps, x, out kernels.Buf, norm kernels.Tensor, eps float32, add bool) (bool, error) {
	if err := m.bind(); err != nil {
		return true, err
	}
	fo, ok := m.ops.(kernels.MoEFusedOps)
	if m.dev == nil || !ok {
		return false, nil
	}
	be, s, hid := m.be, p.Scratch, m.hidden
	var normed kernels.Buf // rmsnorm(x), made where an op declines to norm itself
	normedX := func() kernels.Buf {
		if normed == nil {
			normed = s.Buf("normed", hid)
			be.RMSNorm(normed, x, norm, 1, hid, eps)
		}
		return normed
	}
	lb := s.Buf("moe.logits", m.Router.Experts)
	dsts, ws := []kernels.Buf{lb}, []kernels.Tensor{m.Gate}
	var gb kernels.Buf // the shared expert's gate logit
	if m.SharedGate != nil {
		gb = s.Buf("moe.sgate", 1)
		dsts, ws = append(dsts, gb), append(ws, m.SharedGate)
	}
	if !fu.NormMatMul(dsts, x, norm, eps, ws, 1) {
		for i := range dsts {
			be.MatMul(dsts[i], normedX(), ws[i], 1)
		}
	}
	var act kernels.Buf // the shared expert's SwiGLU, taken before x changes
	if sh := m.Shared; sh != nil {
		act = s.Buf("moe.shared", sh.inter)
		sh.normActivation(s, fu, act, x, norm, eps, normedX)
	}
	sel := s.Buf("moe.sel", kernels.RouteLen(1, m.Router.TopK))
	m.ops.MoERoute(m.dev, sel, lb, 1)
	dst := out // the sum, then the shared expert's added
	if add {
		dst = x
	}
	if !fo.MoEExpertsNorm(m.dev, dst, x, norm, eps, sel, add) {
		y := out
		if add {
			y = s.Buf("moe.y", hid)
		}
		m.ops.MoEExperts(m.dev, y, normedX(), sel, 1)
		if add {
			be.Add(x, x, y, hid)
		}
	}
	switch {
	case m.Shared == nil:
	case gb != nil:
		y := s.Buf("moe.shared.y", hid)
		be.MatMul(y, act, m.Shared.Down, 1)
		m.ops.MoEAddGated(dst, y, gb, 1, hid)
	default:
		project(be, fu, dst, s.Buf("moe.shared.y", hid), act, m.Shared.Down, hid, true)
	}
	return true, nil
}

// forwardHost routes on the host (the router logits are experts×rows
// floats); expert GEMMs run on the backend over the rows routed to each
// expert.
func (m *MoE) forwardHost(p *Pass, in, out kernels.Buf) error {
	be, s, rows, hid := m.be, p.Scratch, p.Rows, m.hidden
	e, k := m.Router.Experts, m.Router.TopK
	lb := s.Buf("moe.logits", rows*e)
	be.MatMul(lb, in, m.Gate, rows)
	logits := make([]float32, rows*e)
	be.Read(lb, 0, logits)
	perExpert := make([][]int32, e)
	perWeight := make([][]float32, e)
	ids := make([]int32, k)
	ws := make([]float32, k)
	for r := 0; r < rows; r++ {
		m.Router.Route(logits[r*e:(r+1)*e], ids, ws)
		for j, id := range ids {
			if id < 0 || int(id) >= e {
				return fmt.Errorf("moe: router chose expert %d of %d", id, e)
			}
			perExpert[id] = append(perExpert[id], int32(r))
			perWeight[id] = append(perWeight[id], ws[j])
		}
	}
	acc := s.Buf("moe.acc", rows*hid)
	be.Write(acc, 0, make([]float32, rows*hid))
	xin := s.Buf("moe.in", rows*hid)
	xout := s.Buf("moe.out", rows*hid)
	for id, rs := range perExpert {
		if len(rs) == 0 {
			continue
		}
		be.Gather(xin, in, rs, hid)
		m.Experts[id].forwardRows(s, xin, xout, len(rs))
		be.ScatterAdd(acc, xout, rs, perWeight[id], hid)
	}
	if m.Shared != nil {
		m.Shared.forwardRows(s, in, xout, rows)
		w := make([]float32, rows)
		if m.SharedGate != nil {
			gb := s.Buf("moe.sgate", rows)
			be.MatMul(gb, in, m.SharedGate, rows)
			be.Read(gb, 0, w)
			for i, v := range w {
				w[i] = float32(1 / (1 + math.Exp(-float64(v))))
			}
		} else {
			for i := range w {
				w[i] = 1
			}
		}
		all := make([]int32, rows)
		for i := range all {
			all[i] = int32(i)
		}
		be.ScatterAdd(acc, xout, all, w, hid)
	}
	be.Gather(out, acc, identity(rows), hid)
	return nil
}

func identity(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// newExperts binds prefix+"experts.N." MLPs.
func newExperts(c *Config, b *binder, prefix string, n, inter int) []*MLP {
	ex := make([]*MLP, n)
	for i := range ex {
		ex[i] = newMLP(c, b, fmt.Sprintf("%sexperts.%d.", prefix, i), inter)
	}
	return ex
}
