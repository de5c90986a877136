package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// TestAttentionBatchInvariant: a pass of many query rows (several tiles
// of several KV heads, on several workers, groups split where the tasks
// would be fewer than the workers; float32 and float16 pools) gives each row the bits that
// a pass of that row alone gives, as a decode step would compute it, for
// GQA groups of 1, 2 and 6 and head sizes on and off the vector loops.
func TestAttentionBatchInvariant(t *testing.T) { forEachWidth(t, testAttentionBatchInvariant) }

func testAttentionBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		kvHeads, group, dk, rows, start, workers int
		half                                     bool
	}{
		{2, 1, 64, 40, 0, 3, false}, {2, 2, 128, 37, 21, 3, false}, {1, 6, 128, 13, 50, 3, false}, {3, 2, 96, 70, 5, 3, false},
		{1, 6, 128, 3, 9, 16, false}, {2, 4, 64, 1, 30, 5, false}, // fewer tiles than workers: groups split
		{2, 2, 128, 37, 21, 3, true}, {3, 2, 96, 70, 5, 3, true}, {2, 4, 64, 1, 30, 5, true}, // float16 pools
	} {
		b := New(c.workers)
		spec := kernels.KVSpec{Layers: 1, Blocks: 16, BlockSize: 16, KVHeads: c.kvHeads, HeadDimK: c.dk, HeadDimV: c.dk, Half: c.half}
		kp, err := b.NewKVPool(spec)
		if err != nil {
			t.Fatal(err)
		}
		n := c.start + c.rows
		table := make([]int32, (n+15)/16)
		for i, blk := range rng.Perm(spec.Blocks)[:len(table)] {
			table[i] = int32(blk)
		}
		kw := c.kvHeads * c.dk
		k, v := make([]float32, n*kw), make([]float32, n*kw)
		for i := range k {
			k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		slots := make([]int32, n)
		for p := range slots {
			slots[p] = table[p/16]*16 + int32(p%16)
		}
		b.StoreKV(kp, 0, &Buf{D: k}, &Buf{D: v}, slots)
		if c.half { // the reference sees what the pool holds
			for i := range k {
				k[i], v[i] = f16ToF32(kernels.F32ToF16(k[i])), f16ToF32(kernels.F32ToF16(v[i]))
			}
		}
		heads := c.kvHeads * c.group
		q := make([]float32, c.rows*heads*c.dk)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		scale := float32(1 / math.Sqrt(float64(c.dk)))
		all := make([]float32, c.rows*heads*c.dk)
		b.Attention(&Buf{D: all}, &Buf{D: q}, kp, 0, kernels.AttnSeq{Table: table, Start: c.start}, c.rows, heads, scale)
		w := heads * c.dk
		for r := range c.rows { // against float64 softmax attention
			for h := range heads {
				kvh, qv := h/c.group, q[(r*heads+h)*c.dk:][:c.dk]
				ps := make([]float64, c.start+r+1)
				var maxS, sum float64 = math.Inf(-1), 0
				for p := range ps {
					for d, x := range qv {
						ps[p] += float64(x) * float64(k[p*kw+kvh*c.dk+d])
					}
					ps[p] *= float64(scale)
					maxS = max(maxS, ps[p])
				}
				for p := range ps {
					ps[p] = math.Exp(ps[p] - maxS)
					sum += ps[p]
				}
				for d := range c.dk {
					var o float64
					for p, wp := range ps {
						o += wp / sum * float64(v[p*kw+kvh*c.dk+d])
					}
					if got := all[(r*heads+h)*c.dk+d]; math.Abs(float64(got)-o) > 1e-5 {
						t.Fatalf("%+v: row %d head %d [%d]: %g, float64 %g", c, r, h, d, got, o)
					}
				}
			}
		}
		for r := range c.rows {
			one := make([]float32, w)
			b.Attention(&Buf{D: one}, &Buf{D: q[r*w : (r+1)*w]}, kp, 0, kernels.AttnSeq{Table: table, Start: c.start + r}, 1, heads, scale)
			for i, x := range one {
				if math.Float32bits(x) != math.Float32bits(all[r*w+i]) {
					t.Fatalf("%+v: row %d, element %d: %g in the pass, %g alone", c, r, i, all[r*w+i], x)
				}
			}
		}
	}
}

// TestMLAttentionBatchInvariant: MLAttention's tasks (heads in runs that
// share each block of latent rows) give every row the bits of a pass of
// that row alone, and the float64 attention over the latent.
func TestMLAttentionBatchInvariant(t *testing.T) { forEachWidth(t, testMLAttentionBatchInvariant) }

func testMLAttentionBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for _, c := range []struct{ heads, dk, dv, rows, start, workers int }{
		{5, 96, 64, 7, 20, 3}, {40, 128, 64, 3, 40, 2}, {3, 64, 32, 1, 70, 16},
	} {
		b := New(c.workers)
		spec := kernels.KVSpec{Layers: 1, Blocks: 8, BlockSize: 16, KVHeads: 1, HeadDimK: c.dk}
		kp, err := b.NewKVPool(spec)
		if err != nil {
			t.Fatal(err)
		}
		n := c.start + c.rows
		table := make([]int32, (n+15)/16)
		for i, blk := range rng.Perm(spec.Blocks)[:len(table)] {
			table[i] = int32(blk)
		}
		lat := make([]float32, n*c.dk)
		for i := range lat {
			lat[i] = float32(rng.NormFloat64())
		}
		slots := make([]int32, n)
		for p := range slots {
			slots[p] = table[p/16]*16 + int32(p%16)
		}
		b.StoreKV(kp, 0, &Buf{D: lat}, nil, slots)
		q := make([]float32, c.rows*c.heads*c.dk)
		for i := range q {
			q[i] = float32(rng.NormFloat64()) * 0.3
		}
		const scale = 0.1
		all := make([]float32, c.rows*c.heads*c.dv)
		b.MLAttention(&Buf{D: all}, &Buf{D: q}, kp, 0, kernels.AttnSeq{Table: table, Start: c.start}, c.rows, c.heads, c.dv, scale, nil)
		w := c.heads * c.dv
		for r := range c.rows {
			for h := range c.heads {
				qv := q[(r*c.heads+h)*c.dk:][:c.dk]
				ps := make([]float64, c.start+r+1)
				var maxS, sum float64 = math.Inf(-1), 0
				for p := range ps {
					for d, x := range qv {
						ps[p] += float64(x) * float64(lat[p*c.dk+d])
					}
					ps[p] *= scale
					maxS = max(maxS, ps[p])
				}
				for p := range ps {
					ps[p] = math.Exp(ps[p] - maxS)
					sum += ps[p]
				}
				for d := range c.dv {
					var o float64
					for p, wp := range ps {
						o += wp / sum * float64(lat[p*c.dk+d])
					}
					if got := all[r*w+h*c.dv+d]; math.Abs(float64(got)-o) > 1e-5 {
						t.Fatalf("%+v: row %d head %d [%d]: %g, float64 %g", c, r, h, d, got, o)
					}
				}
			}
			one := make([]float32, w)
			b.MLAttention(&Buf{D: one}, &Buf{D: q[r*c.heads*c.dk : (r+1)*c.heads*c.dk]}, kp, 0, kernels.AttnSeq{Table: table, Start: c.start + r}, 1, c.heads, c.dv, scale, nil)
			for i, x := range one {
				if math.Float32bits(x) != math.Float32bits(all[r*w+i]) {
					t.Fatalf("%+v: row %d, element %d: %g in the pass, %g alone", c, r, i, all[r*w+i], x)
				}
			}
		}
	}
}

// TestMLAExpandedBatchInvariant: the expanded MLA attention at real head
// sizes (the block kernels' widths), with every position and with a
// selection mask: each row of a pass against float64 attention and
// against a pass of that row alone, bit for bit.
func TestMLAExpandedBatchInvariant(t *testing.T) {
	forEachWidth(t, func(t *testing.T) {
		for _, masked := range []bool{false, true} {
			testMLAExpanded(t, masked)
		}
	})
}

