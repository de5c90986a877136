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
	hid, inter := s.hidden, s.inter
	perRow, perW, most := kernels.ExpertRows(f32(sel), rows, s.r.TopK, s.r.Experts)
	clear(f32(dst)[:rows*hid])
	xin, xout := &Buf{D: make([]float32, most*hid)}, &Buf{D: make([]float32, most*hid)}
	g, u := &Buf{D: make([]float32, most*inter)}, &Buf{D: make([]float32, most*inter)}
	kernels.RunExperts(b, dst, x, perRow, perW, s.gate, s.up, s.down, hid, inter, xin, g, u, xout)
}

// MoEAddGated implements kernels.MoEOps.
func (b *Backend) MoEAddGated(dst, src, gate kernels.Buf, rows, dim int) {
	d, sv, gv := f32(dst), f32(src), f32(gate)
	for r := 0; r < rows; r++ {
		w := float32(1 / (1 + math.Exp(-float64(gv[r]))))
		axpy(d[r*dim:(r+1)*dim], sv[r*dim:(r+1)*dim], w)
	}
}
