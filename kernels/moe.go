package kernels

import (
	"fmt"
	"math"
	"slices"
)

// MoEOps is an optional extension of Backend: a routed mixture-of-experts
// layer computed without the host. Routing (router logits → expert ids
// and weights) and the expert SwiGLU MLPs read the chosen ids from a
// device buffer, so a decode step issues a fixed sequence of launches and
// can be captured as a CUDA graph. A backend without it, or one that
// answers NewExperts with ErrUnsupported (a weight format it has no
// indexed kernels for), leaves the model on host routing.
//
// The routing result lives in a Buf of RouteLen(rows, TopK) floats: per
// row, TopK expert ids (stored as exact float32 integers) then their TopK
// combine weights, in selection order.
type MoEOps interface {
	// NewExperts binds one layer's routing rule and its experts' SwiGLU
	// weights (gate and up [inter, hidden], down [hidden, inter], one of
	// each per expert, in expert order). It is called once, at build time.
	NewExperts(r *Router, gate, up, down []Tensor) (ExpertSet, error)
	// MoERoute applies the set's Router to logits [rows, Experts] and
	// writes sel [RouteLen(rows, TopK)].
	MoERoute(set ExpertSet, sel, logits Buf, rows int)
	// MoEExperts overwrites dst [rows, hidden] with Σ_k w[r,k] ·
	// expert_{id[r,k]}(x[r]) for the routing in sel; dst must not alias x.
	MoEExperts(set ExpertSet, dst, x, sel Buf, rows int)
	// MoEAddGated adds sigmoid(gate[r]) · src[r,:] to dst[r,:] for rows
	// rows of width dim (a shared expert behind a scalar gate).
	MoEAddGated(dst, src, gate Buf, rows, dim int)
}

// MoEFusedOps is an optional extension of MoEOps for one-token steps: the
// experts read the residual row through the layer's RMSNorm and may add
// their routed sum into it, so that neither the norm nor the residual add
// is a launch of its own (a MoE layer's decode step is a dozen short
// launches around two GEMVs).
type MoEFusedOps interface {
	// MoEExpertsNorm writes (add: adds) Σ_k w[k] ·
	// expert_{id[k]}(rmsnorm(x; norm)) to the one row dst, for the routing
	// in sel; dst may be x only when adding (the residual). It reports
	// false, having done nothing, where it has no kernel for the set's
	// format or widths.
	MoEExpertsNorm(set ExpertSet, dst, x Buf, norm Tensor, eps float32, sel Buf, add bool) bool
}

// ExpertSet is a backend's handle on one MoE layer made by NewExperts.
type ExpertSet interface {
	Router() *Router
}

// RouteLen is the size of a routing buffer: ids then weights per row.
func RouteLen(rows, topK int) int { return rows * 2 * topK }

// ExpertRows groups a routing result (route, RouteLen(rows, topK) floats)
// by expert: the rows each of experts takes, in row order, their combine
// weights, and the most rows any expert takes. Ids out of range (NaN
// after a failed step too) are skipped. For backends that run the
// experts as host routing does (RunExperts).
func ExpertRows(route []float32, rows, topK, experts int) (perRow [][]int32, perW [][]float32, most int) {
	perRow = make([][]int32, experts)
	perW = make([][]float32, experts)
	for r := 0; r < rows; r++ {
		for j := 0; j < topK; j++ {
			v := route[r*2*topK+j]
			if !(v >= 0 && v < float32(experts)) { // also rejects NaN
				continue
			}
			id := int(v)
			perRow[id] = append(perRow[id], int32(r))
			perW[id] = append(perW[id], route[r*2*topK+topK+j])
			most = max(most, len(perRow[id]))
		}
	}
	return perRow, perW, most
}

// RunExperts adds each expert's SwiGLU MLP over its rows of x (hidden
// wide), times their weights, into dst: the grouping of ExpertRows, the
// weights gate, up [inter, hidden] and down [hidden, inter] of each
// expert, and scratch of the most rows: xin, xout (hidden wide), g, u
// (inter wide).
func RunExperts(be Backend, dst, x Buf, perRow [][]int32, perW [][]float32, gate, up, down []Tensor, hidden, inter int,
	xin, g, u, xout Buf) {
	for id, rs := range perRow {
		n := len(rs)
		if n == 0 {
			continue
		}
		be.Gather(xin, x, rs, hidden)
		be.MatMul(g, xin, gate[id], n)
		be.MatMul(u, xin, up[id], n)
		be.SwiGLU(g, g, u, n*inter)
		be.MatMul(xout, g, down[id], n)
		be.ScatterAdd(dst, xout, rs, perW[id], hidden)
	}
}

