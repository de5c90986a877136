package cuda

// A CPU emulation of the fused one-token DeltaNet mix (hybrid_fused.cu:
// delta_mix_<cw>) with the kernel's index mapping and hybrid_fused.go's
// plan and launch arguments: one cluster per key head, its blocks run
// phase by phase between the block and cluster barriers, each a loop over
// the 256 threads with their registers as arrays and the shared arrays as
// slices; warp sums as the xor butterfly; the gated norm's partial sums
// read from the other blocks' "shared memory". Every access to the conv
// state, the recurrent state and the output is logged with its block and
// phase, and the log is checked for the races the design must exclude: a
// window read by one block and shifted by another before the cluster
// barrier, a channel or state column written twice or not at all. The
// outputs and states are checked against the CPU backend's three ops over
// several steps, no GPU needed.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
)

const emuMW, emuMR, emuMKMax = 8, 16, 4

// emuMixPlan is hybrid_fused.go's deltaMixPlan (that file needs the cuda
// tag).
func emuMixPlan(s kernels.DeltaShape) (cw, tiles, cluster int, ok bool) {
	if s.KHeads < 1 || s.VHeads%s.KHeads != 0 || s.DK < 1 || s.DK > 128 || s.DV < 1 ||
		s.ConvKernel < 1 || s.ConvKernel > 4 {
		return 0, 0, 0, false
	}
	rep, groups := s.VHeads/s.KHeads, (s.DV+31)/32
	if rep > 8 {
		return 0, 0, 0, false
	}
	need := (groups + min(groups, 8/rep) - 1) / min(groups, 8/rep)
	for _, c := range []int{1, 2, 4} {
		if cw == 0 && need <= c {
			cw = c
		}
	}
	if cw == 0 {
		return 0, 0, 0, false
	}
	tiles = (s.DV + 32*cw - 1) / (32 * cw)
	return cw, tiles, rep * tiles, true
}

// Phases of a block, in program order; phaseA and phaseB are the cluster
// barriers.
const (
	phasePre   = iota // before pdlWait: state, windows, weights
	phaseConv         // after it: the inputs, convolution, gates
	phaseRule         // the delta rule and y
	phaseA            // cluster barrier (A)
	phaseNorm         // the gated norm, remote partial sums
	phaseB            // cluster arrive (B)
	phaseStore        // the states
)

// emuAccess is one logged access to a global array.
type emuAccess struct {
	block, cluster, phase int
	write                 bool
}

// emuMem is a global float array with an access log per element.
type emuMem struct {
	v   []float32
	log [][]emuAccess
}

func newEmuMem(v []float32) *emuMem { return &emuMem{v: v, log: make([][]emuAccess, len(v))} }

// emuBlockID is the block doing the current access (set by the emulation).
type emuBlockID struct{ block, cluster, phase int }

func (m *emuMem) ld(at emuBlockID, i int) float32 {
	m.log[i] = append(m.log[i], emuAccess{at.block, at.cluster, at.phase, false})
	return m.v[i]
}

func (m *emuMem) st(at emuBlockID, i int, x float32) {
	m.log[i] = append(m.log[i], emuAccess{at.block, at.cluster, at.phase, true})
	m.v[i] = x
}

// emuWin is convWin.
type emuWin struct {
	w, h [emuMKMax - 1]float32
	last float32
}

func emuLoadWin(at emuBlockID, w []float32, conv *emuMem, c, ch, kc int) emuWin {
	var v emuWin
	for j := 0; j < emuMKMax-1; j++ {
		if j < kc-1 {
			v.w[j] = w[c*kc+j]
			v.h[j] = conv.ld(at, j*ch+c)
		}
	}
	v.last = w[c*kc+kc-1]
	return v
}

func emuConvOut(v emuWin, cur float32, kc int) float32 {
	var acc float32
	for j := 0; j < emuMKMax-1; j++ {
		if j < kc-1 {
			acc += v.w[j] * v.h[j]
		}
	}
	acc += v.last * cur
	return acc * emuSigmoid(acc)
}

func emuStoreWin(at emuBlockID, v emuWin, cur float32, conv *emuMem, c, ch, kc int) {
	for j := 0; j < emuMKMax-1; j++ {
		if j < kc-1 {
			x := cur
			if j+1 < kc-1 {
				x = v.h[min(j+1, emuMKMax-2)]
			}
			conv.st(at, j*ch+c, x)
		}
	}
}

