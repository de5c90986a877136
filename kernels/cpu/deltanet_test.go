package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

func f32Tensor(t testing.TB, b *Backend, shape []int, v []float32) kernels.Tensor {
	t.Helper()
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	w, err := b.LoadWeight(&kernels.Weight{Name: "w", DType: kernels.F32, Shape: shape, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// naiveDeltaRule is transformers' torch_recurrent_gated_delta_rule written
// out in float64, one token and head at a time.
func naiveDeltaRule(qkv, a, b, state, aLog, dtBias []float32, rows int, s kernels.DeltaShape) []float64 {
	out, _ := naiveDeltaRuleState(qkv, a, b, state, aLog, dtBias, rows, s)
	return out
}

// naiveDeltaRuleState is naiveDeltaRule that also returns the final state.
func naiveDeltaRuleState(qkv, a, b, state, aLog, dtBias []float32, rows int, s kernels.DeltaShape) ([]float64, []float64) {
	nv, dk, dv, kd := s.VHeads, s.DK, s.DV, s.KHeads*s.DK
	S := make([]float64, len(state))
	for i, x := range state {
		S[i] = float64(x)
	}
	out := make([]float64, rows*nv*dv)
	l2 := func(v []float32) []float64 {
		var ss float64
		for _, x := range v {
			ss += float64(x) * float64(x)
		}
		o := make([]float64, len(v))
		for i, x := range v {
			o[i] = float64(x) / math.Sqrt(ss+1e-6)
		}
		return o
	}
	for t := range rows {
		row := qkv[t*s.ConvDim() : (t+1)*s.ConvDim()]
		for h := range nv {
			kh := h / (nv / s.KHeads)
			q, k := l2(row[kh*dk:(kh+1)*dk]), l2(row[kd+kh*dk:kd+(kh+1)*dk])
			v := row[2*kd+h*dv:]
			g := -math.Exp(float64(aLog[h])) * math.Log1p(math.Exp(float64(a[t*nv+h])+float64(dtBias[h])))
			beta := 1 / (1 + math.Exp(-float64(b[t*nv+h])))
			Sh := S[h*dk*dv : (h+1)*dk*dv]
			for i := range Sh {
				Sh[i] *= math.Exp(g)
			}
			for j := range dv {
				var mem float64
				for i := range dk {
					mem += Sh[i*dv+j] * k[i]
				}
				d := (float64(v[j]) - mem) * beta
				for i := range dk {
					Sh[i*dv+j] += k[i] * d
				}
				var o float64
				for i := range dk {
					o += Sh[i*dv+j] * q[i] / math.Sqrt(float64(dk))
				}
				out[t*nv*dv+h*dv+j] = o
			}
		}
	}
	return out, S
}

// The kernel against the written-out recurrence, with a non-zero initial
// state and mild decay (the fixtures' random A_log decays almost
// everything within a token, so they weigh the state lightly).
func TestGatedDeltaRule(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := kernels.DeltaShape{KHeads: 2, VHeads: 6, DK: 8, DV: 12, ConvKernel: 4}
	const rows = 9
	be := New(2)
	qkv := randVec(r, rows*s.ConvDim(), 1)
	a, b := randVec(r, rows*s.VHeads, 1), randVec(r, rows*s.VHeads, 1)
	state := randVec(r, s.RecStateLen(), 0.5)
	aLog, dtBias := randVec(r, s.VHeads, 0.3), randVec(r, s.VHeads, 0.3)
	for i := range aLog {
		aLog[i] -= 2 // A ≈ 0.14: the state carries across many tokens
	}
	want := naiveDeltaRule(qkv, a, b, state, aLog, dtBias, rows, s)

	buf := func(v []float32) kernels.Buf { x := be.NewBuf(len(v)); be.Write(x, 0, v); return x }
	dst, st := be.NewBuf(rows*s.VHeads*s.DV), buf(state)
	be.GatedDeltaRule(dst, buf(qkv), buf(a), buf(b), st, f32Tensor(t, be, []int{s.VHeads}, aLog),
		f32Tensor(t, be, []int{s.VHeads}, dtBias), rows, s)
	got := make([]float32, dst.Len())
	be.Read(dst, 0, got)
	var maxDiff, maxRef float64
	for i, w := range want {
		maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-w))
		maxRef = math.Max(maxRef, math.Abs(w))
	}
	if e := maxDiff / maxRef; e > 1e-5 {
		t.Errorf("relative error %.3g against the float64 recurrence", e)
	}
}

func relErr(got []float32, want []float64) float64 {
	var maxDiff, maxRef float64
	for i, w := range want {
		maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-w))
		maxRef = math.Max(maxRef, math.Abs(w))
	}
	return maxDiff / maxRef
}

