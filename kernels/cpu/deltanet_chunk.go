package cpu

import (
	"math"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

// deltaChunk is the chunk length of the chunked delta rule (fla's and
// transformers' chunk_size).
const deltaChunk = 64

// chunkedPrefill selects the chunked form for passes longer than
// deltaChunk tokens. See BenchmarkGatedDeltaRulePrefill for the trade-off.
var chunkedPrefill = true

// gatedDeltaRuleChunked computes exactly what the recurrence computes,
// rearranged into chunks of deltaChunk tokens (the WY/UT form of fla's
// chunk_gated_delta_rule). Within a chunk, with S₀ the state before it,
// G_t the cumulative log decay up to token t (inclusive) and u_t the
// update the recurrence would add at t (S_t = e^{g_t}S_{t-1} + k_t u_tᵀ):
//
//	u_t = β_t(v_t - e^{G_t}S₀ᵀk_t) - Σ_{s<t} β_t e^{G_t-G_s}(k_t·k_s) u_s
//	o_t = e^{G_t}S₀ᵀq_t + Σ_{s≤t} e^{G_t-G_s}(q_t·k_s) u_s
//	S_n = e^{G_n}S₀ + Σ_s e^{G_n-G_s} k_s u_sᵀ
//
// The first line is the unit lower-triangular system (I+A)U = W, solved by
// forward substitution; every exponent is ≤ 0, so nothing overflows. The
// products with S₀ and the final state update are matrix products that
// run as contiguous dot products, which is where the chunked form gains
// over the recurrence's per-token passes over the whole state.
func (b *Backend) gatedDeltaRuleChunked(dst, qkv, a, bb, state kernels.Buf, aLog, dtBias kernels.Tensor, rows int, s kernels.DeltaShape) {
	dk, dv, nv := s.DK, s.DV, s.VHeads
	rep := nv / s.KHeads
	cd, kd := s.ConvDim(), s.KHeads*s.DK
	out, in, av, bv, st := f32(dst), f32(qkv), f32(a), f32(bb), f32(state)
	al, dt := aLog.(*tensor).vector(), dtBias.(*tensor).vector()
	qscale := float32(1 / math.Sqrt(float64(dk)))
	const C = deltaChunk
	b.parallel(nv, 1, func(lo, hi int) {
		qc := make([]float32, C*dk)       // normalised, scaled queries [C, DK]
		kc := make([]float32, C*dk)       // normalised keys [C, DK]
		kdc := make([]float32, C*dk)      // decayed keys [C, DK]
		sT := make([]float32, dv*dk)      // state, transposed [DV, DK]
		uc := make([]float32, C*dv)       // right-hand side, then U [C, DV]
		ucol := make([]float32, C)        // a column of U
		am := make([]float32, C*C)        // -A, strictly lower [C, C]
		pm := make([]float32, C*C)        // decayed q·k, lower incl. diagonal [C, C]
		oc := make([]float32, C*dv)       // chunk outputs [C, DV]
		ks := make([]float32, max(dv, C)) // a row's products with S₀ or the keys
		qs := make([]float32, max(dv, C))
		G := make([]float64, C)
		eg := make([]float32, C)
		beta := make([]float32, C)
		for h := lo; h < hi; h++ {
			kh := h / rep
			S := st[h*dk*dv : (h+1)*dk*dv]
			for i := 0; i < dk; i++ {
				for j := 0; j < dv; j++ {
					sT[j*dk+i] = S[i*dv+j]
				}
			}
			negA := -math.Exp(float64(al[h]))
			for t0 := 0; t0 < rows; t0 += C {
				n := min(C, rows-t0)
				var g float64
				for t := 0; t < n; t++ {
					row := in[(t0+t)*cd : (t0+t+1)*cd]
					l2normalize(qc[t*dk:(t+1)*dk], row[kh*dk:(kh+1)*dk], qscale)
					l2normalize(kc[t*dk:(t+1)*dk], row[kd+kh*dk:kd+(kh+1)*dk], 1)
					g += negA * softplus(float64(av[(t0+t)*nv+h]+dt[h]))
					G[t] = g
					eg[t] = float32(math.Exp(g))
					beta[t] = sigmoid(bv[(t0+t)*nv+h])
				}
				// W = β(V - e^G K S₀) and the inter-chunk outputs e^G Q S₀.
				// (Each row of products with S₀'s rows by dotRows: dotF32's
				// bits, four state rows a reduction.)
				for t := range n {
					dotRows(kc[t*dk:(t+1)*dk], sT, dk, ks[:dv], 1)
					dotRows(qc[t*dk:(t+1)*dk], sT, dk, qs[:dv], 1)
					vrow := in[(t0+t)*cd+2*kd+h*dv:]
					for j := range dv {
						uc[t*dv+j] = beta[t] * (vrow[j] - eg[t]*ks[j])
						oc[t*dv+j] = eg[t] * qs[j]
					}
				}
				// Intra-chunk matrices.
				for t := 0; t < n; t++ {
					kt, qt := kc[t*dk:(t+1)*dk], qc[t*dk:(t+1)*dk]
					dotRows(kt, kc, dk, ks[:t+1], 1) // k_t·k_u, u ≤ t
					dotRows(qt, kc, dk, qs[:t+1], 1) // q_t·k_u
					for u := 0; u <= t; u++ {
						d := float32(math.Exp(G[t] - G[u]))
						if u < t {
							am[t*C+u] = -(beta[t] * d * ks[u])
						}
						pm[t*C+u] = d * qs[u]
					}
				}
				// Forward substitution (I+A)U = W a row of U at a time
				// (u_t -= Σ_{s<t} A_ts u_s, whole DV-wide rows), and with
				// each row final, the intra-chunk outputs o_t += Σ_{s≤t}
				// P_ts u_s.
				for t := range n {
					ut := uc[t*dv : (t+1)*dv]
					axpyRows(ut, uc, dv, am[t*C:t*C+t])
					axpyRows(oc[t*dv:(t+1)*dv], uc, dv, pm[t*C:t*C+t+1])
				}
				for t := 0; t < n; t++ {
					copy(out[(t0+t)*nv*dv+h*dv:(t0+t)*nv*dv+(h+1)*dv], oc[t*dv:(t+1)*dv])
				}
				// S = e^{G_n} S₀ + Kdᵀ U with Kd_s = e^{G_n-G_s} k_s.
				gn := G[n-1]
				for u := 0; u < n; u++ {
					d := float32(math.Exp(gn - G[u]))
					for i := 0; i < dk; i++ {
						kdc[u*dk+i] = d * kc[u*dk+i]
					}
				}
				en := eg[n-1]
				for j := 0; j < dv; j++ {
					sj := sT[j*dk : (j+1)*dk]
					for t := range n {
						ucol[t] = uc[t*dv+j]
					}
					vmath.Scale(sj, en)
					axpyRows(sj, kdc, dk, ucol[:n])
				}
			}
			for i := 0; i < dk; i++ {
				for j := 0; j < dv; j++ {
					S[i*dv+j] = sT[j*dk+i]
				}
			}
		}
	})
}