// emuWarpSumD is warpSumD over a warp's 32 lane values: every lane's
// result, in the butterfly's order.
func emuWarpSumD(v [32]float64) [32]float64 {
	for o := 16; o > 0; o >>= 1 {
		var n [32]float64
		for l := range n {
			n[l] = v[l] + v[l^o]
		}
		v = n
	}
	return v
}

// emuMixThread is one thread's registers.
type emuMixThread struct {
	s       [4][emuMR]float32
	wq, wk  emuWin
	xq, xk  float32
	nw, zg  [4]float32
	y       [4]float32
	pq, pk  float64
	qk, isV bool
	jj      int
	cq, ck  int
	cv      int
	ownsQK  bool
}

// emuMixBlock is one block's shared memory and threads.
type emuMixBlock struct {
	qs, ks, vs   []float32
	redK, redQ   [emuMW][]float32
	ssq, ssk     [emuMW]float64
	npart        [4]float64
	gate         [2]float32
	th           [256]emuMixThread
	kh, rank, h  int
	j0           int
	at           emuBlockID
	writeQKEarly bool // a mutant: shift the q/k windows before barrier A
}

// emuMixArgs are delta_mix's arguments.
type emuMixArgs struct {
	core, conv, state           *emuMem
	qkv, z, a, b                []float32
	w, aLog, dtBias, normW      []float32
	kheads, vheads, dk, dv, kc  int
	cw, tiles                   int
	eps                         float32
	mutantEarlyQK, mutantOwners bool
}

// emuDeltaMix runs delta_mix over the whole grid.
func emuDeltaMix(p emuMixArgs) {
	rep := p.vheads / p.kheads
	cs := rep * p.tiles
	W := 32 * p.cw
	kd := p.kheads * p.dk
	ch := 2*kd + p.vheads*p.dv
	for kh := 0; kh < p.kheads; kh++ {
		blocks := make([]*emuMixBlock, cs)
		for rank := range blocks {
			blk := kh*cs + rank
			k := &emuMixBlock{qs: make([]float32, emuMW*emuMR), ks: make([]float32, emuMW*emuMR), vs: make([]float32, W),
				kh: blk / cs, rank: blk % cs, writeQKEarly: p.mutantEarlyQK && rank == 0}
			for w := range k.redK {
				k.redK[w], k.redQ[w] = make([]float32, W), make([]float32, W)
			}
			k.h = k.kh*rep + k.rank/p.tiles
			k.j0 = (k.rank % p.tiles) * W
			k.at = emuBlockID{block: blk, cluster: kh}
			blocks[rank] = k
		}
		// Each block up to barrier A, block after block (the order in which
		// blocks reach the barrier does not matter).
		for _, k := range blocks {
			emuMixUntilA(p, k, cs, W, kd, ch)
		}
		for _, k := range blocks {
			emuMixNorm(p, k, blocks, W)
		}
		for _, k := range blocks {
			emuMixStore(p, k, cs, W, ch)
		}
	}
}