func testMLAExpanded(t *testing.T, masked bool) {
	const dn, dr, dv, heads, h0, hn, rows, start = 128, 64, 128, 4, 1, 2, 21, 50
	rng := rand.New(rand.NewPCG(21, 22))
	ctx := start + rows
	randv := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	q, qpe := randv(rows*heads*(dn+dr), 0.2), randv(rows*heads*dr, 0.2)
	kv, kpe := randv(ctx*hn*(dn+dv), 1), randv(ctx*dr, 1)
	// keep[r][t]: whether row r attends to position t.
	keep := make([][]bool, rows)
	for r := range keep {
		keep[r] = make([]bool, start+r+1)
		for p := range keep[r] {
			keep[r][p] = !masked || rng.IntN(3) > 0 || p == start+r
		}
	}
	maskFor := func(r0, n, st int) kernels.Buf {
		if !masked {
			return nil
		}
		words := kernels.MaskWords(st + n)
		m := make([]float32, n*words)
		for i := range n {
			bits := make([]uint32, words)
			for p, k := range keep[r0+i] {
				if k {
					bits[p/32] |= 1 << (p % 32)
				}
			}
			for w, v := range bits {
				m[i*words+w] = math.Float32frombits(v)
			}
		}
		return &Buf{D: m}
	}
	const scale = 0.07
	b := New(3)
	all := make([]float32, rows*heads*dv)
	b.MLAExpandedAttention(&Buf{D: all}, &Buf{D: q}, &Buf{D: qpe}, &Buf{D: kv}, &Buf{D: kpe},
		kernels.MLAExpanded{Rows: rows, Start: start, Heads: heads, H0: h0, HN: hn, Dn: dn, Dr: dr, Dv: dv, Scale: scale, Mask: maskFor(0, rows, start)})
	for r := range rows {
		for j := range hn {
			h := h0 + j
			var maxS, sum float64 = math.Inf(-1), 0
			ps := make([]float64, start+r+1)
			for p := range ps {
				if !keep[r][p] {
					continue
				}
				for d := range dn {
					ps[p] += float64(q[(r*heads+h)*(dn+dr)+d]) * float64(kv[p*hn*(dn+dv)+j*(dn+dv)+d])
				}
				for d := range dr {
					ps[p] += float64(qpe[(r*heads+h)*dr+d]) * float64(kpe[p*dr+d])
				}
				ps[p] *= scale
				maxS = max(maxS, ps[p])
			}
			for p := range ps {
				if keep[r][p] {
					ps[p] = math.Exp(ps[p] - maxS)
					sum += ps[p]
				}
			}
			for d := range dv {
				var o float64
				for p, wp := range ps {
					if keep[r][p] {
						o += wp / sum * float64(kv[p*hn*(dn+dv)+j*(dn+dv)+dn+d])
					}
				}
				if got := all[(r*heads+h)*dv+d]; math.Abs(float64(got)-o) > 1e-5 {
					t.Fatalf("masked %v: row %d head %d [%d]: %g, float64 %g", masked, r, h, d, got, o)
				}
			}
		}
		one := make([]float32, heads*dv)
		b.MLAExpandedAttention(&Buf{D: one}, &Buf{D: q[r*heads*(dn+dr) : (r+1)*heads*(dn+dr)]}, &Buf{D: qpe[r*heads*dr : (r+1)*heads*dr]}, &Buf{D: kv}, &Buf{D: kpe},
			kernels.MLAExpanded{Rows: 1, Start: start + r, Heads: heads, H0: h0, HN: hn, Dn: dn, Dr: dr, Dv: dv, Scale: scale, Mask: maskFor(r, 1, start+r)})
		for h := h0; h < h0+hn; h++ {
			for d := range dv {
				if x, y := one[h*dv+d], all[(r*heads+h)*dv+d]; math.Float32bits(x) != math.Float32bits(y) {
					t.Fatalf("masked %v: row %d head %d [%d]: %g in the pass, %g alone", masked, r, h, d, y, x)
				}
			}
		}
	}
}

// TestHalfPoolBlocks: a float16 pool's blocks read out as float32 and
// written back hold the same values, copies included.
func TestHalfPoolBlocks(t *testing.T) {
	b := New(1)
	spec := kernels.KVSpec{Layers: 2, Blocks: 4, BlockSize: 4, KVHeads: 2, HeadDimK: 8, HeadDimV: 8, Half: true}
	kp, err := b.NewKVPool(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !kp.Spec().Half {
		t.Fatal("no float16 pool")
	}
	if mla, _ := b.NewKVPool(kernels.KVSpec{Layers: 1, Blocks: 1, BlockSize: 4, KVHeads: 1, HeadDimK: 8, Half: true}); mla.Spec().Half {
		t.Error("a latent pool (no V rows) was made float16")
	}
	rng := rand.New(rand.NewPCG(25, 26))
	n := int(spec.BytesPerBlock() / 4)
	src := make([]float32, n)
	for i := range src {
		src[i] = f16ToF32(kernels.F32ToF16(float32(rng.NormFloat64())))
	}
	b.WriteKVBlock(kp, 1, src)
	b.CopyKVBlock(kp, 3, 1)
	for _, blk := range []int{1, 3} {
		got := make([]float32, n)
		b.ReadKVBlock(kp, blk, got)
		for i := range got {
			if got[i] != src[i] {
				t.Fatalf("block %d [%d]: %g, wrote %g", blk, i, got[i], src[i])
			}
		}
	}
}
