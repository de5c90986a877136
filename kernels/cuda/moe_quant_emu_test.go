package cuda

// A CPU emulation of the GGUF expert GEMVs (moe_quant.cu: moe_gateup_<fmt>,
// moe_down_<fmt>) with the kernels' index mapping and moe_quant.go's launch
// arguments: the expert table, the grids, the warp per output, the lanes
// striding over sub-blocks (gate/up) or over the flattened (slot,
// sub-block) pairs (down), subAddr's byte offsets, the h layout and the
// routing buffer's ids and weights. A sub-block is decoded by
// quant.DequantizeRow on the block subAddr points at (sub32 matches it bit
// for bit: conformance's QEmbed checks that on the GPU), so the test checks
// the indexing against the CPU backend's MoEExperts (host grouping, the
// reference conformance uses), no GPU needed.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/kernels/quant"
)

// emuValidBlocks returns rows×cols elements of dt as random blocks whose
// values are finite and moderate: random bytes, each block drawn again
// until it decodes to values within ±16 (most draws of an fp16 scale are
// fine; NaN, infinity and huge scales are rejected).
func emuValidBlocks(rng *rand.Rand, dt kernels.DType, rows, cols int) []byte {
	rb, err := dt.RowBytes(cols)
	if err != nil {
		panic(err)
	}
	bb, be := dt.BlockBytes(), dt.BlockElems()
	b := make([]byte, rows*rb)
	v := make([]float32, be)
	for o := 0; o < len(b); o += bb {
		blk := b[o : o+bb]
	draw:
		for {
			for i := range blk {
				blk[i] = byte(rng.Uint32())
			}
			if err := quant.DequantizeRow(dt, blk, v); err != nil {
				panic(err)
			}
			for _, x := range v {
				if !(math.Abs(float64(x)) <= 16) {
					continue draw
				}
			}
			break
		}
	}
	return b
}

// emuMoE is one GGUF expert set as the kernels see it: per expert the
// uploaded bytes (plus quantPad), the formats and the row sizes that
// moeQuantExperts passes.
type emuMoE struct {
	gu, dn            kernels.DType
	gate, up, down    [][]byte
	e, k, hid, inter  int
	rbGU, rbDown      int
	wGate, wUp, wDown []*kernels.Weight
}

func newEmuMoE(rng *rand.Rand, gu, dn kernels.DType, e, k, hid, inter int) *emuMoE {
	m := &emuMoE{gu: gu, dn: dn, e: e, k: k, hid: hid, inter: inter}
	m.rbGU, _ = gu.RowBytes(hid)
	m.rbDown, _ = dn.RowBytes(inter)
	for range e {
		for _, p := range []struct {
			name    string
			dt      kernels.DType
			out, in int
			dev     *[][]byte
			w       *[]*kernels.Weight
		}{{"gate", gu, inter, hid, &m.gate, &m.wGate}, {"up", gu, inter, hid, &m.up, &m.wUp},
			{"down", dn, hid, inter, &m.down, &m.wDown}} {
			data := emuValidBlocks(rng, p.dt, p.out, p.in)
			*p.w = append(*p.w, &kernels.Weight{Name: p.name, DType: p.dt, Shape: []int{p.out, p.in}, Data: data})
			// The upload's padding (quant.go's quantPad: 64 bytes).
			*p.dev = append(*p.dev, append(append([]byte(nil), data...), make([]byte, 64)...))
		}
	}
	return m
}

// emuSub is subAddr + sub32: sub-block t of the row at byte offset row of
// an expert's bytes, 32 values.
func emuSub(dt kernels.DType, dev []byte, row, t int) []float32 {
	spb := dt.BlockElems() / 32
	s := t % spb
	blk := row + (t/spb)*dt.BlockBytes()
	v := make([]float32, dt.BlockElems())
	if err := quant.DequantizeRow(dt, dev[blk:blk+dt.BlockBytes()], v); err != nil {
		panic(err)
	}
	return v[32*s : 32*s+32]
}

func emuDot32(w, x []float32) float32 {
	var s float32
	for i := range w {
		s += w[i] * x[i]
	}
	return s
}

// emuWarpSum is warpSum's butterfly over 32 lane values.
func emuWarpSum(v *[32]float32) float32 {
	for o := 16; o > 0; o >>= 1 {
		var n [32]float32
		for l := range n {
			n[l] = v[l] + v[l^o]
		}
		*v = n
	}
	return v[0]
}

func emuExpertOf(sel []float32, r, K, k, E int) int {
	f := sel[r*2*K+k]
	if f >= 0 && f < float32(E) {
		return int(f)
	}
	return -1
}