func emuMixUntilA(p emuMixArgs, k *emuMixBlock, cs, W, kd, ch int) {
	S := k.h * p.dk * p.dv
	k.at.phase = phasePre
	for tid := range k.th {
		t := &k.th[tid]
		warp, lane := tid>>5, tid&31
		for c := 0; c < p.cw; c++ {
			j := k.j0 + 32*c + lane
			for m := 0; m < emuMR; m++ {
				if i := warp + emuMW*m; j < p.dv && i < p.dk {
					t.s[c][m] = p.state.ld(k.at, S+i*p.dv+j)
				}
			}
		}
		t.qk = tid < p.dk
		t.jj = tid - p.dk
		t.isV = !t.qk && t.jj < W && k.j0+t.jj < p.dv
		t.cq, t.cv = k.kh*p.dk+tid, 2*kd+k.h*p.dv+k.j0+t.jj
		t.ck = kd + t.cq
		if t.qk {
			t.wq = emuLoadWin(k.at, p.w, p.conv, t.cq, ch, p.kc)
			t.wk = emuLoadWin(k.at, p.w, p.conv, t.ck, ch, p.kc)
			t.ownsQK = tid*cs/p.dk == k.rank
			if p.mutantOwners {
				t.ownsQK = true
			}
		} else if t.isV {
			t.wq = emuLoadWin(k.at, p.w, p.conv, t.cv, ch, p.kc)
		}
		for c := 0; c < p.cw; c++ {
			if j := k.j0 + 32*c + lane; warp == 0 && j < p.dv {
				t.nw[c] = p.normW[j]
			}
		}
	}
	if k.writeQKEarly {
		emuMixStoreQK(p, k, ch)
	}

	// After the wait: convolution, l2 sums, gates (to barrier 1).
	k.at.phase = phaseConv
	for tid := range k.th {
		t := &k.th[tid]
		t.pq, t.pk = 0, 0
		if t.qk {
			t.xq, t.xk = p.qkv[t.cq], p.qkv[t.ck]
			q, kk := emuConvOut(t.wq, t.xq, p.kc), emuConvOut(t.wk, t.xk, p.kc)
			k.qs[tid], k.ks[tid] = q, kk
			t.pq, t.pk = float64(q)*float64(q), float64(kk)*float64(kk)
		} else if t.jj < W {
			k.vs[t.jj] = 0
			if t.isV {
				t.xq = p.qkv[t.cv]
				k.vs[t.jj] = emuConvOut(t.wq, t.xq, p.kc)
			}
		}
	}
	for warp := 0; warp < emuMW; warp++ {
		var q, kk [32]float64
		for l := range q {
			q[l], kk[l] = k.th[warp*32+l].pq, k.th[warp*32+l].pk
		}
		k.ssq[warp], k.ssk[warp] = emuWarpSumD(q)[0], emuWarpSumD(kk)[0]
	}
	negA := -math.Exp(float64(p.aLog[k.h]))
	x := float64(p.a[k.h] + p.dtBias[k.h])
	sp := x
	if x <= 20 {
		sp = math.Log1p(math.Exp(x))
	}
	k.gate[0] = float32(math.Exp(negA * sp))
	k.gate[1] = emuSigmoid(p.b[k.h])
	for tid := 0; tid < 32; tid++ {
		for c := 0; c < p.cw; c++ {
			if j := k.j0 + 32*c + tid; j < p.dv {
				k.th[tid].zg[c] = p.z[k.h*p.dv+j]
			}
		}
	}

	// The delta rule (barriers 2, 3).
	k.at.phase = phaseRule
	var tq, tk float64
	for w := 0; w < emuMW; w++ {
		tq += k.ssq[w]
		tk += k.ssk[w]
	}
	qscale := float32(1 / math.Sqrt(float64(p.dk)))
	iq, ik := float32(1/math.Sqrt(tq+1e-6))*qscale, float32(1/math.Sqrt(tk+1e-6))
	decay, beta := k.gate[0], k.gate[1]
	for tid := range k.th {
		t := &k.th[tid]
		warp, lane := tid>>5, tid&31
		for c := 0; c < p.cw; c++ {
			var mem float32
			for m := 0; m < emuMR; m++ {
				if i := warp + emuMW*m; i < p.dk {
					t.s[c][m] *= decay
					mem += t.s[c][m] * (k.ks[i] * ik)
				}
			}
			k.redK[warp][32*c+lane] = mem
		}
	}
	for tid := range k.th {
		t := &k.th[tid]
		warp, lane := tid>>5, tid&31
		for c := 0; c < p.cw; c++ {
			var tot float32
			for w := 0; w < emuMW; w++ {
				tot += k.redK[w][32*c+lane]
			}
			delta := (k.vs[32*c+lane] - tot) * beta
			var o float32
			for m := 0; m < emuMR; m++ {
				if i := warp + emuMW*m; i < p.dk {
					t.s[c][m] += (k.ks[i] * ik) * delta
					o += t.s[c][m] * (k.qs[i] * iq)
				}
			}
			k.redQ[warp][32*c+lane] = o
		}
	}
	for c := 0; c < p.cw; c++ {
		var sq [32]float64
		for lane := 0; lane < 32; lane++ {
			t := &k.th[lane]
			t.y[c] = 0
			for w := 0; w < emuMW; w++ {
				t.y[c] += k.redQ[w][32*c+lane]
			}
			if k.j0+32*c+lane >= p.dv {
				t.y[c] = 0
			}
			sq[lane] = float64(t.y[c]) * float64(t.y[c])
		}
		k.npart[c] = emuWarpSumD(sq)[0]
	}
}

