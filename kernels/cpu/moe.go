package cpu

import (
	"math"

	"github.com/pocketllm/pocketllm/kernels"
)

// The CPU's MoEOps are the reference for device routing: MoERoute is
// kernels.Router.Route row by row, and MoEExperts groups the rows by
// expert and runs each expert's SwiGLU MLP over its rows as batched
// MatMuls, accumulating in expert order, which is exactly what host
// routing in the model code computes (so the fixtures do not move).

var _ kernels.MoEOps = (*Backend)(nil)

type expertSet struct {
	r              kernels.Router
	gate, up, down []kernels.Tensor
	hidden, inter  int
}

func (s *expertSet) Router() *kernels.Router { return &s.r }

// NewExperts implements kernels.MoEOps.
func (b *Backend) NewExperts(r *kernels.Router, gate, up, down []kernels.Tensor) (kernels.ExpertSet, error) {
	hidden, inter, err := kernels.ExpertShapes(r, gate, up, down)
	if err != nil {
		return nil, err
	}
	return &expertSet{r: *r, gate: gate, up: up, down: down, hidden: hidden, inter: inter}, nil
}

// MoERoute implements kernels.MoEOps.
func (b *Backend) MoERoute(set kernels.ExpertSet, sel, logits kernels.Buf, rows int) {
	r := set.Router()
	e, k := r.Experts, r.TopK
	lg, out := f32(logits), f32(sel)
	ids := make([]int32, k)
	for i := 0; i < rows; i++ {
		o := out[i*2*k : (i+1)*2*k]
		r.Route(lg[i*e:(i+1)*e], ids, o[k:])
		for j, id := range ids {
			o[j] = float32(id)
		}
	}
}

// MoEExperts implements kernels.MoEOps.
func (b *Backend) MoEExperts(set kernels.ExpertSet, dst, x, sel kernels.Buf, rows int) {
	s := set.(*expertSet)
	k, hid, inter := s.r.TopK, s.hidden, s.inter
	sv := f32(sel)
	perRow := make([][]int32, s.r.Experts)
	perW := make([][]float32, s.r.Experts)
	most := 0
	for r := 0; r < rows; r++ {
		for j := 0; j < k; j++ {
			v := sv[r*2*k+j]
			if !(v >= 0 && v < float32(s.r.Experts)) { // also rejects NaN
				continue
			}
			id := int(v)
			perRow[id] = append(perRow[id], int32(r))
			perW[id] = append(perW[id], sv[r*2*k+k+j])
			most = max(most, len(perRow[id]))
		}
	}
	d := f32(dst)[:rows*hid]
	clear(d)
	xin, xout := &Buf{D: make([]float32, most*hid)}, &Buf{D: make([]float32, most*hid)}
	g, u := &Buf{D: make([]float32, most*inter)}, &Buf{D: make([]float32, most*inter)}
	for id, rs := range perRow {
		n := len(rs)
		if n == 0 {
			continue
		}
		b.Gather(xin, x, rs, hid)
		b.MatMul(g, xin, s.gate[id], n)
		b.MatMul(u, xin, s.up[id], n)
		b.SwiGLU(g, g, u, n*inter)
		b.MatMul(xout, g, s.down[id], n)
		b.ScatterAdd(dst, xout, rs, perW[id], hid)
	}
}

// MoEAddGated implements kernels.MoEOps.
func (b *Backend) MoEAddGated(dst, src, gate kernels.Buf, rows, dim int) {
	d, sv, gv := f32(dst), f32(src), f32(gate)
	for r := 0; r < rows; r++ {
		w := float32(1 / (1 + math.Exp(-float64(gv[r]))))
		axpy(d[r*dim:(r+1)*dim], sv[r*dim:(r+1)*dim], w)
	}
}