// run is moeQuantExperts: both launches, every block, warp and lane.
func (m *emuMoE) run(x, sel []float32, rows int) []float32 {
	K, E, hid, inter := m.k, m.e, m.hid, m.inter
	h := make([]float32, rows*K*inter)
	// moe_gateup_<gu>: grid (cdiv(inter, 8), rows*K), 256 threads.
	for by := 0; by < rows*K; by++ {
		for bx := 0; bx < cdivEmu(inter, 8); bx++ {
			for warp := 0; warp < 8; warp++ {
				r, k := by/K, by%K
				o := bx*8 + warp
				if o >= inter {
					continue
				}
				e := emuExpertOf(sel, r, K, k, E)
				var g, u [32]float32
				if e >= 0 {
					nsub := hid >> 5
					for lane := 0; lane < 32; lane++ {
						for t := lane; t < nsub; t += 32 {
							xv := x[r*hid+32*t : r*hid+32*t+32]
							g[lane] += emuDot32(emuSub(m.gu, m.gate[e], o*m.rbGU, t), xv)
							u[lane] += emuDot32(emuSub(m.gu, m.up[e], o*m.rbGU, t), xv)
						}
					}
				}
				gs, us := emuWarpSum(&g), emuWarpSum(&u)
				v := float32(0)
				if e >= 0 {
					v = gs / (1 + float32(math.Exp(float64(-gs)))) * us
				}
				h[(r*K+k)*inter+o] = v
			}
		}
	}
	// moe_down_<dn>: grid (cdiv(hidden, 8), rows), 256 threads.
	y := make([]float32, rows*hid)
	for by := 0; by < rows; by++ {
		for bx := 0; bx < cdivEmu(hid, 8); bx++ {
			for warp := 0; warp < 8; warp++ {
				r, o := by, bx*8+warp
				if o >= hid {
					continue
				}
				nsub := inter >> 5
				ws := sel[r*2*K+K:]
				var acc [32]float32
				for lane := 0; lane < 32; lane++ {
					for j := lane; j < K*nsub; j += 32 {
						k, t := j/nsub, j%nsub
						e := emuExpertOf(sel, r, K, k, E)
						if e < 0 {
							continue
						}
						hv := h[(r*K+k)*inter+32*t : (r*K+k)*inter+32*t+32]
						acc[lane] += ws[k] * emuDot32(emuSub(m.dn, m.down[e], o*m.rbDown, t), hv)
					}
				}
				y[r*hid+o] = emuWarpSum(&acc)
			}
		}
	}
	return y
}

func cdivEmu(a, b int) int { return (a + b - 1) / b }

// reference is the CPU backend's MoEExperts on the same weights.
func (m *emuMoE) reference(t *testing.T, x, sel []float32, rows int) []float32 {
	be := cpu.New(1)
	load := func(ws []*kernels.Weight) []kernels.Tensor {
		var ts []kernels.Tensor
		for _, w := range ws {
			tn, err := be.LoadWeight(w)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, tn)
		}
		return ts
	}
	r := &kernels.Router{Experts: m.e, TopK: m.k, NormTopK: true}
	set, err := be.NewExperts(r, load(m.wGate), load(m.wUp), load(m.wDown))
	if err != nil {
		t.Fatal(err)
	}
	xb, sb, yb := be.NewBuf(len(x)), be.NewBuf(len(sel)), be.NewBuf(rows*m.hid)
	be.Write(xb, 0, x)
	be.Write(sb, 0, sel)
	be.MoEExperts(set, yb, xb, sb, rows)
	y := make([]float32, rows*m.hid)
	be.Read(yb, 0, y)
	return y
}

// TestMoEQuantEmulation runs every GGUF format the CUDA backend executes
// as gate/up, each with another format as down, at a width whose
// sub-blocks wrap the 32 lanes (hidden 1280: 40) and a down pass whose
// (slot, sub-block) pairs do not fill the last lane step (3 × 24 = 72);
// slots naming no expert (an id out of range) must add nothing.
func TestMoEQuantEmulation(t *testing.T) {
	if testing.Short() {
		t.Skip("emulation")
	}
	var dts []kernels.DType
	for d := kernels.DType(0); d.Valid(); d++ {
		if kernels.Executes("cuda", d) && d.BlockElems() > 1 {
			dts = append(dts, d)
		}
	}
	if len(dts) < 10 {
		t.Fatalf("only %d GGUF formats execute on cuda: %v", len(dts), dts)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const e, k, hid, inter = 5, 3, 1280, 768
	for i, gu := range dts {
		dn := dts[(i+7)%len(dts)]
		t.Run(fmt.Sprintf("%s-%s", gu, dn), func(t *testing.T) {
			m := newEmuMoE(rng, gu, dn, e, k, hid, inter)
			for _, rows := range []int{1, 3} {
				x := emuRandn(rng, rows*hid, 1)
				sel := make([]float32, kernels.RouteLen(rows, k))
				for r := range rows {
					for j, id := range rng.Perm(e)[:k] {
						sel[r*2*k+j] = float32(id)
						sel[r*2*k+k+j] = 0.05 + rng.Float32()
					}
				}
				if rows > 1 {
					sel[2*k+1] = float32(e) // row 1, slot 1: not an expert
				}
				got, want := m.run(x, sel, rows), m.reference(t, x, sel, rows)
				var num, den float64
				for j := range want {
					d := float64(got[j]) - float64(want[j])
					num += d * d
					den += float64(want[j]) * float64(want[j])
				}
				if nmse := num / den; !(nmse < 1e-10) || den == 0 {
					t.Errorf("rows=%d: NMSE %.3e against the CPU backend (Σy² %.3e)", rows, nmse, den)
				}
			}
		})
	}
}

// TestMoEQuantEmulationChecksLayout: the comparison above is not blind to
// the indexing. A gate/up emulation that reads the wrong expert (the
// slot's neighbour) must miss the reference by far more than rounding.
func TestMoEQuantEmulationChecksLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := newEmuMoE(rng, kernels.Q4_K, kernels.Q6_K, 4, 2, 512, 256)
	x := emuRandn(rng, 2*512, 1)
	sel := []float32{0, 1, 0.5, 0.5, 2, 3, 0.7, 0.3}
	want := m.reference(t, x, sel, 2)
	m.gate[0], m.gate[1] = m.gate[1], m.gate[0]
	got := m.run(x, sel, 2)
	var num, den float64
	for j := range want {
		d := float64(got[j]) - float64(want[j])
		num += d * d
		den += float64(want[j]) * float64(want[j])
	}
	if num/den < 1e-4 {
		t.Errorf("swapped experts: NMSE %.3e, want it far above rounding", num/den)
	}
}