// emuMixNorm is warp 0 after barrier A.
func emuMixNorm(p emuMixArgs, k *emuMixBlock, cluster []*emuMixBlock, W int) {
	k.at.phase = phaseNorm
	first := k.rank / p.tiles * p.tiles
	var tot float64
	for t := 0; t < p.tiles; t++ {
		for c := 0; c < p.cw; c++ {
			tot += cluster[first+t].npart[c]
		}
	}
	inv := float32(1 / math.Sqrt(tot/float64(p.dv)+float64(p.eps)))
	for lane := 0; lane < 32; lane++ {
		t := &k.th[lane]
		for c := 0; c < p.cw; c++ {
			if j := k.j0 + 32*c + lane; j < p.dv {
				g := t.zg[c]
				p.core.st(k.at, k.h*p.dv+j, t.y[c]*inv*t.nw[c]*(g*emuSigmoid(g)))
			}
		}
	}
}

func emuMixStoreQK(p emuMixArgs, k *emuMixBlock, ch int) {
	for tid := range k.th {
		if t := &k.th[tid]; t.qk && t.ownsQK {
			emuStoreWin(k.at, t.wq, p.qkv[t.cq], p.conv, t.cq, ch, p.kc)
			emuStoreWin(k.at, t.wk, p.qkv[t.ck], p.conv, t.ck, ch, p.kc)
		}
	}
}

func emuMixStore(p emuMixArgs, k *emuMixBlock, cs, W, ch int) {
	k.at.phase = phaseStore
	S := k.h * p.dk * p.dv
	for tid := range k.th {
		t := &k.th[tid]
		warp, lane := tid>>5, tid&31
		for c := 0; c < p.cw; c++ {
			j := k.j0 + 32*c + lane
			for m := 0; m < emuMR; m++ {
				if i := warp + emuMW*m; j < p.dv && i < p.dk {
					p.state.st(k.at, S+i*p.dv+j, t.s[c][m])
				}
			}
		}
		if t.isV {
			emuStoreWin(k.at, t.wq, t.xq, p.conv, t.cv, ch, p.kc)
		}
	}
	if !k.writeQKEarly {
		emuMixStoreQK(p, k, ch)
	}
}

// emuMixRaces checks the access log of one launch: every element written
// exactly once; a conv-state element read by another block than its
// writer only by a block of the writer's cluster before barrier A, the
// writer writing after it; state elements and outputs touched by one
// block only.
func emuMixRaces(conv, state, core *emuMem) error {
	for i, l := range conv.log {
		var w *emuAccess
		for k := range l {
			if l[k].write {
				if w != nil {
					return fmt.Errorf("conv state %d written by blocks %d and %d", i, w.block, l[k].block)
				}
				w = &l[k]
			}
		}
		if w == nil {
			return fmt.Errorf("conv state %d not written", i)
		}
		for _, r := range l {
			if r.write || r.block == w.block {
				continue
			}
			if r.cluster != w.cluster || r.phase >= phaseA || w.phase <= phaseA {
				return fmt.Errorf("conv state %d read by block %d (cluster %d, phase %d), written by block %d (cluster %d, phase %d)",
					i, r.block, r.cluster, r.phase, w.block, w.cluster, w.phase)
			}
		}
	}
	for _, m := range []struct {
		name string
		m    *emuMem
	}{{"state", state}, {"core", core}} {
		for i, l := range m.m.log {
			writes := 0
			for _, a := range l {
				if a.block != l[0].block {
					return fmt.Errorf("%s %d touched by blocks %d and %d", m.name, i, l[0].block, a.block)
				}
				if a.write {
					writes++
				}
			}
			if writes != 1 {
				return fmt.Errorf("%s %d written %d times", m.name, i, writes)
			}
		}
	}
	return nil
}