// The chunked form against the float64 recurrence, outputs and final
// state, across chunk boundaries, with a carried initial state; and the
// state it leaves continues correctly into a recurrent decode step.
func TestGatedDeltaRuleChunked(t *testing.T) {
	shapes := []kernels.DeltaShape{
		{KHeads: 2, VHeads: 6, DK: 8, DV: 12, ConvKernel: 4},
		{KHeads: 1, VHeads: 1, DK: 16, DV: 16, ConvKernel: 4},
		{KHeads: 2, VHeads: 4, DK: 40, DV: 24, ConvKernel: 4},
	}
	for si, s := range shapes {
		for _, rows := range []int{1, 63, 64, 65, 200, 257} {
			r := rand.New(rand.NewPCG(uint64(si), uint64(rows)))
			be := New(2)
			qkv := randVec(r, (rows+1)*s.ConvDim(), 1)
			a, b := randVec(r, (rows+1)*s.VHeads, 1), randVec(r, (rows+1)*s.VHeads, 1)
			state := randVec(r, s.RecStateLen(), 0.5)
			aLog, dtBias := randVec(r, s.VHeads, 0.3), randVec(r, s.VHeads, 0.3)
			for i := range aLog {
				aLog[i] -= 3 // slow decay: the state matters across chunks
			}
			want, wantS := naiveDeltaRuleState(qkv, a, b, state, aLog, dtBias, rows+1, s)
			buf := func(v []float32) kernels.Buf { x := be.NewBuf(len(v)); be.Write(x, 0, v); return x }
			al, dt := f32Tensor(t, be, []int{s.VHeads}, aLog), f32Tensor(t, be, []int{s.VHeads}, dtBias)
			od := s.VHeads * s.DV
			dst, st := be.NewBuf(rows*od), buf(state)
			be.gatedDeltaRuleChunked(dst, buf(qkv[:rows*s.ConvDim()]), buf(a[:rows*s.VHeads]), buf(b[:rows*s.VHeads]), st, al, dt, rows, s)
			got := make([]float32, dst.Len())
			be.Read(dst, 0, got)
			if e := relErr(got, want[:rows*od]); e > 1e-5 {
				t.Errorf("shape %d rows %d: output relative error %.3g", si, rows, e)
			}
			// One decode step on the carried state.
			dst1 := be.NewBuf(od)
			be.GatedDeltaRule(dst1, buf(qkv[rows*s.ConvDim():]), buf(a[rows*s.VHeads:]), buf(b[rows*s.VHeads:]), st, al, dt, 1, s)
			got1 := make([]float32, od)
			be.Read(dst1, 0, got1)
			if e := relErr(got1, want[rows*od:]); e > 1e-5 {
				t.Errorf("shape %d rows %d: decode after chunked prefill relative error %.3g", si, rows, e)
			}
			gotS := make([]float32, st.Len())
			be.Read(st, 0, gotS)
			if e := relErr(gotS, wantS); e > 1e-5 {
				t.Errorf("shape %d rows %d: final state relative error %.3g", si, rows, e)
			}
		}
	}
}

// Recurrence against chunked form for a 512-token prefill at the real
// Qwen3-Next shape.
func BenchmarkGatedDeltaRulePrefill(b *testing.B) {
	const rows = 512
	for _, mode := range []string{"recurrent", "chunked"} {
		b.Run(mode, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			s := kernels.DeltaShape{KHeads: 16, VHeads: 32, DK: 128, DV: 128, ConvKernel: 4}
			be := New(0)
			mk := func(n int) kernels.Buf { x := be.NewBuf(n); be.Write(x, 0, randVec(r, n, 1)); return x }
			qkv, a, bb, st := mk(rows*s.ConvDim()), mk(rows*s.VHeads), mk(rows*s.VHeads), be.NewBuf(s.RecStateLen())
			dst := be.NewBuf(rows * s.VHeads * s.DV)
			aLog, dt := f32Tensor(b, be, []int{s.VHeads}, randVec(r, s.VHeads, 1)), f32Tensor(b, be, []int{s.VHeads}, randVec(r, s.VHeads, 1))
			run := be.gatedDeltaRuleRecurrent
			if mode == "chunked" {
				run = be.gatedDeltaRuleChunked
			}
			b.ResetTimer()
			for range b.N {
				run(dst, qkv, a, bb, st, aLog, dt, rows, s)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/token")
		})
	}
}