// Router is the expert-selection rule of a mixture-of-experts layer. It
// covers the variants of the families we serve: softmax (Qwen3-MoE,
// MiniMax) or sigmoid (DeepSeek-V3, GLM-4.5) scores, an optional
// selection-only correction bias, grouped top-k, renormalisation of the
// chosen weights and a routed scaling factor. Route is the reference every
// backend's MoERoute must reproduce, ties included.
type Router struct {
	Experts, TopK   int
	Sigmoid         bool
	NormTopK        bool
	Bias            []float32 // e_score_correction_bias: used for selection only
	Groups, TopKGrp int       // grouped top-k (n_group, topk_group); 0 or 1 disables
	Scale           float32   // routed_scaling_factor; 0 means 1
}

// Grouped reports whether selection is restricted to the best TopKGrp of
// Groups expert groups.
func (r *Router) Grouped() bool { return r.Groups > 1 && r.TopKGrp > 0 && r.TopKGrp < r.Groups }

// Check reports a rule Route cannot apply (backends call it in NewExperts).
func (r *Router) Check() error {
	switch {
	case r.Experts <= 0 || r.TopK <= 0 || r.TopK > r.Experts:
		return fmt.Errorf("router: top %d of %d experts", r.TopK, r.Experts)
	case r.Bias != nil && len(r.Bias) != r.Experts:
		return fmt.Errorf("router: %d biases for %d experts", len(r.Bias), r.Experts)
	case r.Grouped() && (r.Experts%r.Groups != 0 || r.TopKGrp*(r.Experts/r.Groups) < r.TopK):
		return fmt.Errorf("router: %d groups / top %d groups do not fit top %d of %d experts", r.Groups, r.TopKGrp, r.TopK, r.Experts)
	}
	return nil
}

// ExpertShapes checks the router and the weights given to NewExperts and
// returns the hidden and intermediate widths of the experts.
func ExpertShapes(r *Router, gate, up, down []Tensor) (hidden, inter int, err error) {
	if err := r.Check(); err != nil {
		return 0, 0, err
	}
	if len(gate) != r.Experts || len(up) != r.Experts || len(down) != r.Experts {
		return 0, 0, fmt.Errorf("moe: %d/%d/%d expert weights for %d experts", len(gate), len(up), len(down), r.Experts)
	}
	for i := range gate {
		if gate[i] == nil || up[i] == nil || down[i] == nil {
			return 0, 0, fmt.Errorf("moe: expert %d has no weights", i)
		}
		g, u, d := gate[i].Weight(), up[i].Weight(), down[i].Weight()
		if i == 0 {
			inter, hidden = g.Rows(), g.Cols()
		}
		if g.Rows() != inter || g.Cols() != hidden || u.Rows() != inter || u.Cols() != hidden || d.Rows() != hidden || d.Cols() != inter {
			return 0, 0, fmt.Errorf("moe: expert %d shapes %v %v %v, want [%d %d] twice and [%d %d]", i, g.Shape, u.Shape, d.Shape, inter, hidden, hidden, inter)
		}
	}
	return hidden, inter, nil
}

// Route picks experts for one token from its router logits, returning the
// expert ids and their combine weights.
//
// Scores are computed in float64 and rounded to float32 (softmax: the
// exponentials of logit−max over their float64 sum; sigmoid per logit).
// Selection ranks scores+Bias; ties go to the lower expert (and group)
// index. A group's score is the sum of its two best members. Weights are
// the unbiased scores of the chosen experts, divided by their float32 sum
// (in selection order) when NormTopK, then multiplied by Scale.
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
	if r.Grouped() {
		per := n / r.Groups
		type gs struct {
			g int
			s float32
		}
		groups := make([]gs, r.Groups)
		for g := range groups {
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