// emuMixCase runs steps decode steps of shape s through the emulation
// and the CPU backend's three ops from the same random state; mutants
// select a broken variant of the kernel, whose log must show a race.
func emuMixCase(s kernels.DeltaShape, steps int, seed uint64, earlyQK, owners bool) (outN, convN, recN float64, race error) {
	cw, tiles, _, ok := emuMixPlan(s)
	if !ok {
		panic(fmt.Sprintf("plan declines %+v", s))
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	randn := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(scale * rng.NormFloat64())
		}
		return v
	}
	cd, vd := s.ConvDim(), s.VHeads*s.DV
	be := cpu.New(1)
	load := func(v []float32, shape ...int) kernels.Tensor {
		w := &kernels.Weight{Name: "w", DType: kernels.F32, Shape: shape, Data: make([]byte, 4*len(v))}
		for i, x := range v {
			b := math.Float32bits(x)
			w.Data[4*i], w.Data[4*i+1], w.Data[4*i+2], w.Data[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
		}
		t, err := be.LoadWeight(w)
		if err != nil {
			panic(err)
		}
		return t
	}
	w := randn(cd*s.ConvKernel, 1/math.Sqrt(float64(s.ConvKernel)))
	aLog := randn(s.VHeads, 0.3)
	for i := range aLog {
		aLog[i] -= 2
	}
	dtBias, normW := randn(s.VHeads, 1), randn(s.DV, 1)
	wt, alt, dtt, nwt := load(w, cd, 1, s.ConvKernel), load(aLog, s.VHeads), load(dtBias, s.VHeads), load(normW, s.DV)
	convH, recH := randn(s.ConvStateLen(), 1), randn(s.RecStateLen(), 0.5)
	cb, rb := &cpu.Buf{D: append([]float32(nil), convH...)}, &cpu.Buf{D: append([]float32(nil), recH...)}
	gconv, grec := append([]float32(nil), convH...), append([]float32(nil), recH...)
	const eps = 1e-6
	var gotOut, wantOut []float32
	for range steps {
		qkv, z := randn(cd, 1), randn(vd, 1)
		a, b := randn(s.VHeads, 1), randn(s.VHeads, 1)
		tmp, core := &cpu.Buf{D: make([]float32, cd)}, &cpu.Buf{D: make([]float32, vd)}
		be.CausalConv1D(tmp, &cpu.Buf{D: qkv}, cb, wt, 1, s)
		be.GatedDeltaRule(core, tmp, &cpu.Buf{D: a}, &cpu.Buf{D: b}, rb, alt, dtt, 1, s)
		be.RMSNormGated(core, core, &cpu.Buf{D: z}, nwt, s.VHeads, s.DV, eps)

		out := make([]float32, vd)
		for i := range out {
			out[i] = float32(math.NaN())
		}
		om, cm, sm := newEmuMem(out), newEmuMem(gconv), newEmuMem(grec)
		emuDeltaMix(emuMixArgs{core: om, conv: cm, state: sm, qkv: qkv, z: z, a: a, b: b, w: w, aLog: aLog,
			dtBias: dtBias, normW: normW, kheads: s.KHeads, vheads: s.VHeads, dk: s.DK, dv: s.DV, kc: s.ConvKernel,
			cw: cw, tiles: tiles, eps: eps, mutantEarlyQK: earlyQK, mutantOwners: owners})
		if race == nil {
			race = emuMixRaces(cm, sm, om)
		}
		gotOut, wantOut = append(gotOut, out...), append(wantOut, core.D...)
	}
	return nmse32(gotOut, wantOut), nmse32(gconv, cb.D), nmse32(grec, rb.D), race
}

func nmse32(got, want []float32) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - float64(w)
		num += d * d
		den += float64(w) * float64(w)
	}
	if den == 0 {
		return num
	}
	return num / den
}

