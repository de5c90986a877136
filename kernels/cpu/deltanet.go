package cpu

import (
	"math"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

// The Gated DeltaNet delta rule has two exact forms. Decode and passes of
// up to deltaChunk tokens run the plain token-by-token recurrence (the
// definition, O(DK·DV) per token and head). Longer prefill passes run the
// chunked form (deltanet_chunk.go), an algebraic rearrangement with about
// the same arithmetic that runs as contiguous dot products instead of
// scalar passes over the whole state per token: ~2.2× faster for a
// 512-token prefill at Qwen3-Next's shape on a 2-core AVX2 machine.

var _ kernels.HybridOps = (*Backend)(nil)

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// softplus matches torch.nn.functional.softplus (beta 1, threshold 20).
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// CausalConv1D implements kernels.HybridOps. A row's outputs are a sum
// over the kernel's taps of the taps' weights times the input rows
// before it (the conv state's rows first), element by element across the
// channels: mulAdd over whole rows, in parallel over rows, and the
// SiLU after. Each channel's sum runs over the taps in order from zero,
// as a loop a channel would.
func (b *Backend) CausalConv1D(dst, x, state kernels.Buf, w kernels.Tensor, rows int, s kernels.DeltaShape) {
	ch, k := s.ConvDim(), s.ConvKernel
	d, xs, st := f32(dst)[:rows*ch], f32(x), f32(state)
	wt := w.(*tensor).vector() // [ch, k]
	hist := k - 1
	taps := make([]float32, k*ch) // the weights by tap [k, ch]
	for c := range ch {
		for j := range k {
			taps[j*ch+c] = wt[c*k+j]
		}
	}
	// in is row i of the window: the state's rows, then x's.
	in := func(i int) []float32 {
		if i < hist {
			return st[i*ch : (i+1)*ch]
		}
		return xs[(i-hist)*ch : (i-hist+1)*ch]
	}
	b.parallel(rows, 4, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			out := d[t*ch : (t+1)*ch]
			clear(out)
			for j := range k {
				vmath.MulAdd(out, taps[j*ch:(j+1)*ch], in(t+j))
			}
			vmath.SigmoidMul(out, out) // SiLU
		}
	})
	// The new state: the window's last hist rows, read before any is
	// written over (they may be the state's own when rows < hist).
	last := make([]float32, 0, hist*ch)
	for i := rows; i < rows+hist; i++ {
		last = append(last, in(i)...)
	}
	copy(st[:hist*ch], last)
}

// l2normalize scales v to unit L2 norm as fla's l2norm does:
// v * rsqrt(sum(v²) + 1e-6).
func l2normalize(dst, v []float32, scale float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	inv := float32(1/math.Sqrt(ss+1e-6)) * scale
	for i, x := range v {
		dst[i] = x * inv
	}
}

// GatedDeltaRule implements kernels.HybridOps, in parallel over value
// heads (each head's state is independent). Passes longer than
// deltaChunk tokens take the chunked form when chunkedPrefill is set;
// shorter passes and decode run the recurrence.
func (b *Backend) GatedDeltaRule(dst, qkv, a, bb, state kernels.Buf, aLog, dtBias kernels.Tensor, rows int, s kernels.DeltaShape) {
	if chunkedPrefill && rows > deltaChunk {
		b.gatedDeltaRuleChunked(dst, qkv, a, bb, state, aLog, dtBias, rows, s)
		return
	}
	b.gatedDeltaRuleRecurrent(dst, qkv, a, bb, state, aLog, dtBias, rows, s)
}

