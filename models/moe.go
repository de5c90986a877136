package models

import (
	"fmt"
	"math"
	"slices"

	"github.com/pocketllm/pocketllm/kernels"
)

// Router is the expert-selection rule of a mixture-of-experts layer. It
// covers the variants of the families we serve: softmax (Qwen3-MoE,
// MiniMax) or sigmoid (DeepSeek-V3, GLM-4.5) scores, an optional
// selection-only correction bias, grouped top-k, renormalisation of the
// chosen weights and a routed scaling factor.
type Router struct {
	Experts, TopK   int
	Sigmoid         bool
	NormTopK        bool
	Bias            []float32 // e_score_correction_bias: used for selection only
	Groups, TopKGrp int       // grouped top-k (n_group, topk_group); 0 or 1 disables
	Scale           float32   // routed_scaling_factor; 0 means 1
	// NormSoftmaxAfter: select on raw logits' top-k, then softmax over the
	// chosen ones (equivalent to softmax-then-renormalise).
}

// Route picks experts for one token from its router logits, returning the
// expert ids and their combine weights.
func (r *Router) Route(logits []float32, ids []int32, weights []float32) {
	n := r.Experts
	scores := make([]float32, n)
	if r.Sigmoid {
		for i, v := range logits[:n] {
			scores[i] = float32(1 / (1 + math.Exp(-float64(v))))
		}
	} else {
		m := slices.Max(logits[:n])
		var sum float64
		for i, v := range logits[:n] {
			e := math.Exp(float64(v - m))
			scores[i] = float32(e)
			sum += e
		}
		for i := range scores {
			scores[i] = float32(float64(scores[i]) / sum)
		}
	}
	sel := scores
	if r.Bias != nil {
		sel = make([]float32, n)
		for i := range sel {
			sel[i] = scores[i] + r.Bias[i]
		}
	}
	allowed := make([]bool, n)
	if r.Groups > 1 && r.TopKGrp > 0 && r.TopKGrp < r.Groups {
		per := n / r.Groups
		type gs struct {
			g int
			s float32
		}
		groups := make([]gs, r.Groups)
		for g := range groups {
			// A group's score is the sum of its two best members.
			part := slices.Clone(sel[g*per : (g+1)*per])
			slices.SortFunc(part, func(a, b float32) int { return cmpDesc(a, b) })
			groups[g] = gs{g, part[0]}
			if len(part) > 1 {
				groups[g].s += part[1]
			}
		}
		slices.SortStableFunc(groups, func(a, b gs) int { return cmpDesc(a.s, b.s) })
		for _, g := range groups[:r.TopKGrp] {
			for i := g.g * per; i < (g.g+1)*per; i++ {
				allowed[i] = true
			}
		}
	} else {
		for i := range allowed {
			allowed[i] = true
		}
	}
	order := make([]int, 0, n)
	for i := range n {
		if allowed[i] {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpDesc(sel[a], sel[b]) })
	var sum float32
	for k := 0; k < r.TopK; k++ {
		ids[k] = int32(order[k])
		weights[k] = scores[order[k]]
		sum += weights[k]
	}
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	for k := 0; k < r.TopK; k++ {
		if r.NormTopK && sum > 0 {
			weights[k] /= sum
		}
		weights[k] *= scale
	}
}

func cmpDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// MoE is a routed mixture of SwiGLU experts with optional shared experts.
type MoE struct {
	be         kernels.Backend
	Gate       kernels.Tensor // router [experts, hidden]
	Router     Router
	Experts    []*MLP
	Shared     *MLP
	SharedGate kernels.Tensor // optional sigmoid gate on the shared expert [1, hidden]
	hidden     int
}

// Forward implements FFN. Routing runs on the host (the router logits are
// experts×rows floats); expert GEMMs run on the backend over the rows
// routed to each expert.
func (m *MoE) Forward(p *Pass, in, out kernels.Buf) error {
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