// Real Qwen3-Next shapes: 16 key heads, 32 value heads, 128×128 state.
func BenchmarkGatedDeltaRule(b *testing.B) {
	for _, rows := range []int{1, 64} {
		b.Run(map[int]string{1: "decode", 64: "prefill64"}[rows], func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			s := kernels.DeltaShape{KHeads: 16, VHeads: 32, DK: 128, DV: 128, ConvKernel: 4}
			be := New(0)
			mk := func(n int) kernels.Buf { x := be.NewBuf(n); be.Write(x, 0, randVec(r, n, 1)); return x }
			qkv, a, bb, st := mk(rows*s.ConvDim()), mk(rows*s.VHeads), mk(rows*s.VHeads), be.NewBuf(s.RecStateLen())
			dst := be.NewBuf(rows * s.VHeads * s.DV)
			aLog, dt := f32Tensor(b, be, []int{s.VHeads}, randVec(r, s.VHeads, 1)), f32Tensor(b, be, []int{s.VHeads}, randVec(r, s.VHeads, 1))
			b.ResetTimer()
			for range b.N {
				be.GatedDeltaRule(dst, qkv, a, bb, st, aLog, dt, rows, s)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/token")
		})
	}
}

// TestCausalConv1D: the convolution with its SiLU against float64 sums
// over the state and the input, the state it leaves, and a pass split in
// two (down to one row: decode) giving the bits of one pass.
func TestCausalConv1D(t *testing.T) { forEachWidth(t, testCausalConv1D) }

func testCausalConv1D(t *testing.T) {
	s := kernels.DeltaShape{KHeads: 2, VHeads: 3, DK: 8, DV: 12, ConvKernel: 4} // 68 channels
	ch, k := s.ConvDim(), s.ConvKernel
	for _, rows := range []int{1, 2, 3, 5, 40} {
		r := rand.New(rand.NewPCG(17, uint64(rows)))
		be := New(3)
		x, state, wv := randVec(r, rows*ch, 1), randVec(r, (k-1)*ch, 1), randVec(r, ch*k, 0.5)
		w := f32Tensor(t, be, []int{ch, k}, wv)
		run := func(lo, hi int, st []float32) []float32 {
			out := &Buf{D: make([]float32, (hi-lo)*ch)}
			be.CausalConv1D(out, &Buf{D: x[lo*ch : hi*ch]}, &Buf{D: st}, w, hi-lo, s)
			return out.D
		}
		st := append([]float32(nil), state...)
		got := run(0, rows, st)
		window := append(append([]float32(nil), state...), x...)
		for tt := range rows {
			for c := range ch {
				var acc float64
				for j := range k {
					acc += float64(wv[c*k+j]) * float64(window[(tt+j)*ch+c])
				}
				want := acc / (1 + math.Exp(-acc))
				if d := math.Abs(float64(got[tt*ch+c]) - want); d > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("rows %d: [%d, %d] = %g, float64 %g", rows, tt, c, got[tt*ch+c], want)
				}
			}
		}
		for i, v := range st {
			if v != window[rows*ch+i] {
				t.Fatalf("rows %d: state[%d] %g, want the window's %g", rows, i, v, window[rows*ch+i])
			}
		}
		split := rows / 2
		st2 := append([]float32(nil), state...)
		parts := append(run(0, split, st2), run(split, rows, st2)...)
		for i := range got {
			if math.Float32bits(parts[i]) != math.Float32bits(got[i]) {
				t.Fatalf("rows %d split at %d: [%d] %g, one pass %g", rows, split, i, parts[i], got[i])
			}
		}
	}
}