// gatedDeltaRuleRecurrent is the token-by-token recurrence.
func (b *Backend) gatedDeltaRuleRecurrent(dst, qkv, a, bb, state kernels.Buf, aLog, dtBias kernels.Tensor, rows int, s kernels.DeltaShape) {
	dk, dv, nv := s.DK, s.DV, s.VHeads
	rep := nv / s.KHeads
	cd, kd := s.ConvDim(), s.KHeads*s.DK
	out, in, av, bv, st := f32(dst), f32(qkv), f32(a), f32(bb), f32(state)
	al, dt := aLog.(*tensor).vector(), dtBias.(*tensor).vector()
	qscale := float32(1 / math.Sqrt(float64(dk)))
	b.parallel(nv, 1, func(lo, hi int) {
		q := make([]float32, dk)
		k := make([]float32, dk)
		delta := make([]float32, dv)
		for h := lo; h < hi; h++ {
			kh := h / rep
			S := st[h*dk*dv : (h+1)*dk*dv]
			negA := -math.Exp(float64(al[h]))
			for t := 0; t < rows; t++ {
				row := in[t*cd : (t+1)*cd]
				l2normalize(q, row[kh*dk:(kh+1)*dk], qscale)
				l2normalize(k, row[kd+kh*dk:kd+(kh+1)*dk], 1)
				v := row[2*kd+h*dv : 2*kd+(h+1)*dv]
				decay := float32(math.Exp(negA * softplus(float64(av[t*nv+h]+dt[h]))))
				beta := sigmoid(bv[t*nv+h])
				// S *= decay, then delta = beta * (v - Sᵀk); S += k ⊗ delta,
				// out = Sᵀq.
				copy(delta, v)
				deltaDecay(S, k, delta, decay)
				vmath.Scale(delta, beta)
				deltaUpdate(S, k, q, delta, out[t*nv*dv+h*dv:t*nv*dv+(h+1)*dv])
			}
		}
	})
}

// deltaDecay does, for each row i of the dk×dv state s in row order:
// s[i] *= decay, then delta -= s[i]·k[i]. Every element goes through the
// roundings of that row loop (a product rounded, then the difference; no
// fused multiply-add on amd64), whether the columns run in the vector
// bands (deltarow_amd64.s: a band's delta in registers while the pass
// walks the rows, nothing called per row) or in the loop here, so the
// state and output are the same bits either way. In scalar Go, and then
// as a Scale and an axpy call a row, these passes were most of a hybrid's
// decode step on the CPU.
func deltaDecay(s, k, delta []float32, decay float32) {
	dv := len(delta)
	n := deltaBandCols(dv)
	deltaDecayBands(s, k, delta, decay, n)
	if n == dv {
		return
	}
	for i, ki := range k {
		si := s[i*dv+n : (i+1)*dv]
		vmath.Scale(si, decay)
		axpy(delta[n:], si, -ki)
	}
}

// deltaUpdate does, for each row i in row order, starting from o = 0:
// s[i] += k[i]·delta, then o += s[i]·q[i], as deltaDecay does its pass.
func deltaUpdate(s, k, q, delta, o []float32) {
	dv := len(delta)
	n := deltaBandCols(dv)
	deltaUpdateBands(s, k, q, delta, o, n) // the bands start their output at zero
	clear(o[n:])
	if n == dv {
		return
	}
	for i, ki := range k {
		si := s[i*dv+n : (i+1)*dv]
		axpy(si, delta[n:], ki)
		axpy(o[n:], si, q[i])
	}
}

// RMSNormGated implements kernels.HybridOps.
func (b *Backend) RMSNormGated(dst, x, z kernels.Buf, w kernels.Tensor, rows, dim int, eps float32) {
	scale := w.(*tensor).vector()
	d, xs, zs := f32(dst), f32(x), f32(z)
	silu := make([]float32, dim) // the gate's SiLU, a row at a time
	for r := 0; r < rows; r++ {
		row := xs[r*dim : (r+1)*dim]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(dim)+float64(eps)))
		out := d[r*dim : (r+1)*dim]
		copy(silu, zs[r*dim:(r+1)*dim])
		vmath.SigmoidMul(silu, silu)
		for i, v := range row {
			out[i] = v * inv * scale[i] * silu[i]
		}
	}
}

// SigmoidMul implements kernels.HybridOps.
func (b *Backend) SigmoidMul(x, gate kernels.Buf, n int) {
	d, g := f32(x)[:n], f32(gate)[:n]
	b.parallel(n, 1<<14, func(lo, hi int) {
		vmath.SigmoidMul(d[lo:hi], g[lo:hi])
	})
}