func TestDeltaMixPlan(t *testing.T) {
	for _, c := range []struct {
		s                 kernels.DeltaShape
		cw, tiles, blocks int
	}{
		{kernels.DeltaShape{KHeads: 16, VHeads: 48, DK: 128, DV: 128, ConvKernel: 4}, 2, 2, 96},  // Qwen3.5-27B
		{kernels.DeltaShape{KHeads: 16, VHeads: 32, DK: 128, DV: 128, ConvKernel: 4}, 1, 4, 128}, // Qwen3-Next
		{kernels.DeltaShape{KHeads: 16, VHeads: 64, DK: 128, DV: 128, ConvKernel: 4}, 2, 2, 128},
		{kernels.DeltaShape{KHeads: 2, VHeads: 16, DK: 128, DV: 128, ConvKernel: 4}, 4, 1, 16},
		{kernels.DeltaShape{KHeads: 2, VHeads: 4, DK: 16, DV: 16, ConvKernel: 4}, 1, 1, 4}, // the fixtures
		{kernels.DeltaShape{KHeads: 2, VHeads: 4, DK: 32, DV: 200, ConvKernel: 3}, 2, 4, 16},
		// Declined: dk over 128, a conv over 4, rep over 8, dv too wide.
		{kernels.DeltaShape{KHeads: 1, VHeads: 2, DK: 256, DV: 40, ConvKernel: 2}, 0, 0, 0},
		{kernels.DeltaShape{KHeads: 1, VHeads: 2, DK: 64, DV: 40, ConvKernel: 5}, 0, 0, 0},
		{kernels.DeltaShape{KHeads: 1, VHeads: 9, DK: 64, DV: 40, ConvKernel: 4}, 0, 0, 0},
		{kernels.DeltaShape{KHeads: 1, VHeads: 3, DK: 64, DV: 512, ConvKernel: 4}, 0, 0, 0},
	} {
		cw, tiles, cluster, ok := emuMixPlan(c.s)
		if ok != (c.cw > 0) || ok && (cw != c.cw || tiles != c.tiles || c.s.KHeads*cluster != c.blocks) {
			t.Errorf("%+v: cw %d tiles %d cluster %d ok %v, want cw %d tiles %d, %d blocks", c.s, cw, tiles, cluster, ok,
				c.cw, c.tiles, c.blocks)
		}
		if ok && (cluster > 8 || 32*cw*tiles < c.s.DV || 32*cw*(tiles-1) >= c.s.DV || c.s.DK+32*cw > 256) {
			t.Errorf("%+v: plan cw %d tiles %d cluster %d outside the kernel's limits", c.s, cw, tiles, cluster)
		}
	}
}

func TestDeltaMixEmulation(t *testing.T) {
	for i, s := range []kernels.DeltaShape{
		{KHeads: 2, VHeads: 4, DK: 16, DV: 16, ConvKernel: 4},     // the fixtures
		{KHeads: 16, VHeads: 48, DK: 128, DV: 128, ConvKernel: 4}, // Qwen3.5-27B
		{KHeads: 4, VHeads: 8, DK: 128, DV: 128, ConvKernel: 4},   // Qwen3-Next's tiling
		{KHeads: 2, VHeads: 6, DK: 8, DV: 12, ConvKernel: 4},
		{KHeads: 3, VHeads: 3, DK: 100, DV: 70, ConvKernel: 1},
		{KHeads: 2, VHeads: 4, DK: 32, DV: 200, ConvKernel: 3},
		{KHeads: 1, VHeads: 8, DK: 64, DV: 128, ConvKernel: 2},
	} {
		outN, convN, recN, race := emuMixCase(s, 3, uint64(i), false, false)
		t.Logf("%+v: nmse out %.2e conv %.2e state %.2e", s, outN, convN, recN)
		if race != nil {
			t.Errorf("%+v: %v", s, race)
		}
		if !(outN < 1e-10) || !(convN == 0) || !(recN < 1e-10) {
			t.Errorf("%+v: nmse out %.2e conv %.2e state %.2e", s, outN, convN, recN)
		}
	}
}

// TestDeltaMixEmulationCatchesRaces checks the log check itself: a kernel
// that shifts the q/k windows before the cluster barrier, or lets every
// block shift them, must be reported.
func TestDeltaMixEmulationCatchesRaces(t *testing.T) {
	s := kernels.DeltaShape{KHeads: 2, VHeads: 6, DK: 16, DV: 64, ConvKernel: 4}
	for _, m := range []struct {
		name          string
		early, owners bool
	}{{"early q/k shift", true, false}, {"every block shifts", false, true}} {
		if _, _, _, race := emuMixCase(s, 1, 1, m.early, m.owners); race == nil {
			t.Errorf("%s: no race reported", m.name)
		} else {
			t.Logf("%s: %v", m.name, race)
		}
	}
}
